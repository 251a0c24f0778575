//! Parsing of every command, good and bad.

use super::*;
use std::net::Ipv4Addr;

fn cmd(target: &str, data: &str) -> Result<Command, String> {
    parse(target, data.as_bytes()).expect("our target")
}

#[test]
fn every_command_parses() {
    assert_eq!(
        cmd("ip_throttle", "reload deny"),
        Ok(Command::Reload {
            what: Reload::List(ListName::Deny),
            rule: None
        })
    );
    assert_eq!(
        cmd("ip_throttle.reload", "config http.t.test"),
        Ok(Command::Reload {
            what: Reload::Config,
            rule: Some("http.t.test".into())
        })
    );
    let ip2 = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    assert_eq!(
        cmd("ip_throttle", "unban 127.0.0.2"),
        Ok(Command::Unban {
            ip: Client::Addr(ip2),
            rule: None
        })
    );
    assert_eq!(
        cmd("ip_throttle.show", "unknown r"),
        Ok(Command::Show {
            ip: Client::Unknown,
            rule: Some("r".into())
        })
    );
    let shown = cmd("ip_throttle", " show  2001:db8::1  r ").unwrap();
    assert_eq!(shown.verb(), "show");
    assert_eq!(shown.rule(), Some("r"));
    assert!(parse("throttle", b"show 1.2.3.4").is_none());
    assert!(parse("ip_throttler", b"show 1.2.3.4").is_none());
}

#[test]
fn bad_commands_say_what_was_wrong() {
    let e = |d: &str| cmd("ip_throttle", d).expect_err(d);
    for (d, want) in [
        (
            "ban 1.2.3.4",
            "unknown command 'ban': allowed reload allow|deny|config",
        ),
        ("", "unknown command ''"),
        ("reload", "reload: wrong arguments ''"),
        (
            "reload lists",
            "reload: 'lists' is not allow, deny or config",
        ),
        ("reload allow a b", "reload: wrong arguments 'allow a b'"),
        ("unban", "unban: wrong arguments"),
        (
            "unban 10.0.0.0/8",
            "unban: '10.0.0.0/8' is not an IP address",
        ),
        (
            "show host.example",
            "show: 'host.example' is not an IP address",
        ),
        ("show 1.2.3.4 r extra", "show: wrong arguments"),
    ] {
        assert!(e(d).starts_with(want), "{d}: {}", e(d));
    }
}

#[test]
fn keys_takes_n_then_a_rule() {
    let keys = |n, rule: Option<&str>| {
        Ok(Command::Keys {
            n,
            rule: rule.map(str::to_owned),
        })
    };
    assert_eq!(cmd("ip_throttle", "keys"), keys(KEYS_DEFAULT, None));
    assert_eq!(cmd("ip_throttle", "keys 5"), keys(5, None));
    assert_eq!(cmd("ip_throttle.keys", "1000"), keys(1000, None));
    assert_eq!(cmd("ip_throttle", "keys 1 r"), keys(1, Some("r")));
    assert_eq!(
        cmd("ip_throttle", "keys http.t.test"),
        keys(KEYS_DEFAULT, Some("http.t.test"))
    );
    // A number is N: an --instance named 7 needs N first.
    assert_eq!(cmd("ip_throttle", "keys 20 7"), keys(20, Some("7")));
    let k = cmd("ip_throttle", "keys 3 r").unwrap();
    assert_eq!((k.verb(), k.rule()), ("keys", Some("r")));
}

#[test]
fn key_is_show_by_its_per_key_name() {
    let ip = Client::Addr(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)));
    for target in ["ip_throttle", "ip_throttle.key"] {
        let data = match target {
            "ip_throttle" => "key 192.0.2.7 r",
            _ => "192.0.2.7 r",
        };
        assert_eq!(
            cmd(target, data),
            Ok(Command::Show {
                ip,
                rule: Some("r".into())
            })
        );
    }
    assert_eq!(
        cmd("ip_throttle", "key unknown"),
        Ok(Command::Show {
            ip: Client::Unknown,
            rule: None
        })
    );
}

#[test]
fn a_bad_n_or_address_names_the_value_and_what_is_allowed() {
    let e = |d: &str| cmd("ip_throttle", d).expect_err(d);
    for n in ["0", "1001", "-1", "+0", "99999999999999999999999"] {
        assert_eq!(
            e(&format!("keys {n}")),
            format!("keys: N has an invalid value '{n}': allowed 1 to 1000"),
        );
    }
    assert!(e("keys ten r").starts_with("keys: N has an invalid value 'ten'"));
    assert!(e("keys 5 r extra").starts_with("keys: wrong arguments '5 r extra'"));
    assert!(e("key").starts_with("key: wrong arguments ''"));
    assert!(e("key 1.2.3.4 r extra").starts_with("key: wrong arguments"));
    assert!(
        e("key notanip").starts_with("key: 'notanip' is not an IP address"),
        "{}",
        e("key notanip")
    );
    assert!(e("key 10.0.0.0/8").starts_with("key: '10.0.0.0/8' is not an IP address"));
    assert!(e("top").contains("keys [N] [RULE]"), "{}", e("top"));
}
