use super::*;
use crate::options::Options;

fn set(s: &str) -> Setting {
    Setting::parse(s).expect("a valid setting")
}

fn cmd(target: &str, data: &str) -> Result<Command, String> {
    parse(target, data.as_bytes()).expect("our target")
}

#[test]
fn reload_takes_no_arguments() {
    assert_eq!(cmd("rate_limit", "reload"), Ok(Command::Reload));
    assert_eq!(cmd("rate_limit.reload", ""), Ok(Command::Reload));
    let e = cmd("rate_limit", "reload now").unwrap_err();
    assert!(e.starts_with("reload: wrong arguments"), "{e}");
}

#[test]
fn both_forms_parse() {
    assert_eq!(
        cmd("rate_limit", "show"),
        Ok(Command::Show { target: None })
    );
    assert_eq!(
        cmd("rate_limit.show", "api"),
        Ok(Command::Show {
            target: Some("api".into())
        })
    );
    assert_eq!(
        cmd("rate_limit", " top  api 5 "),
        Ok(Command::Top {
            target: "api".into(),
            n: 5
        })
    );
    assert_eq!(
        cmd("rate_limit", "set api limit=20 rate=2.5 queue=0"),
        Ok(Command::Set {
            target: "api".into(),
            settings: vec![set("limit=20"), set("rate=2.5"), set("queue=0")]
        })
    );
    assert!(parse("throttle", b"show").is_none());
    assert!(parse("rate_limiter", b"show").is_none());
}

#[test]
fn bad_commands_say_what_was_wrong() {
    let e = |target: &str, d: &str| cmd(target, d).expect_err("must fail");
    assert!(e("rate_limit", "shw").starts_with("unknown command 'shw': allowed show"));
    assert!(e("rate_limit", "").starts_with("unknown command ''"));
    assert!(e("rate_limit", "set api").starts_with("set: wrong arguments 'api'"));
    assert!(e("rate_limit", "top").starts_with("top: wrong arguments"));
    assert!(e("rate_limit", "top api 0").starts_with("top: N has an invalid value '0'"));
    assert!(e("rate_limit", "set api limit=0").starts_with("set: 'limit=0' is invalid"));
    assert!(e("rate_limit", "set api limit=-1").contains("an integer from 1"));
    assert!(e("rate_limit", "set api rate=abc").contains("rate= a number"));
    assert!(e("rate_limit", "set api speed=3")
        .contains("allowed limit=, queue=, maxage=, rate=, burst=, block=, dry_run= or enforce="));
    assert_eq!(
        e("rate_limit", "set api enforce=101"),
        "set: 'enforce=101' is invalid: allowed enforce= an integer from 0 to 100"
    );
    assert_eq!(set("enforce=25").enforce_value(), Some(25));
    assert!(set("enforce=25").of_the_rule() && set("dry_run=on").of_the_rule());
    assert!(!set("limit=3").of_the_rule());
    assert_eq!(
        cmd("rate_limit", "set api dry_run=on dry_run=off"),
        Ok(Command::Set {
            target: "api".to_owned(),
            settings: vec![set("dry_run=on"), set("dry_run=off")]
        })
    );
    assert_eq!(
        e("rate_limit", "set api dry_run=yes"),
        "set: 'dry_run=yes' is invalid: allowed dry_run=on or dry_run=off"
    );
    assert!(e("rate_limit", "set api limit").contains("NAME=VALUE"));
    let long = "x".repeat(MAX_COMMAND + 1);
    assert!(e("rate_limit", &long).contains("too long"));
    assert_eq!(
        parse("rate_limit", &[0xff, 0xfe]),
        Some(Err("command is not UTF-8 text".into()))
    );
}

#[test]
fn apply_changes_values_not_the_shape() {
    let o = Options::parse("http://a/", &["--limit=2", "--rate=10"]).unwrap();
    let n = apply(&o, &[set("limit=5"), set("burst=30"), set("maxage=100")]).unwrap();
    assert_eq!(
        (n.limit, n.rate, n.burst, n.maxage_ms),
        (Some(5), Some(10.0), 30, 100)
    );
    let rate_only = Options::parse("http://a/", &["--rate=10"]).unwrap();
    assert!(apply(&rate_only, &[set("limit=5")])
        .unwrap_err()
        .contains("not added"));
    let limit_only = Options::parse("http://a/", &["--limit=2"]).unwrap();
    assert!(apply(&limit_only, &[set("burst=5")])
        .unwrap_err()
        .contains("without a rate"));
    assert!(apply(&o, &[set("rate=0.000001"), set("burst=4294967295")])
        .unwrap_err()
        .contains("too large"));
}

#[test]
fn a_dry_run_is_refused_on_a_store_rule_with_count_status() {
    let parse = |a: &[&str]| Options::parse("http://a/", a).unwrap();
    let store = ["--rate=5", "--store=redis://127.0.0.1:6379"];
    let counted = parse(&[&store[..], &["--count-status=401"]].concat());
    let e = apply(&counted, &[set("dry_run=on")]).unwrap_err();
    assert_eq!(
        e,
        format!(
            "set: dry_run=on on a limiter with --store and --count-status: {}: nothing changed",
            crate::options::DRY_STORE_WHY
        )
    );
    // Off stays allowed, and so is a dry run of either alone.
    assert!(apply(&counted, &[set("dry_run=off")]).is_ok_and(|n| !n.dry_run));
    assert!(apply(&parse(&store), &[set("dry_run=on")]).is_ok_and(|n| n.dry_run));
    let local = parse(&["--rate=5", "--count-status=401"]);
    assert!(apply(&local, &[set("dry_run=on")]).is_ok_and(|n| n.dry_run));
}

#[test]
fn per_key_commands_parse() {
    let t = || ("api".to_owned(), "192.0.2.7".to_owned());
    assert_eq!(
        cmd("rate_limit", "keys api"),
        Ok(Command::Keys {
            target: "api".into(),
            n: KEYS_DEFAULT
        })
    );
    assert_eq!(
        cmd("rate_limit.keys", "api 3"),
        Ok(Command::Keys {
            target: "api".into(),
            n: 3
        })
    );
    let (target, key) = t();
    assert_eq!(
        cmd("rate_limit", "key api 192.0.2.7"),
        Ok(Command::Key {
            target: target.clone(),
            key: key.clone()
        })
    );
    assert_eq!(
        cmd("rate_limit", "block api 192.0.2.7 30"),
        Ok(Command::Block {
            target: target.clone(),
            key: key.clone(),
            seconds: 30
        })
    );
    assert_eq!(
        cmd("rate_limit", "unblock api 192.0.2.7"),
        Ok(Command::Unblock {
            target: target.clone(),
            key: key.clone()
        })
    );
    assert_eq!(
        cmd("rate_limit", "forget api 192.0.2.7"),
        Ok(Command::Forget { target, key })
    );
}

#[test]
fn bad_per_key_commands_say_what_was_wrong() {
    let e = |d: &str| cmd("rate_limit", d).expect_err("must fail");
    assert!(e("keys").starts_with("keys: wrong arguments"));
    assert!(e("keys api 0").starts_with("keys: N has an invalid value '0': allowed 1 to 1000"));
    assert!(e("key api").starts_with("key: wrong arguments 'api'"));
    assert!(e("block api 192.0.2.7").starts_with("block: wrong arguments"));
    assert!(e("block api 192.0.2.7 0")
        .starts_with("block: SECONDS has an invalid value '0': allowed 1 to 86400"));
    assert!(e("block api 192.0.2.7 86401").starts_with("block: SECONDS has an invalid value"));
    assert!(e("block api 192.0.2.7 soon").starts_with("block: SECONDS has an invalid value 'soon'"));
    assert!(e("unblock api").starts_with("unblock: wrong arguments"));
    assert!(e("forget api a b").starts_with("forget: wrong arguments"));
}

#[test]
fn set_changes_the_block_of_a_rate_limiter_only() {
    let o = Options::parse("http://a/", &["--key=ip", "--rate=1", "--block=30"]).unwrap();
    let new = apply(&o, &[set("block=600")]).unwrap();
    assert_eq!(new.block_s, 600);
    let limit_only = Options::parse("http://a/", &["--limit=5"]).unwrap();
    let e = apply(&limit_only, &[set("block=60")]).unwrap_err();
    assert!(
        e.starts_with("set: block= on a limiter without a rate"),
        "{e}"
    );
    let e = Setting::parse("block=0").unwrap_err();
    assert!(
        e.contains("allowed block= an integer from 1 to 86400"),
        "{e}"
    );
}

#[test]
fn limit_settings_pin_a_learned_limit_and_are_refused_as_auto_on_a_fixed_one() {
    let auto = Options::parse("http://a/", &["--limit=auto"]).unwrap();
    let s = set("limit=6");
    assert_eq!(s.limit_value(), Some(Some(6)));
    assert_eq!(set("limit=auto").limit_value(), Some(None));
    assert_eq!(set("queue=3").limit_value(), None);
    // The options keep the file's: the caller pins the controller.
    let new = apply(&auto, &[s]).unwrap();
    assert_eq!((new.auto, new.limit), (auto.auto, auto.limit));
    let new = apply(&auto, &[set("limit=auto")]).unwrap();
    assert_eq!(new.auto, auto.auto);
    let fixed = Options::parse("http://a/", &["--limit=5"]).unwrap();
    let e = apply(&fixed, &[set("limit=auto")]).unwrap_err();
    assert!(e.starts_with("set: limit=auto on a fixed limit"), "{e}");
    assert_eq!(apply(&fixed, &[set("limit=9")]).unwrap().limit, Some(9));
}
