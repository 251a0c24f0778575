use super::*;
use proptest::prelude::*;

const T0: i64 = 1_700_000_000;

fn cached(cc: &str, date: i64) -> Cached {
    let date = httpdate::format(date);
    Cached::from_headers(Some(date.as_bytes()), None, None, [cc.as_bytes()])
}

#[test]
fn parses_directives() {
    let cc = CacheControl::parse([
        &b"public, Max-Age=60"[..],
        b"stale-if-error=\"300\"",
        b"max-age=5, no-cache=\"Set-Cookie\"",
    ]);
    assert_eq!(cc.max_age, Some(60));
    assert_eq!(cc.stale_if_error, Some(300));
    assert!(cc.no_cache);
    assert_eq!(cc.forbids_stale(), Some("no-cache"));
    let cc = CacheControl::parse([&b"max-age=abc, s-maxage=99999999999999999999"[..]]);
    assert_eq!((cc.max_age, cc.s_maxage), (None, Some(DELTA_MAX)));
}

#[test]
fn within_stale_param() {
    let c = cached("max-age=10", T0);
    assert_eq!(freshness(&c, T0 + 10), Freshness::Fresh);
    assert_eq!(freshness(&c, T0 + 15), Freshness::Stale { stale_for: 5 });
    assert_eq!(
        decide(&c, T0 + 15, 5),
        Verdict::Serve {
            stale_for: 5,
            allowance: 5
        }
    );
    assert_eq!(
        decide(&c, T0 + 16, 5),
        Verdict::TooOld {
            stale_for: 6,
            allowance: 5
        }
    );
    assert!(
        !decide(&c, T0 + 11, 0).serve(),
        "stale:0 never serves stale"
    );
}

#[test]
fn stale_if_error_and_the_greater_of_the_two() {
    let c = cached("max-age=1, stale-if-error=60", T0);
    assert!(decide(&c, T0 + 30, 0).serve());
    assert!(decide(&c, T0 + 30, 5).serve());
    assert!(!decide(&c, T0 + 62, 5).serve());
    assert!(decide(&c, T0 + 200, 300).serve());
}

#[test]
fn forbidden_and_undated() {
    for cc in [
        "max-age=1, must-revalidate",
        "proxy-revalidate",
        "s-maxage=1",
        "no-store",
    ] {
        assert!(
            matches!(decide(&cached(cc, T0), T0 + 5, 60), Verdict::Forbidden(_)),
            "{cc}"
        );
    }
    let c = Cached::from_headers(None, None, None, [&b"max-age=1"[..]]);
    assert_eq!(decide(&c, T0, 60), Verdict::Undated);
}

#[test]
fn age_header_and_expires() {
    // An upstream cache said it was already 100 s old.
    let date = httpdate::format(T0);
    let c = Cached::from_headers(
        Some(date.as_bytes()),
        Some(b"100"),
        None,
        [&b"max-age=60"[..]],
    );
    assert_eq!(c.age_at(T0 + 1), Some(100));
    assert_eq!(freshness(&c, T0 + 1), Freshness::Stale { stale_for: 40 });
    let exp = httpdate::format(T0 + 30);
    let c = Cached::from_headers(
        Some(date.as_bytes()),
        None,
        Some(exp.as_bytes()),
        [&b""[..]],
    );
    assert_eq!(c.lifetime(), 30);
    assert_eq!(freshness(&c, T0 + 40), Freshness::Stale { stale_for: 10 });
    // A Date in the future (clock skew) counts as age 0.
    assert_eq!(cached("max-age=1", T0 + 100).age_at(T0), Some(0));
}

proptest! {
    /// Once too old, a response stays too old; while served, it was served at every earlier time.
    #[test]
    fn monotonic_in_time(max_age in 0u64..1000, sie in proptest::option::of(0u64..1000),
                         param in 0u64..1000, t1 in 0i64..5000, dt in 0i64..5000) {
        let cc = match sie {
            Some(s) => format!("max-age={max_age}, stale-if-error={s}"),
            None => format!("max-age={max_age}"),
        };
        let c = cached(&cc, T0);
        let (a, b) = (decide(&c, T0 + t1, param), decide(&c, T0 + t1 + dt, param));
        prop_assert!(!b.serve() || a.serve());
    }

    /// A bigger allowance never turns a serve into a refusal.
    #[test]
    fn monotonic_in_allowance(max_age in 0u64..1000, age in 0i64..5000, p in 0u64..1000, more in 0u64..1000) {
        let c = cached(&format!("max-age={max_age}"), T0);
        prop_assert!(!decide(&c, T0 + age, p).serve() || decide(&c, T0 + age, p + more).serve());
    }

    /// The boundary: served exactly while staleness <= max(stale, stale-if-error) > 0.
    #[test]
    fn boundary(max_age in 0u64..100, sie in 0u64..100, param in 0u64..100, age in 0u64..400) {
        let c = cached(&format!("max-age={max_age}, stale-if-error={sie}"), T0);
        let allowance = param.max(sie);
        let stale_for = age.saturating_sub(max_age);
        let want = allowance > 0 && stale_for <= allowance;
        prop_assert_eq!(decide(&c, T0 + age as i64, param).serve(), want);
    }

    #[test]
    fn parse_never_panics(v in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4)) {
        let _ = CacheControl::parse(v.iter().map(Vec::as_slice));
    }
}
