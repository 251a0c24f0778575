use super::*;

const SAMPLE: &str = "\
version: 1
creator: callgrind-3.19.0
desc: Trigger: Client Request: x
positions: line
events: Ir
summary: 1005

ob=(1) /usr/bin/traffic_server
fl=(1) ???
fn=(1) HttpSM::state_api_callout
0 300
cob=(2) /p/rate_limit.so
cfi=(2) src/lib.rs
cfn=(2) rate_limit::hook
calls=2 0
0 500
fn=(3) TSHttpTxnHookAdd
+2 40
ob=(2)
fl=(2)
fn=(2)
0 400
cob=(1)
cfn=(3)
calls=1 0
0 40
fn=(4) rate_limit::inner
0 10
fn=(5) rate_limit::inner'2
0 5
totals: 1005
";

fn f(o: &str, n: &str) -> Func {
    Func {
        object: o.into(),
        name: n.into(),
    }
}

#[test]
fn self_and_inclusive_costs_with_compressed_names() {
    let p = Profile::parse(SAMPLE).expect("parses");
    assert_eq!(p.total, 1005);
    assert_eq!(p.trigger, "Client Request: x");
    let ts = "/usr/bin/traffic_server";
    let rl = "/p/rate_limit.so";
    assert_eq!(p.self_cost[&f(ts, "HttpSM::state_api_callout")], 300);
    assert_eq!(p.self_cost[&f(ts, "TSHttpTxnHookAdd")], 40);
    assert_eq!(p.self_cost[&f(rl, "rate_limit::hook")], 400);
    // A fn= after the calls block of another object keeps the current ob.
    // A recursive activation (`'2`) counts as the function itself.
    assert_eq!(p.self_cost[&f(rl, "rate_limit::inner")], 15);
    assert_eq!(
        p.calls[&(
            f(ts, "HttpSM::state_api_callout"),
            f(rl, "rate_limit::hook")
        )],
        Calls {
            count: 2,
            inclusive: 500
        }
    );
    assert_eq!(
        p.calls[&(f(rl, "rate_limit::hook"), f(ts, "TSHttpTxnHookAdd"))].inclusive,
        40
    );
}

#[test]
fn inclusive_cost_of_a_function() {
    let p = Profile::parse(SAMPLE).expect("parses");
    // 400 own + 40 in TSHttpTxnHookAdd.
    assert_eq!(p.inclusive(|n| n == "rate_limit::hook"), 440);
    assert_eq!(p.inclusive(|n| n.starts_with("HttpSM::")), 800);
}

#[test]
fn rejects_a_reference_to_an_undefined_name() {
    let bad = "events: Ir\nob=(1)\nfn=(1) x\n0 1\n";
    assert!(Profile::parse(bad).is_err());
}
