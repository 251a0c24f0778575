//! `TxnData`'s spill path inside a real traffic_server. On Traffic Server 10
//! a slot keeps its values in a table keyed by the transaction id and a
//! transaction whose bucket is full spills to its user argument; with
//! probe.so's `--slot-table-bits=0` the table is one bucket of 4, so with
//! more than 4 transactions open at once the others spill. On 9.2 the
//! option is ignored (values always live in the user argument) and the same
//! test must pass.
//!
//! What it checks, for two waves of parked requests, each with more than 4
//! values stored at once (proved by the probe's own count, so on 10 some of
//! them were in the argument):
//! - every response carries its own transaction's state (the mark its
//!   request chose, read back from the slot at SEND_RESPONSE_HDR) and a
//!   state id no other transaction had;
//! - every stored value is dropped at TXN_CLOSE: the probe's live-states
//!   gauge returns to 0 once a witness counter proves the metrics synced;
//! - the second wave, after the first was reaped, works the same: whatever
//!   the first wave held (table entries, spilled arguments) was freed.

use std::collections::HashSet;
use std::time::Duration;

use ats_tests::{client, rule, Origin, TrafficServer};

const HOST: &str = "slot.test";
/// Requests per wave, all sent at once and parked.
const WAVE: usize = 24;
/// At least this many values must be in the slot at once: with 4 table
/// entries on 10, at least 12 of them were spilled then.
const MIN_OPEN: u64 = 16;
/// How long each request stays parked at POST_REMAP, its state stored.
const PARK_MS: u64 = 1000;

/// Sends a wave of `WAVE` parked requests marked `label-<i>` and checks
/// each response carries its own state; returns how many values the probe
/// held at most when a response went out.
fn wave(ts: &TrafficServer, label: &'static str) -> u64 {
    let port = ts.port();
    let results = client::burst(WAVE, move |i| {
        let mark = format!("{label}-{i}");
        client::get(
            port,
            HOST,
            &format!("/park/{PARK_MS}"),
            &[("X-Probe-Mark", mark.as_str())],
        )
    });
    let mut ids = HashSet::new();
    let mut most_live = 0;
    for (i, r) in results.iter().enumerate() {
        let r = r
            .as_ref()
            .unwrap_or_else(|e| panic!("{label}-{i}: request failed: {e}"));
        assert_eq!(r.status, 200, "{label}-{i}: {r:?}");
        // Read back from the slot at SEND_RESPONSE_HDR: this transaction's
        // own value, not another's, not none.
        let want = format!("{label}-{i}");
        assert_eq!(
            r.header("X-Probe-Mark"),
            Some(want.as_str()),
            "{label}-{i} got another transaction's state (or none): {r:?}"
        );
        // (ATS's timers may fire a few ms early.)
        assert!(
            r.elapsed >= Duration::from_millis(PARK_MS - 50),
            "{label}-{i} was not parked (no state?): answered in {:?}",
            r.elapsed
        );
        let id: u64 = r
            .header("X-Probe-Txn-State")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{label}-{i}: no state id: {r:?}"));
        assert!(ids.insert(id), "{label}-{i}: state id {id} seen twice");
        let live: u64 = r
            .header("X-Probe-States-Live")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{label}-{i}: no live count: {r:?}"));
        most_live = most_live.max(live);
    }
    assert!(
        most_live >= MIN_OPEN,
        "{label}: at most {most_live} values were in the slot at once, \
         too few to prove the spill (need {MIN_OPEN}; the table holds 4)"
    );
    most_live
}

#[test]
fn spilled_values_are_found_and_reaped_with_a_one_bucket_table() {
    let origin = Origin::start();
    let mut ts = TrafficServer::builder()
        .remap(rule("probe", HOST, &origin, "--slot-table-bits=0"))
        .with_manager()
        .start()
        .expect("start");

    for (n, label) in [(1, "first"), (2, "second")] {
        let most_live = wave(&ts, label);
        eprintln!("{label} wave: up to {most_live} values in the slot at once");
        let stored = i64::try_from(n * WAVE).expect("count");
        // Every value stored was dropped at TXN_CLOSE; the stored counter
        // (bumped after the gauge) proves the 0 is not a metric not synced yet.
        ts.wait_metrics_after(
            &[("plugin.probe.txn_states_stored", stored)],
            &[("plugin.probe.txn_states_live", 0)],
        )
        .unwrap_or_else(|e| panic!("after the {label} wave: {e}"));
        assert_eq!(ts.metric("plugin.probe.requests"), Some(stored));
    }
    assert_eq!(origin.count(), 2 * WAVE);
    assert!(ts.is_running(), "traffic_server exited");
    let diags = ts.diags();
    assert!(
        !diags.contains("probe state already set"),
        "a value was refused by the slot:\n{diags}"
    );
    assert!(!diags.contains("panic"), "{diags}");
}

#[test]
fn bad_slot_table_bits_refuses_the_rule_naming_the_value() {
    let origin = Origin::start();
    for bad in ["21", "+3", ""] {
        let err = TrafficServer::builder()
            .remap(rule(
                "probe",
                HOST,
                &origin,
                &format!("--slot-table-bits={bad}"),
            ))
            .start()
            .err()
            .unwrap_or_else(|| panic!("--slot-table-bits={bad} must refuse the rule"));
        assert!(
            err.diags.contains(&format!(
                "invalid value '{bad}' for --slot-table-bits (allowed: an integer from 0 to 20)"
            )),
            "{bad}: {err:?}"
        );
    }
    // Only the first rule makes the slot: a later one asking for another
    // table is refused rather than silently ignored.
    let remap = rule("probe", HOST, &origin, "--slot-table-bits=0")
        + &rule("probe", "other.test", &origin, "--slot-table-bits=3");
    let err = TrafficServer::builder()
        .remap(remap)
        .start()
        .err()
        .expect("a second rule asking for another table must be refused");
    assert!(
        err.diags.contains(
            "--slot-table-bits=3: the probe's slot was made by the first probe rule, \
             with --slot-table-bits=0; the option only takes effect on that rule"
        ),
        "{err:?}"
    );
}
