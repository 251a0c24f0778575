//! The load bench's configurations: no plugin, upstream's rate_limit.so,
//! our rate_limit.so, throttle.so and ip_throttle.so with limits that are
//! never reached, and an A/A control. `ats-bench icount` measures the same
//! ones and a few of its own (`icount_cli.rs`).

use crate::load::Variant;

/// Upstream's plugin of the Traffic Server under test (`ATS_PREFIX`; for
/// Debian's 9.2 from trafficserver-experimental-plugins).
pub(crate) fn upstream() -> String {
    ats_tests::ats::upstream_plugin("rate_limit")
}

/// Options both rate_limit.so get in the load bench: a limit that is never
/// reached and a queue, so both run their normal admission path (a slot
/// taken in remap, released at TXN_CLOSE) with queueing configured as a
/// deployment would have it. With a queue, upstream 9.2 also runs its
/// 200 ms sweeper; that is part of what it costs.
const RL_LOAD_OPTIONS: &[&str] = &["--limit=1000000", "--queue=1000"];
/// throttle.so with a `max` that is never reached.
const THROTTLE_LOAD_OPTIONS: &[&str] = &["max:1000000"];
/// ip_throttle.so's options: `--threshold=0` keeps a client on the allowed
/// path (its probation ends at once, so it is allowed again before each
/// request, also with wrk's parallel connections) while every request still
/// visits its state in the table. `ats-bench icount` uses the same options.
pub(crate) const IP_THROTTLE_OPTIONS: &[&str] = &["--threshold=0"];

pub(crate) fn pparams(options: &[&str]) -> String {
    options.iter().map(|o| format!(" @pparam={o}")).collect()
}

pub(crate) fn load_variants(ours_rl: &str, ours_throttle: &str, ours_ip: &str) -> Vec<Variant> {
    vec![
        Variant {
            key: "none",
            label: "no plugin",
            host: "none.bench",
            plugin: String::new(),
        },
        Variant {
            key: "upstream",
            label: "upstream rate_limit.so (C++)",
            host: "upstream.bench",
            plugin: format!("@plugin={}{}", upstream(), pparams(RL_LOAD_OPTIONS)),
        },
        Variant {
            key: "ours",
            label: "our rate_limit.so",
            host: "ours.bench",
            plugin: format!("@plugin={ours_rl}{}", pparams(RL_LOAD_OPTIONS)),
        },
        Variant {
            key: "throttle",
            label: "our throttle.so",
            host: "throttle.bench",
            plugin: format!("@plugin={ours_throttle}{}", pparams(THROTTLE_LOAD_OPTIONS)),
        },
        Variant {
            key: "ip_throttle",
            label: "our ip_throttle.so",
            host: "ip-throttle.bench",
            plugin: format!("@plugin={ours_ip}{}", pparams(IP_THROTTLE_OPTIONS)),
        },
        // A/A control: the same as "none" under another name. How far it
        // lands from "none" is the noise floor of the comparison.
        Variant {
            key: "control",
            label: "no plugin, again (A/A control)",
            host: "control.bench",
            plugin: String::new(),
        },
    ]
}
