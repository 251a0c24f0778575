//! The refusal log (`--log=FILE`): what one line says, and the per-rule
//! bound that keeps a flood of refusals from filling the disk.
//!
//! Pure: the plugin hands in the time (monotonic nanoseconds) and writes
//! the lines this decides on to an ATS text log.
//!
//! The bound: in each second (of the monotonic clock) a rule writes at
//! most [`LINES_PER_SECOND`] event lines; the events past that are counted
//! by reason, and once the second is over one `event=suppressed` line gives
//! those counts. So a rule writes at most `LINES_PER_SECOND + 1` lines per
//! second, whatever the load, and every event is either on its own line or
//! counted in a summary.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::admission::Refused;

/// Most event lines one rule writes per second (then one summary line).
pub const LINES_PER_SECOND: u32 = 100;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// Why a request was refused (or, in a dry run, would have been).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// At the concurrency limit and the queue is full (or `--queue=0`).
    QueueFull,
    /// Over the rate and it could not wait for it.
    Rate,
    /// Waited `--maxage` without getting a slot.
    Maxage,
    /// `--key`: every key held is busy, so the client's key has no state.
    KeyTableFull,
    /// `--fair --flow-over=reject`: its flow holds its share.
    FlowOver,
    /// `--store` failed and `--store-failure=closed` refuses.
    StoreFailure,
    /// `--key-missing=refuse`: the request has no key.
    KeyMissing,
    /// `--block`: over the rate, and a block of its key (or the rule)
    /// started. One line per block: requests refused while it holds are
    /// counted in the `blocked` metric, not logged.
    Blocked,
}

impl Reason {
    pub const ALL: [Reason; 8] = [
        Reason::QueueFull,
        Reason::Rate,
        Reason::Maxage,
        Reason::KeyTableFull,
        Reason::FlowOver,
        Reason::StoreFailure,
        Reason::KeyMissing,
        Reason::Blocked,
    ];

    /// As written in the log.
    pub fn name(self) -> &'static str {
        match self {
            Reason::QueueFull => "queue_full",
            Reason::Rate => "rate",
            Reason::Maxage => "maxage",
            Reason::KeyTableFull => "key_table_full",
            Reason::FlowOver => "flow_over",
            Reason::StoreFailure => "store_failure",
            Reason::KeyMissing => "key_missing",
            Reason::Blocked => "blocked",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl From<Refused> for Reason {
    fn from(r: Refused) -> Reason {
        match r {
            Refused::Rate => Reason::Rate,
            Refused::QueueFull => Reason::QueueFull,
            Refused::KeyTableFull => Reason::KeyTableFull,
            Refused::FlowOver => Reason::FlowOver,
            Refused::KeyMissing => Reason::KeyMissing,
            Refused::BlockStarted | Refused::Blocked => Reason::Blocked,
        }
    }
}

/// One event to log.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    /// The rule's metric tag.
    pub rule: &'a str,
    /// The client (after `--trusted-proxies`: possibly `unknown`); `None`
    /// if not read.
    pub client: Option<forwarded::Client>,
    /// The client's key as `top` shows it (`--key`), if known.
    pub key: Option<&'a str>,
    pub reason: Reason,
    /// How long the request waited before the refusal, ms (0 if refused at once).
    pub waited_ms: u64,
    pub dry_run: bool,
}

/// Longest key shown in a line (client-controlled: cut and escaped).
pub const MAX_KEY_CHARS: usize = 128;

impl Event<'_> {
    /// `event=refused rule=api client=192.0.2.7 key=192.0.2.7 reason=rate wait=0.000 dry_run=0`
    /// (`event=expired` for `maxage`; `key=` only with a key).
    pub fn line(&self) -> String {
        let mut s = String::with_capacity(128);
        let event = if self.reason == Reason::Maxage {
            "expired"
        } else {
            "refused"
        };
        let _ = write!(s, "event={event} rule={}", self.rule);
        match self.client {
            Some(c) => {
                let _ = write!(s, " client={c}");
            }
            None => s.push_str(" client=-"),
        }
        if let Some(k) = self.key {
            s.push_str(" key=");
            push_escaped(&mut s, k);
        }
        let _ = write!(
            s,
            " reason={} wait={}.{:03} dry_run={}",
            self.reason.name(),
            self.waited_ms / 1000,
            self.waited_ms % 1000,
            u8::from(self.dry_run)
        );
        s
    }
}

/// Client-controlled text as one `key=value` token: printable ASCII but
/// space, `=` and `%` as is, the rest (bytes) as `%XX`; cut at
/// [`MAX_KEY_CHARS`] (then `…`).
fn push_escaped(out: &mut String, v: &str) {
    for (shown, b) in v.bytes().enumerate() {
        if shown >= MAX_KEY_CHARS {
            out.push('…');
            return;
        }
        if b.is_ascii_graphic() && b != b'=' && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// The lines suppressed in one second, by reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub counts: [u64; Reason::ALL.len()],
}

impl Summary {
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `event=suppressed rule=api lines=1234 rate=1200 queue_full=34`
    /// (reasons with a count only).
    pub fn line(&self, rule: &str) -> String {
        let mut s = format!("event=suppressed rule={rule} lines={}", self.total());
        for r in Reason::ALL {
            let n = self.counts[r.index()];
            if n > 0 {
                let _ = write!(s, " {}={n}", r.name());
            }
        }
        s
    }
}

/// What to write for one event.
#[derive(Debug, PartialEq, Eq)]
pub struct Decision {
    /// The summary of an earlier second, written first.
    pub summary: Option<Summary>,
    /// Write the event's own line.
    pub write: bool,
}

/// A rule's line budget, shared by the threads that refuse its requests.
///
/// Lock-free, because a flood is exactly when every ATS thread refuses at
/// once: past the budget, an event costs two loads and one counter add. The
/// second and the lines written in it are one `AtomicU64` (a line is written
/// only by the thread that moves `written` up, so no second has more than
/// `per_second`); the suppressed counts are taken by the thread that moves
/// the second on. An event counted while the second moves on may land in
/// the summary of the second before or after its own: counted early or
/// late, never lost.
#[derive(Debug)]
pub struct LogBound {
    per_second: u64,
    /// The current second (monotonic nanoseconds / 1e9) above
    /// [`WRITTEN_BITS`], the lines written in it below.
    state: OwnLine,
    suppressed: [AtomicU64; Reason::ALL.len()],
}

/// An atomic on a cache line of its own: every event reads the state,
/// while a flood's events add to the counters beside it.
#[derive(Debug)]
#[repr(align(128))]
struct OwnLine(AtomicU64);

/// Bits of [`LogBound`]'s state that count the lines written in a second;
/// the 40 above count seconds (35 000 years of a monotonic clock).
const WRITTEN_BITS: u32 = 24;
const WRITTEN_MASK: u64 = (1 << WRITTEN_BITS) - 1;
const MAX_SECOND: u64 = u64::MAX >> WRITTEN_BITS;

impl LogBound {
    /// At most `per_second` event lines a second (capped at 2^24 - 1).
    pub fn new(per_second: u32) -> LogBound {
        LogBound {
            per_second: u64::from(per_second).min(WRITTEN_MASK),
            state: OwnLine(AtomicU64::new(0)),
            suppressed: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Starts the second of `now`, handing back the summary of the one
    /// before if it suppressed lines. Time never goes back: an older `now`
    /// counts in the current second. Of threads racing into a new second,
    /// the one that moves it on takes the summary.
    fn roll(&self, now: u64) -> Option<Summary> {
        let second = (now / NANOS_PER_SECOND).min(MAX_SECOND);
        let mut cur = self.state.0.load(Ordering::Acquire);
        loop {
            if second <= cur >> WRITTEN_BITS {
                return None;
            }
            match self.state.0.compare_exchange_weak(
                cur,
                second << WRITTEN_BITS,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return self.take_pending(),
                Err(seen) => cur = seen,
            }
        }
    }

    /// An event at `now`: whether its line is written, and a summary due first.
    pub fn event(&self, now: u64, reason: Reason) -> Decision {
        let summary = self.roll(now);
        let mut cur = self.state.0.load(Ordering::Acquire);
        let write = loop {
            if cur & WRITTEN_MASK >= self.per_second {
                break false;
            }
            match self.state.0.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break true,
                Err(seen) => cur = seen,
            }
        };
        if !write {
            self.suppressed[reason.index()].fetch_add(1, Ordering::Relaxed);
        }
        Decision { summary, write }
    }

    /// Called about every second (with no events, the last second's summary
    /// would wait for the next event).
    pub fn flush(&self, now: u64) -> Option<Summary> {
        self.roll(now)
    }

    /// Events suppressed in the current second so far (not yet summarised).
    pub fn pending(&self) -> u64 {
        self.suppressed
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum()
    }

    /// The summary of the current second so far, if it suppressed lines,
    /// taken now (the rule is going away: its counts would be lost). The
    /// second's budget is unchanged; its later summary counts only later
    /// events.
    pub fn take_pending(&self) -> Option<Summary> {
        let counts: [u64; Reason::ALL.len()] =
            std::array::from_fn(|i| self.suppressed[i].swap(0, Ordering::Relaxed));
        counts.iter().any(|&n| n > 0).then_some(Summary { counts })
    }
}

#[cfg(test)]
mod tests;
