//! Behind trusted proxies: the client they forward for is throttled, not
//! the proxy; a client they do not name is one client on no list; a reload
//! changes who is trusted.

use super::*;

/// A request from `remote` with an `X-Forwarded-For` of `xff` (if any), as
/// the plugin builds it: the client is resolved under the rule's options.
fn forwarded(t: &Throttler<Arc<ManualClock>>, remote: &str, xff: Option<&str>) -> Request<'static> {
    let read = |name: &str| {
        assert_eq!(name, "X-Forwarded-For");
        xff.map(|v| v.as_bytes().to_vec())
    };
    Request {
        client: t.client_ip(ip(remote), read),
        method: b"GET",
        path: b"/",
    }
}

/// Behind a trusted balancer, the state machine, bans and the lists apply
/// to the client it forwards for: the abuser is banned, another client
/// behind the same balancer is not, and entries the client wrote itself
/// change nothing.
#[test]
fn behind_a_trusted_proxy_the_client_is_throttled_not_the_proxy() {
    let (t, _) = throttler(
        &format!("{SMALL} --max-concurrent=9 --deny-file=deny.txt --trusted-proxies=127.0.0.9"),
        &files(),
    );
    let lb = "127.0.0.9";
    let abuser = forwarded(&t, lb, Some("198.51.100.1"));
    assert_eq!(abuser.client, at("198.51.100.1"));
    let actions: Vec<Action> = (0..6).map(|_| t.decide(&abuser).action).collect();
    assert_eq!(
        actions,
        [
            Action::Pass,
            Action::Delay(S),
            Action::Delay(2 * S),
            Action::Delay(4 * S),
            Action::Delay(4 * S),
            Action::Forbid
        ]
    );
    let other = forwarded(&t, lb, Some("198.51.100.2"));
    assert_eq!(t.decide(&other).action, Action::Pass);
    // The abuser claiming to be the other client: the balancer appended
    // the real address, which is the one that counts.
    let spoof = forwarded(&t, lb, Some("198.51.100.2, 198.51.100.1"));
    assert_eq!(spoof.client, at("198.51.100.1"));
    assert_eq!(t.decide(&spoof).action, Action::Forbid);
    // A request the balancer names no client for is not the balancer's,
    // and an untrusted remote's header is not read.
    assert_eq!(forwarded(&t, lb, None).client, Client::Unknown);
    assert_eq!(t.show(ip(lb)), None, "the balancer has no state");
    let direct = forwarded(&t, "127.0.0.8", Some("198.51.100.1"));
    assert_eq!(direct.client, at("127.0.0.8"));
    assert_eq!(t.decide(&direct).action, Action::Pass);
    // The deny list holds 10.0.0.0/8: it applies to the forwarded client.
    assert_eq!(
        t.decide(&forwarded(&t, lb, Some("10.1.2.3"))).action,
        Action::Forbid
    );
}

/// A client a trusted balancer does not name: on neither list (here the
/// balancers' networks are on them), one state for every such client, and
/// never the balancer's.
#[test]
fn an_unknown_client_behind_a_trusted_proxy_is_on_no_list_and_keyed_apart() {
    // 10.9.0.0/16 is allowed and 10.0.0.0/8 denied: a balancer in each.
    let (t, _) = throttler(
        &format!(
            "{SMALL} --max-concurrent=9 --allow-file=allow.txt --deny-file=deny.txt \
             --trusted-proxies=10.0.0.0/8"
        ),
        &files(),
    );
    let (allowed_lb, denied_lb) = ("10.9.0.9", "10.1.1.1");
    for lb in [allowed_lb, denied_lb] {
        for xff in [None, Some("unknown"), Some("_hidden"), Some("6.6.6.6, bad")] {
            let r = forwarded(&t, lb, xff);
            assert_eq!(r.client, Client::Unknown, "{lb} {xff:?}");
            assert_ne!(t.key(r.client), t.key(ip(lb)));
        }
    }
    // Not whitelisted nor blacklisted: throttled by --default-action, all
    // of them as one client, through either balancer.
    let from = |lb: &str, xff: Option<&str>| t.decide(&forwarded(&t, lb, xff));
    let d = from(allowed_lb, Some("unknown"));
    assert_eq!((d.action, kinds(&d)), (Action::Pass, vec![]));
    let d = from(denied_lb, Some("_hidden"));
    assert_eq!(
        (d.action, kinds(&d)),
        (Action::Delay(S), vec![EventKind::Throttled])
    );
    let d = from(allowed_lb, None);
    assert_eq!(d.action, Action::Delay(2 * S));
    drop(d);
    assert_eq!(t.show(Client::Unknown).map(|v| v.delay), Some(2 * S));
    assert_eq!(t.show(ip(allowed_lb)), None, "the balancer has no state");
    assert_eq!(t.show(ip(denied_lb)), None, "the balancer has no state");
    // Clients the balancers name are theirs: listed as their addresses are.
    let d = from(denied_lb, Some("10.9.5.5"));
    assert_eq!(kinds(&d), [EventKind::Whitelisted]);
    let d = from(allowed_lb, Some("10.1.2.3"));
    assert_eq!(d.action, Action::Forbid);
    // Banned together, and unbanned by name.
    for _ in 0..3 {
        from(denied_lb, Some("unknown"));
    }
    assert_eq!(from(allowed_lb, None).action, Action::Forbid);
    assert_eq!(from(allowed_lb, Some("192.0.2.1")).action, Action::Pass);
    assert!(t.unban(Client::Unknown).is_some());
    assert_eq!(from(allowed_lb, Some("unknown")).action, Action::Pass);
}

/// `reload config` can start or stop trusting proxies.
#[test]
fn a_reload_changes_who_is_trusted() {
    let f = files();
    let (t, _) = throttler(&format!("{SMALL} --trusted-proxies=127.0.0.9"), &f);
    assert_eq!(
        forwarded(&t, "127.0.0.9", Some("198.51.100.1")).client,
        at("198.51.100.1")
    );
    let o = Options::parse(&[], Path::new("/etc/ts"), &f).unwrap();
    t.reload(o, &f).unwrap();
    assert_eq!(
        forwarded(&t, "127.0.0.9", Some("198.51.100.1")).client,
        at("127.0.0.9")
    );
}
