//! SipHash-1-3 (the function and parameters of std's `DefaultHasher`) over a
//! byte string, written out so that a short key costs what its bytes need.
//!
//! Why not `RandomState::hash_one(bytes)`: `Hash for [u8]` feeds a length
//! prefix and then the bytes through `Hasher::write`'s general buffering, so
//! a 7-byte address costs two compression rounds plus ~190 instructions in
//! all (measured, callgrind). Here a key of up to 7 bytes is one block (the
//! length is in the padding, as the SipHash paper specifies) and a whole
//! decision's hash is ~70 instructions. Same keyed PRF, same DoS resistance:
//! without the table's random 128-bit key, an attacker can neither predict
//! a key's hash nor craft colliding keys.

/// SipHash with a 128-bit key: `c` compression and `d` finalisation rounds.
#[derive(Clone, Copy)]
pub(crate) struct Sip {
    k0: u64,
    k1: u64,
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// Little-endian read of `b` (at most 8 bytes), zero-extended.
#[inline(always)]
fn le(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

impl Sip {
    pub(crate) fn new(k0: u64, k1: u64) -> Sip {
        Sip { k0, k1 }
    }

    /// SipHash-1-3 of `bytes`.
    #[inline]
    pub(crate) fn hash(&self, bytes: &[u8]) -> u64 {
        self.hash_rounds::<1, 3>(bytes)
    }

    #[inline(always)]
    pub(crate) fn hash_rounds<const C: usize, const D: usize>(&self, bytes: &[u8]) -> u64 {
        let mut v = [
            self.k0 ^ 0x736f_6d65_7073_6575,
            self.k1 ^ 0x646f_7261_6e64_6f6d,
            self.k0 ^ 0x6c79_6765_6e65_7261,
            self.k1 ^ 0x7465_6462_7974_6573,
        ];
        let compress = |v: &mut [u64; 4], m: u64| {
            v[3] ^= m;
            for _ in 0..C {
                round(v);
            }
            v[0] ^= m;
        };
        let mut blocks = bytes.chunks_exact(8);
        for b in &mut blocks {
            compress(&mut v, le(b));
        }
        let tail = blocks.remainder();
        // The last block: the remaining bytes, the length's low byte on top.
        compress(&mut v, le(tail) | (bytes.len() as u64) << 56);
        v[2] ^= 0xff;
        for _ in 0..D {
            round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::Sip;
    use std::hash::Hasher;

    /// The reference SipHash-2-4 output for the paper's key (00 01 .. 0f)
    /// and message 00 01 .. 0e (15 bytes), from its appendix A.
    #[test]
    fn paper_vector() {
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(
            Sip::new(k0, k1).hash_rounds::<2, 4>(&msg),
            0xa129_ca61_49be_45e5
        );
    }

    /// The same rounds as std's (deprecated, but stable) SipHash-2-4 at
    /// every length across block boundaries; 1-3 differs from it only in
    /// the round counts.
    #[test]
    #[allow(deprecated)]
    fn matches_std_siphash24() {
        let msg: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for (k0, k1) in [(0, 0), (1, 2), (u64::MAX, 0x0123_4567_89ab_cdef)] {
            for len in 0..=msg.len() {
                let mut std = std::hash::SipHasher::new_with_keys(k0, k1);
                std.write(&msg[..len]);
                assert_eq!(
                    Sip::new(k0, k1).hash_rounds::<2, 4>(&msg[..len]),
                    std.finish(),
                    "length {len}"
                );
            }
        }
    }

    /// The function `hash` computes, SipHash-1-3, against std's own: its
    /// `SipHasher13` is unstable, but `DefaultHasher::new()` is SipHash-1-3
    /// with a zero key, and its `write` feeds the bytes as they are (no
    /// length prefix), at every length across block boundaries.
    #[test]
    fn matches_std_siphash13() {
        let msg: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(73) ^ 0xc3).collect();
        for len in 0..=msg.len() {
            let mut std = std::collections::hash_map::DefaultHasher::new();
            std.write(&msg[..len]);
            assert_eq!(
                Sip::new(0, 0).hash(&msg[..len]),
                std.finish(),
                "length {len}"
            );
        }
    }
}
