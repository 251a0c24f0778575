//! The datagram format, versions 1 (hits) and 2 (blocks). All integers
//! big-endian.
//!
//! ```text
//! offset  size  field
//! 0       2     magic "DT"
//! 2       1     version: 1 a report of hits, 2 a report of blocks
//! 3       1     group length g (1..=64)
//! 4       8     sender id (random per process start)
//! 12      8     sequence number (per sender, from 0, +1 per datagram)
//! 20      8     sent at, milliseconds since the Unix epoch
//! 28      g     group name (rules/limiters sharing one socket)
//! 28+g    2     entry count
//! ...           entries: tag length (1 byte, 1..=255), tag, value (LEB128, 1..=5 bytes, > 0):
//!               hits (version 1), or the block's milliseconds left (version 2)
//! end-32  32    HMAC-SHA256 of every byte before it, keyed by the shared secret
//! ```
//!
//! Blocks (rate_limit's `--block`) are their own version so that a receiver
//! built before them drops them whole (counted as another version) instead
//! of taking a block's milliseconds for hits.
//!
//! A datagram is at most [`MAX_DATAGRAM`] bytes and self-contained: a report
//! is split over as many datagrams as it needs, and losing one loses only
//! its entries.

use crate::auth::Key;

/// Largest datagram sent or accepted (below a 1500-byte Ethernet MTU less
/// IP and UDP headers, with room for tunnels).
pub const MAX_DATAGRAM: usize = 1400;
pub const VERSION: u8 = 1;
/// The version of a report of blocks.
pub const BLOCKS_VERSION: u8 = 2;
pub const MAGIC: [u8; 2] = *b"DT";
pub const MAX_GROUP_LEN: usize = 64;
pub const MAX_TAG_LEN: usize = 255;
pub const MAC_LEN: usize = 32;
const HEADER: usize = 28;
/// Header, a one-byte group, the count and the MAC.
pub const MIN_DATAGRAM: usize = HEADER + 1 + 2 + MAC_LEN;

/// One tag's hits.
pub type Entry = (Box<[u8]>, u32);

/// Why a datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reject {
    /// Shorter than the smallest valid datagram.
    Truncated,
    /// Longer than [`MAX_DATAGRAM`].
    Oversized,
    /// Not a DThrottle datagram (bad magic).
    Garbage,
    /// A version this build does not speak.
    WrongVersion,
    /// Source address not among the allowed senders.
    UnknownSender,
    /// Authentic, from a new sender, but the receiver already tracks its
    /// most senders (each heard within twice the replay window).
    TooManySenders,
    /// The MAC does not match: forged, corrupted, or another secret.
    BadMac,
    /// Sequence number already seen (or older than the window) for this sender.
    Replay,
    /// Sent-at time outside the replay window of the receiver's clock.
    Stale,
    /// Authentic but unparseable (a peer's bug): bad lengths or counts.
    Malformed,
    /// Our own datagram, looped back by multicast.
    Own,
}

/// What a report's entries count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    /// Requests served (version 1).
    #[default]
    Hits,
    /// Blocks started, each with its milliseconds left (version 2).
    Blocks,
}

impl Kind {
    fn version(self) -> u8 {
        match self {
            Kind::Hits => VERSION,
            Kind::Blocks => BLOCKS_VERSION,
        }
    }
}

/// Header fields of an authenticated datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub sender: u64,
    pub seq: u64,
    pub sent_ms: u64,
    pub group: Box<[u8]>,
    pub kind: Kind,
    pub entries: Vec<Entry>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u32) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0x0fff_ffff => 4,
        _ => 5,
    }
}

/// Encodes `entries` as datagrams of at most [`MAX_DATAGRAM`] bytes, numbered
/// from `*seq` (advanced by one per datagram). Entries with an empty or
/// over-long tag or no hits are skipped (the core never produces them);
/// an empty report is no datagram. `group` must be 1..=64 bytes (checked
/// when the configuration is read).
pub fn encode(
    key: &Key,
    sender: u64,
    seq: &mut u64,
    sent_ms: u64,
    group: &[u8],
    entries: &[Entry],
) -> Vec<Vec<u8>> {
    encode_kind(key, sender, seq, sent_ms, group, Kind::Hits, entries)
}

/// [`encode`] for a report of `kind`.
pub fn encode_kind(
    key: &Key,
    sender: u64,
    seq: &mut u64,
    sent_ms: u64,
    group: &[u8],
    kind: Kind,
    entries: &[Entry],
) -> Vec<Vec<u8>> {
    debug_assert!((1..=MAX_GROUP_LEN).contains(&group.len()));
    let group = &group[..group.len().min(MAX_GROUP_LEN)];
    let mut out = Vec::new();
    let mut dg: Vec<u8> = Vec::new();
    let mut count: u16 = 0;
    let count_at = HEADER + group.len();
    let finish = |dg: &mut Vec<u8>, count: &mut u16, out: &mut Vec<Vec<u8>>| {
        if *count == 0 {
            return;
        }
        dg[count_at..count_at + 2].copy_from_slice(&count.to_be_bytes());
        let mac = key.sign(dg);
        dg.extend_from_slice(&mac);
        out.push(std::mem::take(dg));
        *count = 0;
    };
    for (tag, hits) in entries {
        if tag.is_empty() || tag.len() > MAX_TAG_LEN || *hits == 0 {
            continue;
        }
        let len = 1 + tag.len() + varint_len(*hits);
        if !dg.is_empty() && (dg.len() + len + MAC_LEN > MAX_DATAGRAM || count == u16::MAX) {
            finish(&mut dg, &mut count, &mut out);
        }
        if dg.is_empty() {
            dg.extend_from_slice(&MAGIC);
            dg.push(kind.version());
            dg.push(group.len() as u8);
            dg.extend_from_slice(&sender.to_be_bytes());
            dg.extend_from_slice(&seq.to_be_bytes());
            dg.extend_from_slice(&sent_ms.to_be_bytes());
            dg.extend_from_slice(group);
            dg.extend_from_slice(&[0, 0]);
            *seq = seq.wrapping_add(1);
        }
        dg.push(tag.len() as u8);
        dg.extend_from_slice(tag);
        put_varint(&mut dg, *hits);
        count += 1;
    }
    finish(&mut dg, &mut count, &mut out);
    out
}

/// Checks size, magic and version: what can be judged before the MAC.
pub fn precheck(data: &[u8]) -> Result<(), Reject> {
    if data.len() > MAX_DATAGRAM {
        return Err(Reject::Oversized);
    }
    if data.len() < MIN_DATAGRAM {
        return Err(Reject::Truncated);
    }
    if data[..2] != MAGIC {
        return Err(Reject::Garbage);
    }
    if data[2] != VERSION && data[2] != BLOCKS_VERSION {
        return Err(Reject::WrongVersion);
    }
    Ok(())
}

/// Verifies the MAC and parses a datagram that passed [`precheck`].
pub fn open(key: &Key, data: &[u8]) -> Result<Datagram, Reject> {
    precheck(data)?;
    let (body, mac) = data.split_at(data.len() - MAC_LEN);
    if !key.verify(body, mac) {
        return Err(Reject::BadMac);
    }
    parse(body).ok_or(Reject::Malformed)
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn parse(body: &[u8]) -> Option<Datagram> {
    let glen = usize::from(*body.get(3)?);
    if !(1..=MAX_GROUP_LEN).contains(&glen) {
        return None;
    }
    let group = body.get(HEADER..HEADER + glen)?;
    let mut at = HEADER + glen;
    let count = u16::from_be_bytes(body.get(at..at + 2)?.try_into().ok()?);
    at += 2;
    let mut entries = Vec::with_capacity(usize::from(count).min(body.len() / 3));
    for _ in 0..count {
        let tlen = usize::from(*body.get(at)?);
        let tag = body.get(at + 1..at + 1 + tlen)?;
        if tlen == 0 {
            return None;
        }
        at += 1 + tlen;
        let (hits, n) = get_varint(body.get(at..)?)?;
        if hits == 0 {
            return None;
        }
        at += n;
        entries.push((Box::from(tag), hits));
    }
    if at != body.len() {
        return None;
    }
    Some(Datagram {
        sender: u64_at(body, 4)?,
        seq: u64_at(body, 12)?,
        sent_ms: u64_at(body, 20)?,
        group: Box::from(group),
        kind: if body[2] == BLOCKS_VERSION {
            Kind::Blocks
        } else {
            Kind::Hits
        },
        entries,
    })
}

/// LEB128 u32: the value and the bytes it took; `None` if truncated, longer
/// than 5 bytes or above `u32::MAX`.
fn get_varint(b: &[u8]) -> Option<(u32, usize)> {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().take(5).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((u32::try_from(v).ok()?, i + 1));
        }
    }
    None
}
