//! rate_limit.so's gradual enforcement (`--enforce=PERCENT`, issue 33)
//! against a real traffic_server: a share of the clients is refused for
//! real and the rest are a dry run, the same clients every time, and
//! raising the share live only adds clients (a share out of range:
//! tests/rate_limit.rs, with the other bad options).

use ats_tests::client::Conn;
use ats_tests::{Origin, TrafficServer};

fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

const CLIENTS: usize = 200;

/// Every client's next request (client `i` sends `X-Client: client-i`),
/// in order, on one connection while ATS keeps it.
fn round(ts: &TrafficServer, host: &str) -> Vec<u16> {
    let mut c = Conn::open(ts.port()).expect("connect");
    (0..CLIENTS)
        .map(|i| {
            let id = format!("client-{i}");
            let r = c
                .get(host, &format!("/c{i}"), &[("X-Client", id.as_str())])
                .expect("response");
            if r.header("Connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close"))
            {
                c = Conn::open(ts.port()).expect("connect");
            }
            r.status
        })
        .collect()
}

#[test]
fn a_share_of_the_keys_is_refused_the_same_ones_each_time_and_raising_it_adds_keys() {
    let origin = Origin::start();
    // One token per client and none after it for 1000 s: each client's
    // second request is over its rate.
    let ts = TrafficServer::builder()
        .remap(rule(
            "k.test",
            &origin,
            "--key=header:X-Client --rate=0.001 --burst=1 --queue=0 --enforce=50 \
             --prefix=enf --tag=keyed",
        ))
        .with_manager()
        .start()
        .expect("start");
    assert!(round(&ts, "k.test").iter().all(|&s| s == 200), "the burst");
    let second = round(&ts, "k.test");
    assert!(second.iter().all(|&s| s == 200 || s == 429), "{second:?}");
    let refused = second.iter().filter(|&&s| s == 429).count();
    assert!(
        (CLIENTS * 35 / 100..=CLIENTS * 65 / 100).contains(&refused),
        "{refused} of {CLIENTS} over their rate refused at 50 %"
    );
    // The same clients again: the choice is the key's, not the request's.
    assert_eq!(round(&ts, "k.test"), second, "the same treatment");
    // The others were a dry run, counted as such (twice each).
    let dry = 2 * (CLIENTS - refused) as i64;
    assert_eq!(
        ts.wait_metric("enf.remap.keyed.dry_run_refused", dry),
        Ok(dry)
    );

    // Live, up to 100 %: everyone over the rate is refused now.
    let a = ts.plugin_msg("rate_limit", "set keyed enforce=100");
    assert!(
        a.contains(r#"{"new":"100","old":"50","option":"enforce"}"#),
        "{a}"
    );
    assert!(round(&ts, "k.test").iter().all(|&s| s == 429));
    let a = ts.plugin_msg("rate_limit", "show keyed");
    assert!(a.contains("\"enforce\":100"), "{a}");
    // A dry run is --enforce=0 whatever the share; off again, the share holds.
    ts.plugin_msg("rate_limit", "set keyed dry_run=on");
    assert!(round(&ts, "k.test").iter().all(|&s| s == 200));
    ts.plugin_msg("rate_limit", "set keyed dry_run=off");
    // Down to 20 %: only clients that were refused at 50 % are refused.
    ts.plugin_msg("rate_limit", "set keyed enforce=20");
    let low = round(&ts, "k.test");
    assert!(
        low.iter()
            .zip(&second)
            .all(|(&now, &then)| now == 200 || then == 429),
        "lowering the share only removes clients: {low:?}"
    );
    assert!(low.contains(&429) && low.contains(&200));
    // A bad share changes nothing.
    let a = ts.plugin_msg("rate_limit", "set keyed enforce=101");
    assert!(
        a.contains("'enforce=101' is invalid: allowed enforce= an integer from 0 to 100"),
        "{a}"
    );
    assert_eq!(round(&ts, "k.test"), low);
}

#[test]
fn without_a_key_the_share_is_per_request() {
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(rule(
            "r.test",
            &origin,
            "--rate=0.001 --burst=1 --queue=0 --enforce=50 --prefix=enf --tag=rule",
        ))
        .start()
        .expect("start");
    // The first takes the only token; the rest are all over the rate.
    let all = round(&ts, "r.test");
    assert_eq!(all[0], 200);
    let refused = all[1..].iter().filter(|&&s| s == 429).count();
    assert!(
        (CLIENTS * 35 / 100..=CLIENTS * 65 / 100).contains(&refused),
        "{refused} of {} refused at 50 %",
        CLIENTS - 1
    );
    assert!(all.iter().all(|&s| s == 200 || s == 429), "{all:?}");
}
