use std::sync::Arc;

use limits::{ManualClock, Permit, Waiter};
use serde_json::json;

use super::{
    block, changes, dry_run, enforce, forget, key, limiter, set, top, unblock, Change, Rule,
};
use crate::{KeyUsage, Limiter, Limits, Options};

struct W;

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

#[test]
fn show_lists_the_options_the_state_and_the_rules() {
    let o = Options::parse("http://a/", &["--limit=2", "--queue=5", "--group=api"]).unwrap();
    let l: Arc<Limiter<W, Arc<ManualClock>>> =
        Limiter::new(Limits::of(&o), Arc::new(ManualClock::new(1)));
    let rule = Rule {
        from: "http://a/",
        metrics: "plugin.rate_limiter.remap.a",
        counts: [Some(3), None, Some(1), Some(0), Some(0)],
        dry_run: true,
        enforce: 40,
    };
    let v = limiter("api", &o, &l, &[rule]);
    assert_eq!(v["id"], "api");
    assert_eq!(v["group"], "api");
    assert_eq!(
        (v["limit"].clone(), v["queue"].clone()),
        (json!(2), json!(5))
    );
    assert_eq!(
        (v["active"].clone(), v["waiting"].clone()),
        (json!(0), json!(0))
    );
    assert!(v["rate"].is_null() && v["burst"].is_null() && v["fair"].is_null());
    let r = &v["rules"][0];
    assert_eq!(r["admitted"], 3);
    assert!(r["queued"].is_null(), "a metric that could not be made");
    assert_eq!(r["dry_run"], true);
    assert_eq!(r["enforce"], 40);
}

#[test]
fn set_enforce_says_what_the_rules_had() {
    let c = |old: &str, new: &str| {
        Some(Change {
            option: "enforce",
            old: old.into(),
            new: new.into(),
        })
    };
    assert_eq!(enforce(&[100, 100], 50), c("100", "50"));
    assert_eq!(enforce(&[100, 20], 50), c("mixed", "50"));
    assert_eq!(enforce(&[50], 50), None, "nothing changed");
    assert_eq!(enforce(&[], 50), None, "no rule");
}

#[test]
fn top_shows_a_key_by_its_name_or_its_hash() {
    let keys = [
        KeyUsage {
            key: 1,
            active: 2,
            waiting: 1,
            over_rate: 3_500_000,
            tokens: Some(0),
            blocked: 0,
        },
        KeyUsage {
            key: 0xab,
            active: 0,
            waiting: 0,
            over_rate: 0,
            tokens: Some(4),
            blocked: 2_000_000_000,
        },
    ];
    let (summary, v) = top("api", &keys, |k| (k == 1).then(|| "10.0.0.1".to_owned()));
    assert_eq!(summary, "api: 2 key(s), first 10.0.0.1");
    assert_eq!(v["keys"][0]["over_rate_ms"], 3);
    assert_eq!(v["keys"][1]["key"], "#00000000000000ab");
    assert_eq!(v["keys"][1]["blocked_ms"], 2000);
    assert_eq!(
        v["keys"][0]["hash"], "#0000000000000001",
        "named, and its hash too"
    );
    assert_eq!(v["keys"][1]["tokens"], 4);
    assert_eq!(top("api", &[], |_| None).0, "api: 0 key(s), first none");
}

#[test]
fn set_names_each_option_that_changed() {
    let old = Options::parse("http://a/", &["--limit=2", "--rate=10"]).unwrap();
    let new = Options::parse("http://a/", &["--limit=3", "--rate=10"]).unwrap();
    let c = changes(&old, &new);
    assert_eq!(
        c,
        vec![Change {
            option: "limit",
            old: "2".into(),
            new: "3".into()
        }]
    );
    assert!(changes(&old, &old).is_empty());
    let (list, v) = set("api", &c);
    assert_eq!(list, "--limit 2 -> 3");
    assert_eq!(
        v["changed"][0],
        json!({"option": "limit", "old": "2", "new": "3"})
    );
}

#[test]
fn a_dry_run_change_says_what_it_was_mixed_included() {
    assert_eq!(dry_run(&[false, false], false), None);
    assert_eq!(dry_run(&[true], true), None);
    let c = dry_run(&[true, false], true).unwrap();
    assert_eq!(
        (c.option, c.old.as_str(), c.new.as_str()),
        ("dry-run", "mixed", "on")
    );
    assert_eq!(dry_run(&[true], false).unwrap().old, "on");
}

#[test]
fn per_key_answers_say_what_happened_also_for_a_key_not_held() {
    let k = KeyUsage {
        key: 7,
        active: 1,
        waiting: 0,
        over_rate: 0,
        tokens: Some(3),
        blocked: 1_500_000_000,
    };
    let (s, v) = key("api", "ip=192.0.2.7", Some(&k));
    assert_eq!(
        s,
        "api: ip=192.0.2.7: 1 active, 0 waiting, 3 token(s), blocked for 1500 ms more"
    );
    assert_eq!(
        (v["held"].clone(), v["blocked_ms"].clone()),
        (json!(true), json!(1500))
    );
    let over = KeyUsage {
        over_rate: 2_000_000,
        tokens: Some(0),
        blocked: 0,
        ..k
    };
    assert_eq!(
        key("api", "x", Some(&over)).0,
        "api: x: 1 active, 0 waiting, 2 ms over its rate"
    );
    let (s, v) = key("api", "ip=192.0.2.8", None);
    assert_eq!(s, "api: ip=192.0.2.8 is not held (a full bucket, no block)");
    assert_eq!(v["held"], json!(false));
    assert_eq!(block("api", "x", 30).0, "api: x blocked for 30 s");
    assert_eq!(unblock("api", "x", true).0, "api: x unblocked");
    assert_eq!(
        unblock("api", "x", false).0,
        "api: x was not blocked: nothing changed"
    );
    assert_eq!(
        forget("api", "x", false).0,
        "api: x is not held: nothing to forget"
    );
    assert_eq!(
        forget("api", "x", true).1,
        json!({ "id": "api", "key": "x", "forgotten": true })
    );
}
