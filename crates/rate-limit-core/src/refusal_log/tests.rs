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
            "key_missing",
            "blocked"
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
