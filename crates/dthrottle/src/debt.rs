//! DThrottle's bucket arithmetic, the one implementation shared by
//! [`crate::Buckets`] (the daemon) and rate_limit.so's peered limiter
//! (rate-limit-core's `admission/peered.rs`): how a peer's hits put a GCRA
//! bucket into debt, how far, when a tag may be forgotten, and how a report
//! is merged and cut to its heaviest tags.
//!
//! A bucket is a GCRA theoretical arrival time (TAT; `now` or earlier is a
//! full bucket). `h` hits served by a peer advance it by `h` emission
//! intervals from `max(tat, now)`, exactly as `h` local requests would. A TAT
//! beyond `now + burst·interval` is a bucket below zero: debt. Pure: the
//! caller passes `now` from its injected clock.

use limits::{GcraParams, Nanos};

use crate::Report;

/// Most debt peers' reports can put on a tag: one day of the bucket's time
/// below zero, i.e. its TAT at most a full bucket's span plus one day ahead
/// of now (a full bucket may span up to a year, so the cap must count from
/// the bottom of the bucket, not from now). Far above any honest report (a
/// period's hits); it keeps TAT arithmetic away from `u64::MAX`, and bounds
/// how long one authentic report with a huge count can refuse a tag and
/// keep it from eviction ([`debt_until`] at most one day ahead).
/// The same as the local charges' cap (`limits::MAX_DEBT`, `--count-status`).
pub const MAX_PEER_DEBT: Nanos = limits::MAX_DEBT;

/// A full bucket's span: how far ahead of now a TAT may be before the
/// bucket is below zero.
#[inline]
fn full_span(params: &GcraParams) -> Nanos {
    params.interval().saturating_mul(u64::from(params.burst()))
}

/// The TAT after a peer reports `hits` for the bucket at `now`.
#[inline]
pub fn apply_hits(tat: Nanos, now: Nanos, hits: u32, params: &GcraParams) -> Nanos {
    let debt = params.interval().saturating_mul(u64::from(hits));
    let cap = now
        .saturating_add(full_span(params))
        .saturating_add(MAX_PEER_DEBT);
    // Never moves a TAT back (one already past the cap stays).
    tat.max(now).saturating_add(debt).min(cap).max(tat)
}

/// Until when a bucket with this TAT is below zero (0 or past: not in debt).
#[inline]
pub fn debt_until(tat: Nanos, params: &GcraParams) -> Nanos {
    tat.saturating_sub(full_span(params))
}

/// Whether a tag's bucket is below zero: the tag is sticky then (kept while
/// an idle tag can be evicted instead; forgetting it hands the client a
/// fresh burst). Unreported hits do not keep a tag: an evicted tag's hits
/// are carried to the next report (`crate::evicted`).
///
/// Why debt is sticky and not busy: peers' reports put a tag in debt only
/// for hits its client was served (over `burst` across the fleet within a
/// report period), so a client can make many tags sticky. Were they never
/// evicted, enough such tags would fill the table and refuse every new
/// client. Sticky, they are evicted only when eviction finds no idle tag,
/// and then the cost is one fresh burst to a client that was over its rate.
#[inline]
pub fn in_debt(debt_until: Nanos, now: Nanos) -> bool {
    debt_until > now
}

/// Tokens in a bucket with this TAT at `now` (negative: debt).
pub fn level(tat: Nanos, now: Nanos, params: &GcraParams) -> f64 {
    let ahead = tat.saturating_sub(now) as f64 / params.interval() as f64;
    f64::from(params.burst()) - ahead
}

/// A report of `(tag, hits)`: one entry per tag (a tag evicted and seen
/// again has two: their hits are added), heaviest first (ties by tag), at
/// most `max_tags` of them; the rest counted as dropped.
pub fn report(mut entries: Vec<(Box<[u8]>, u32)>, max_tags: usize) -> Report {
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 = kept.1.saturating_add(later.1);
        }
        same
    });
    entries.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut r = Report::default();
    if entries.len() > max_tags {
        for (_, hits) in entries.drain(max_tags..) {
            r.dropped_tags += 1;
            r.dropped_hits += u64::from(hits);
        }
    }
    r.entries = entries;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use limits::NANOS_PER_SEC;

    fn params() -> GcraParams {
        GcraParams::per_second(1.0, 10)
    }

    #[test]
    fn hits_advance_from_now_and_debt_is_capped_at_a_day() {
        let p = params();
        let now = 1_000 * NANOS_PER_SEC;
        // A refilled bucket (TAT in the past) counts from now.
        assert_eq!(apply_hits(0, now, 3, &p), now + 3 * NANOS_PER_SEC);
        let tat = now + 5 * NANOS_PER_SEC;
        assert_eq!(apply_hits(tat, now, 3, &p), now + 8 * NANOS_PER_SEC);
        // u32::MAX hits: one day below zero, no more, and no overflow anywhere.
        let capped = apply_hits(tat, now, u32::MAX, &p);
        assert_eq!(capped, now + 10 * NANOS_PER_SEC + MAX_PEER_DEBT);
        assert_eq!(apply_hits(capped, now, u32::MAX, &p), capped);
        assert_eq!(
            apply_hits(u64::MAX - 1, u64::MAX - 1, u32::MAX, &p),
            u64::MAX
        );
        // So the tag is free again (not busy) a day later at most.
        let until = debt_until(capped, &p);
        assert!(in_debt(until, now));
        assert!(!in_debt(until, now + MAX_PEER_DEBT));
        assert!((level(capped, now, &p) + 86_400.0).abs() < 1e-6);
    }

    /// A full bucket may span more than a day (up to a year): peers' hits
    /// must still push it below zero, and the tag is still freed within a day.
    #[test]
    fn debt_is_reached_when_a_full_bucket_spans_more_than_a_day() {
        // 2 days of burst at 1/s.
        let p = GcraParams::per_second(1.0, 2 * 86_400);
        let now = 1_000 * NANOS_PER_SEC;
        let capped = apply_hits(0, now, u32::MAX, &p);
        assert!(level(capped, now, &p) < 0.0, "{}", level(capped, now, &p));
        assert!((level(capped, now, &p) + 86_400.0).abs() < 1e-6);
        let until = debt_until(capped, &p);
        assert!(until > now && until <= now + MAX_PEER_DEBT);
        assert!(!in_debt(until, now + MAX_PEER_DEBT));
        // A bucket a year deep, near the end of time: no overflow.
        let year = GcraParams::per_second(1.0, 365 * 86_400);
        assert_eq!(apply_hits(0, u64::MAX - 5, u32::MAX, &year), u64::MAX);
    }

    #[test]
    fn reports_keep_the_heaviest_and_count_the_rest() {
        let e = |t: &str, h| (Box::from(t.as_bytes()), h);
        let r = report(vec![e("a", 1), e("b", 5), e("c", 5), e("d", 2)], 2);
        assert_eq!(r.entries, vec![e("b", 5), e("c", 5)]);
        assert_eq!((r.dropped_tags, r.dropped_hits), (2, 3));
        // An evicted tag seen again: one entry, the hits added.
        let r = report(vec![e("a", 1), e("b", 5), e("a", 6)], 1);
        assert_eq!(r.entries, vec![e("a", 7)]);
        assert_eq!((r.dropped_tags, r.dropped_hits), (1, 5));
    }
}
