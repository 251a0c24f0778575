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
}

impl Reason {
    pub const ALL: [Reason; 7] = [
        Reason::QueueFull,
        Reason::Rate,
        Reason::Maxage,
        Reason::KeyTableFull,
        Reason::FlowOver,
        Reason::StoreFailure,
        Reason::KeyMissing,
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
mod tests {
    use super::*;

    const S: u64 = NANOS_PER_SECOND;

    #[test]
    fn lines_name_every_field() {
        let e = Event {
            rule: "api",
            client: Some(forwarded::Client::Addr("192.0.2.7".parse().unwrap())),
            key: Some("a b=c\u{1}"),
            reason: Reason::Rate,
            waited_ms: 1250,
            dry_run: true,
        };
        assert_eq!(
            e.line(),
            "event=refused rule=api client=192.0.2.7 key=a%20b%3Dc%01 reason=rate wait=1.250 dry_run=1"
        );
        let e = Event {
            client: None,
            key: None,
            reason: Reason::Maxage,
            dry_run: false,
            ..e
        };
        assert_eq!(
            e.line(),
            "event=expired rule=api client=- reason=maxage wait=1.250 dry_run=0"
        );
        let e = Event {
            client: Some(forwarded::Client::Unknown),
            ..e
        };
        assert!(e.line().contains(" client=unknown "), "{}", e.line());
        let long = "x".repeat(1000);
        let e = Event {
            key: Some(&long),
            ..e
        };
        assert!(e.line().len() < 250, "{}", e.line());
    }

    #[test]
    fn reason_names_are_the_documented_set() {
        let names: Vec<&str> = Reason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "queue_full",
                "rate",
                "maxage",
                "key_table_full",
                "flow_over",
                "store_failure",
                "key_missing"
            ]
        );
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }

    #[test]
    fn bounded_per_second_then_one_summary() {
        let b = LogBound::new(3);
        let t = 10 * S;
        let mut written = 0;
        for i in 0..10 {
            let reason = if i % 2 == 0 {
                Reason::Rate
            } else {
                Reason::QueueFull
            };
            let d = b.event(t + i, reason);
            assert_eq!(d.summary, None);
            written += u32::from(d.write);
        }
        assert_eq!(written, 3);
        assert_eq!(b.pending(), 7);
        // Nothing more this second: no summary yet.
        assert_eq!(b.flush(t + S - 1), None);
        let s = b.flush(t + S).expect("summary of the full second");
        assert_eq!(s.total(), 7);
        assert_eq!(
            s.line("api"),
            "event=suppressed rule=api lines=7 queue_full=4 rate=3"
        );
        // The next second starts with a fresh budget; no second summary.
        assert_eq!(b.flush(t + 2 * S), None);
        assert!(b.event(t + 2 * S, Reason::Rate).write);
    }

    #[test]
    fn pending_counts_are_taken_once() {
        let b = LogBound::new(1);
        assert_eq!(b.take_pending(), None);
        assert!(b.event(S, Reason::Rate).write);
        assert!(!b.event(S, Reason::Rate).write);
        assert!(!b.event(S, Reason::FlowOver).write);
        let s = b.take_pending().expect("the second's suppressed events");
        assert_eq!(
            s.line("api"),
            "event=suppressed rule=api lines=2 rate=1 flow_over=1"
        );
        assert_eq!(b.pending(), 0);
        // Taken: neither taken again nor summarised when the second ends.
        assert_eq!(b.take_pending(), None);
        assert_eq!(b.flush(2 * S), None);
    }

    #[test]
    fn a_summary_due_comes_with_the_next_event() {
        let b = LogBound::new(1);
        assert!(b.event(S, Reason::Rate).write);
        assert!(!b.event(S, Reason::Rate).write);
        let d = b.event(5 * S, Reason::Maxage);
        assert!(d.write);
        assert_eq!(d.summary.map(|s| s.total()), Some(1));
    }

    #[test]
    fn time_going_back_counts_in_the_current_second() {
        let b = LogBound::new(1);
        assert!(b.event(5 * S, Reason::Rate).write);
        assert!(!b.event(4 * S, Reason::Rate).write);
        assert_eq!(b.flush(3 * S), None);
    }

    /// Threads racing through ten seconds (each at its own pace, so one may
    /// still be in a second another has left): no more lines than ten
    /// seconds' budgets, and every event written or counted exactly once.
    #[test]
    fn racing_threads_keep_the_bound_and_lose_nothing() {
        const THREADS: u64 = 4;
        const EVENTS: u64 = 20_000;
        const SECONDS: u64 = 10;
        let b = LogBound::new(7);
        let totals: Vec<(u64, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let b = &b;
                    s.spawn(move || {
                        let (mut written, mut summarised) = (0, 0);
                        for i in 0..EVENTS {
                            let now = (i * SECONDS / EVENTS) * S + t;
                            let d = b.event(now, Reason::ALL[(i % 7) as usize]);
                            summarised += d.summary.map_or(0, |s| s.total());
                            written += u64::from(d.write);
                        }
                        (written, summarised)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let written: u64 = totals.iter().map(|t| t.0).sum();
        let summarised: u64 = totals.iter().map(|t| t.1).sum();
        let left = b.take_pending().map_or(0, |s| s.total());
        assert!((7..=7 * SECONDS).contains(&written), "{written} lines");
        assert_eq!(written + summarised + left, THREADS * EVENTS);
    }

    proptest::proptest! {
        /// Whatever the events: at most `n` event lines and one summary per
        /// second, and every event is written or counted exactly once.
        #[test]
        fn bound_holds_and_nothing_is_lost(
            n in 0u32..20,
            steps in proptest::collection::vec((0u64..3 * S / 2, 0usize..7, proptest::bool::ANY), 0..400),
        ) {
            let b = LogBound::new(n);
            let mut now = 0u64;
            let mut lines_in: std::collections::HashMap<u64, u32> = Default::default();
            let (mut events, mut written, mut summarised) = (0u64, 0u64, 0u64);
            for (dt, r, flush) in steps {
                now += dt;
                let sec = now / S;
                if flush {
                    if let Some(s) = b.flush(now) {
                        summarised += s.total();
                        *lines_in.entry(sec).or_default() += 1;
                    }
                    continue;
                }
                events += 1;
                let d = b.event(now, Reason::ALL[r]);
                if let Some(s) = d.summary {
                    proptest::prop_assert!(s.total() > 0);
                    summarised += s.total();
                    *lines_in.entry(sec).or_default() += 1;
                }
                if d.write {
                    written += 1;
                    *lines_in.entry(sec).or_default() += 1;
                }
            }
            for (_, l) in lines_in {
                proptest::prop_assert!(l <= n + 1);
            }
            proptest::prop_assert_eq!(written + summarised + b.pending(), events);
        }
    }
}
