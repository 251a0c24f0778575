//! Where a plugin's instructions go, from one callgrind profile.
//!
//! Attribution of a plugin's added instructions, per request:
//! - **own code**: the plugin object's own instructions (Rust std and
//!   everything inlined into it included);
//! - **TS API**: calls from the plugin into `TS*` functions, inclusive
//!   (for `TSHttpTxnReenable`, which may run ATS's state machine on inside
//!   the call, only its own instructions);
//! - **runtime**: other calls out of the plugin (ld.so's `__tls_get_addr`,
//!   libc's malloc/free/clock_gettime, libstdc++ for the C++ plugin);
//! - **ATS machinery**: the rest of the difference to the no-plugin rule:
//!   calling the remap plugin, hook registration and callouts, a longer
//!   hook list on every later hook, re-enabling.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::callgrind::{Func, Profile};

/// API calls that can continue the transaction inside the call.
const REENTRANT: &[&str] = &["TSHttpTxnReenable", "TSHttpSsnReenable"];

/// One window's plugin share, per request.
#[derive(Debug, Default, Clone)]
pub struct Share {
    pub own: f64,
    pub api: f64,
    pub runtime: f64,
    /// name -> Ir per request (own code: self cost).
    pub own_fns: BTreeMap<String, f64>,
    /// callee -> (calls, Ir) per request.
    pub api_calls: BTreeMap<String, (f64, f64)>,
    pub runtime_calls: BTreeMap<String, (f64, f64)>,
    /// Entry points ATS calls, and how often per request.
    pub entries: BTreeMap<String, f64>,
}

/// Splits what `object` (the plugin) executed in `p`, per request.
pub fn share(p: &Profile, object: &str, requests: u64) -> Share {
    let n = requests as f64;
    let mut s = Share::default();
    if object.is_empty() {
        return s;
    }
    for (f, &ir) in &p.self_cost {
        if f.object == object {
            s.own += ir as f64 / n;
            *s.own_fns.entry(f.name.clone()).or_default() += ir as f64 / n;
        }
    }
    // All calls of each re-entrant function, to share out its own cost.
    let mut all_calls: BTreeMap<&str, u64> = BTreeMap::new();
    for ((_, callee), c) in &p.calls {
        if REENTRANT.contains(&callee.name.as_str()) {
            *all_calls.entry(callee.name.as_str()).or_default() += c.count;
        }
    }
    for ((caller, callee), c) in &p.calls {
        let (from, to) = (caller.object == object, callee.object == object);
        if to && !from {
            *s.entries.entry(callee.name.clone()).or_default() += c.count as f64 / n;
        }
        if !from || to {
            continue;
        }
        let ir = if REENTRANT.contains(&callee.name.as_str()) {
            let own = p.self_cost.get(callee).copied().unwrap_or(0) as f64;
            own * c.count as f64 / all_calls[callee.name.as_str()].max(1) as f64
        } else {
            c.inclusive as f64
        } / n;
        let (total, calls) = if callee.name.starts_with("TS") {
            (&mut s.api, &mut s.api_calls)
        } else {
            (&mut s.runtime, &mut s.runtime_calls)
        };
        *total += ir;
        let e = calls.entry(callee.name.clone()).or_default();
        e.0 += c.count as f64 / n;
        e.1 += ir;
    }
    s
}

pub fn average(shares: &[Share]) -> Share {
    let k = shares.len().max(1) as f64;
    let mut out = Share::default();
    for s in shares {
        out.own += s.own / k;
        out.api += s.api / k;
        out.runtime += s.runtime / k;
        for (name, ir) in &s.own_fns {
            *out.own_fns.entry(name.clone()).or_default() += ir / k;
        }
        for (src, dst) in [
            (&s.api_calls, &mut out.api_calls),
            (&s.runtime_calls, &mut out.runtime_calls),
        ] {
            for (name, (c, ir)) in src {
                let e = dst.entry(name.clone()).or_default();
                e.0 += c / k;
                e.1 += ir / k;
            }
        }
        for (name, c) in &s.entries {
            *out.entries.entry(name.clone()).or_default() += c / k;
        }
    }
    out
}

/// Functions that run only inside the TS API calls `object` makes: the
/// `TS*` functions it calls, and (to a fixed point) every function all of
/// whose callers are in that set or in `object` (not through a re-entrant
/// call: what `TSHttpTxnReenable` runs is the state machine). Their cost is already in
/// the TS API share; the machinery list leaves them out.
pub fn inside_api(p: &Profile, object: &str) -> HashSet<Func> {
    let mut callers: HashMap<&Func, Vec<&Func>> = HashMap::new();
    for ((from, to), c) in &p.calls {
        if c.count > 0 && from != to {
            callers.entry(to).or_default().push(from);
        }
    }
    let mut inside: HashSet<Func> = p
        .calls
        .keys()
        .filter(|(from, to)| {
            from.object == object && to.object != object && to.name.starts_with("TS")
        })
        .map(|(_, to)| to.clone())
        .collect();
    loop {
        let more: Vec<Func> = callers
            .iter()
            .filter(|(f, _)| f.object != object && !inside.contains(**f))
            // What a re-entrant call runs (the state machine) is machinery.
            .filter(|(_, cs)| {
                cs.iter().all(|c| {
                    c.object == object
                        || (inside.contains(*c) && !REENTRANT.contains(&c.name.as_str()))
                })
            })
            .map(|(f, _)| (*f).clone())
            .collect();
        if more.is_empty() {
            return inside;
        }
        inside.extend(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = "\
events: Ir
summary: 1000
ob=(1) /usr/bin/traffic_server
fl=(1) ???
fn=(1) HttpSM::state_api_callout
0 300
cob=(2) /p/x.so
cfn=(2) x::hook
calls=1 0
0 900
cob=(3) /lib/libc.so.6
cfn=(5) strcmp
calls=1 0
0 5
fn=(3) TSUserArgGet
0 20
cob=(4) /lib/libstdc++.so.6
cfn=(4) __dynamic_cast
calls=1 0
0 480
fn=(6) TSHttpTxnReenable
0 50
cfn=(1)
calls=1 0
0 5000
ob=(4)
fn=(4)
0 470
cob=(3)
cfn=(5)
calls=1 0
0 10
ob=(3)
fn=(5)
0 15
ob=(2)
fl=(2) x.rs
fn=(2)
0 300
cob=(1)
cfn=(3)
calls=1 0
0 500
cob=(1)
cfn=(6)
calls=1 0
0 5050
cob=(3)
cfn=(7) __tls_get_addr
calls=2 0
0 22
";

    #[test]
    fn splits_own_api_runtime_and_leaves_reenable_its_own_cost() {
        let p = Profile::parse(PROFILE).expect("parses");
        let s = share(&p, "/p/x.so", 1);
        assert_eq!(s.own, 300.0);
        // TSUserArgGet inclusive (500) + TSHttpTxnReenable's own 50, not the
        // 5 050 of the state machine it ran on.
        assert_eq!(s.api, 550.0);
        assert_eq!(s.runtime, 22.0);
        assert_eq!(s.runtime_calls["__tls_get_addr"], (2.0, 22.0));
        assert_eq!(s.entries["x::hook"], 1.0);
    }

    #[test]
    fn functions_only_reached_through_the_api_are_inside_it() {
        let p = Profile::parse(PROFILE).expect("parses");
        let inside = inside_api(&p, "/p/x.so");
        let names: HashSet<&str> = inside.iter().map(|f| f.name.as_str()).collect();
        assert!(names.contains("TSUserArgGet") && names.contains("__dynamic_cast"));
        // strcmp is also called by the state machine itself.
        assert!(!names.contains("strcmp"));
        assert!(!names.contains("HttpSM::state_api_callout"));
    }
}
