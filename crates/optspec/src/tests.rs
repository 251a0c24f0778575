use super::value::{self, NumberError};
use super::*;

/// A module's target and its table, as a front end writes them.
#[derive(Debug, Default, PartialEq)]
struct Rule {
    limit: Option<u64>,
    fast: bool,
    log: Option<bool>,
}

type E = String;

fn limit(r: &mut Rule, v: &str, cx: &&str) -> Result<(), E> {
    r.limit = Some(value::uint(v, 1, 10).map_err(|e| format!("--limit {v} {e:?} {cx}"))?);
    Ok(())
}

static RULE: &[Opt<Rule, &str, E>] = &[
    Opt::value("limit", "most at once", limit),
    Opt::flag("fast", "go fast", |r, _| {
        r.fast = true;
        Ok(())
    }),
    Opt::flag_or_value("log", "log, or not", |r, v, _| {
        r.log = Some(match v {
            None => true,
            Some(w) => value::bool_word(w).ok_or_else(|| format!("--log {w}"))?,
        });
        Ok(())
    }),
];

#[derive(Debug, Default, PartialEq)]
struct Module {
    raw: Vec<(&'static str, String)>,
}

static MODULE: &[Opt<Module, (), E>] = &[Opt::value("peer", "a peer", |m, v, _| {
    m.raw.push(("peer", v.to_owned()));
    Ok(())
})];

fn tables() -> [&'static dyn Names; 2] {
    [&RULE, &MODULE]
}

/// Tokenizes and applies, as a front end does; `Err` is the message.
fn run(args: &[&str], repeats: Repeats) -> Result<(Rule, Module, Vec<&'static str>), String> {
    let t = tables();
    let mut tokens = Tokens::new(args, &t, repeats);
    let (mut r, mut m) = (Rule::default(), Module::default());
    for g in tokens.by_ref() {
        let g = g.map_err(|e| e.message(&t))?;
        match g.table {
            0 => RULE[g.index].apply(&mut r, g.value, &"here")?,
            _ => MODULE[g.index].apply(&mut m, g.value, &())?,
        }
    }
    Ok((r, m, tokens.into_seen()))
}

fn err(args: &[&str]) -> String {
    run(args, Repeats::Refuse).expect_err("must be refused")
}

#[test]
fn both_syntaxes_flags_and_flag_or_value() {
    let (r, m, seen) = run(
        &["--limit", "3", "--fast", "--peer=a", "--log=no"],
        Repeats::Refuse,
    )
    .unwrap();
    assert_eq!(
        r,
        Rule {
            limit: Some(3),
            fast: true,
            log: Some(false)
        }
    );
    assert_eq!(m.raw, [("peer", "a".to_owned())]);
    assert_eq!(seen, ["limit", "fast", "peer", "log"]);
    // A flag-or-value option never takes the next argument.
    let (r, _, _) = run(&["--log", "--limit=2"], Repeats::Refuse).unwrap();
    assert_eq!((r.log, r.limit), (Some(true), Some(2)));
    // The next argument is the value, unless it is an option: then the
    // value is missing (`--log --dry-run` must not swallow the dry run).
    assert_eq!(
        run(&["--limit", "--fast"], Repeats::Refuse).unwrap_err(),
        "--limit needs a value, and the next argument '--fast' is an option: write --limit=VALUE"
    );
    assert_eq!(
        run(&["--limit", "-1"], Repeats::Refuse).unwrap_err(),
        "--limit -1 Negative here"
    );
    // Only the first '=' splits.
    assert_eq!(
        run(&["--peer=a=b"], Repeats::Refuse).unwrap().1.raw,
        [("peer", "a=b".to_owned())]
    );
}

#[test]
fn syntax_errors_have_the_shared_wording() {
    assert_eq!(
        err(&["limit=5"]),
        "unexpected argument 'limit=5': options are --name=value; known options: --limit, --fast, --log, --peer"
    );
    assert_eq!(
        err(&["--limits=5"]),
        "unknown option '--limits=5'; known options: --limit, --fast, --log, --peer"
    );
    assert_eq!(
        err(&["--limit=1", "--limit=2"]),
        "--limit given more than once"
    );
    assert_eq!(err(&["--limit"]), "--limit needs a value (--limit=VALUE)");
    assert_eq!(err(&["--fast=yes"]), "--fast takes no value (got 'yes')");
    assert_eq!(
        err(&["--x\u{1b}"]),
        "unknown option '--x\\u{1b}'; known options: --limit, --fast, --log, --peer"
    );
}

#[test]
fn the_first_mistake_is_reported_whether_of_syntax_or_value() {
    assert_eq!(err(&["--limit=0", "--bogus"]), "--limit 0 OutOfRange here");
    assert!(err(&["--bogus", "--limit=0"]).starts_with("unknown option '--bogus'"));
    // Fused after an error.
    let t = tables();
    let mut tokens = Tokens::new(&["--bogus", "--fast"], &t, Repeats::Refuse);
    assert!(tokens.next().is_some_and(|g| g.is_err()));
    assert!(tokens.next().is_none());
}

#[test]
fn repeats_override_when_allowed() {
    let (r, m, seen) = run(
        &["--limit=1", "--peer=a", "--limit=2", "--peer=b"],
        Repeats::Override,
    )
    .unwrap();
    assert_eq!(r.limit, Some(2));
    assert_eq!(m.raw.len(), 2);
    assert_eq!(seen, ["limit", "peer"]);
}

#[test]
fn lookup_across_tables() {
    let t = tables();
    assert_eq!(find(&t, "peer"), Some((1, 0, Takes::Value)));
    assert_eq!(find(&t, "log"), Some((0, 2, Takes::FlagOrValue)));
    assert_eq!(find(&t, "nope"), None);
    assert_eq!(known(&t), "--limit, --fast, --log, --peer");
    assert!(duplicates(&t).is_empty());
    let twice: [&dyn Names; 3] = [&RULE, &MODULE, &MODULE];
    assert_eq!(duplicates(&twice), ["peer"]);
}

#[test]
fn uint_reasons() {
    assert_eq!(value::uint("7", 1, 10), Ok(7));
    assert_eq!(value::uint("", 1, 10), Err(NumberError::Empty));
    assert_eq!(value::uint("-1", 0, 10), Err(NumberError::Negative));
    assert_eq!(value::uint("+1", 0, 10), Err(NumberError::NotDigits));
    assert_eq!(value::uint(" 1", 0, 10), Err(NumberError::NotDigits));
    assert_eq!(value::uint("1e3", 0, 10), Err(NumberError::NotDigits));
    assert_eq!(value::uint("11", 0, 10), Err(NumberError::OutOfRange));
    assert_eq!(
        value::uint("18446744073709551616", 0, u64::MAX),
        Err(NumberError::TooLarge)
    );
    assert_eq!(
        value::uint("18446744073709551615", 0, u64::MAX),
        Ok(u64::MAX)
    );
}

#[test]
fn seconds_are_exact() {
    assert_eq!(value::seconds("3"), Ok(3_000_000_000));
    assert_eq!(value::seconds("0.25"), Ok(250_000_000));
    assert_eq!(value::seconds(".5"), Ok(500_000_000));
    assert_eq!(value::seconds("1.000000001"), Ok(1_000_000_001));
    for bad in ["1.", ".", "1.0000000001", "1e3", "1.2.3", "+1", " 1"] {
        assert_eq!(value::seconds(bad), Err(NumberError::NotDigits), "{bad}");
    }
    assert_eq!(value::seconds(""), Err(NumberError::Empty));
    assert_eq!(value::seconds("-1"), Err(NumberError::Negative));
    assert_eq!(
        value::seconds("18446744074"),
        Err(NumberError::TooLarge),
        "overflows in nanoseconds"
    );
}

#[test]
fn lists_cidrs_and_words() {
    assert_eq!(
        value::list(" a, b ,,c").collect::<Vec<_>>(),
        ["a", "b", "", "c"]
    );
    assert_eq!(
        value::cidr("10.0.0.0/8").map(|n| n.to_string()).as_deref(),
        Some("10.0.0.0/8")
    );
    assert_eq!(
        value::cidr("::1").map(|n| n.to_string()).as_deref(),
        Some("::1/128")
    );
    assert_eq!(value::cidr("lb"), None);
    assert_eq!(value::cidr(""), None);
    assert_eq!(value::cidr("10.0.0.0/33"), None);
    assert_eq!(value::bool_word("on"), Some(true));
    assert_eq!(value::bool_word("0"), Some(false));
    assert_eq!(value::bool_word("On"), None);
    let words = [("open", 1), ("closed", 2)];
    assert_eq!(value::word("closed", &words), Some(2));
    assert_eq!(value::word("shut", &words), None);
}

proptest::proptest! {
    /// Any arguments: options applied or one message; never a panic, and
    /// a message is short whatever the input.
    #[test]
    fn never_panics_and_messages_stay_short(
        args in proptest::collection::vec("(--)?[a-z]{0,6}(=.{0,200})?", 0..6),
        repeats in proptest::bool::ANY,
    ) {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let repeats = if repeats { Repeats::Refuse } else { Repeats::Override };
        if let Err(e) = run(&refs, repeats) {
            proptest::prop_assert!(e.len() < 400, "{e}");
        }
    }

    /// Every u64 in range round-trips through `uint`; out of range is refused.
    #[test]
    fn uint_round_trips(n: u64, min: u64, max: u64) {
        let got = value::uint(&n.to_string(), min, max);
        if (min..=max).contains(&n) {
            proptest::prop_assert_eq!(got, Ok(n));
        } else {
            proptest::prop_assert_eq!(got, Err(NumberError::OutOfRange));
        }
    }

    /// Seconds with up to 9 decimals are exact.
    #[test]
    fn seconds_round_trip(s in 0u64..1_000_000, ns in 0u64..1_000_000_000) {
        let text = format!("{s}.{ns:09}");
        proptest::prop_assert_eq!(value::seconds(&text), Ok(s * 1_000_000_000 + ns));
    }
}

#[test]
fn documented_reads_the_first_cells_of_one_section() {
    let md = "# T\n\n## Options\n\n| name | does |\n|---|---|\n| `--b=N` | b |\n\
              | `--a` | a |\n| not `--c` | no |\n\n## Other\n\n| `--d` | d |\n";
    assert_eq!(documented(md, "Options", "--"), Some(vec!["a", "b=N"]));
    assert_eq!(documented(md, "Other", "--"), Some(vec!["d"]));
    assert_eq!(documented(md, "Option", "--"), None, "a whole heading");
    assert_eq!(documented(md, "Missing", "--"), None);
    assert_eq!(
        documented_in_order(md, "Options", "--"),
        Some(vec!["b=N", "a"])
    );
}

#[test]
fn an_option_is_not_live_unless_its_table_says_so() {
    let plain: Opt<u32, (), ()> = Opt::flag("x", "x", |_, _| Ok(()));
    assert_eq!(plain.live, Live::No);
    assert_eq!(plain.live(Live::Set).live, Live::Set);
    assert!(Live::No < Live::Reload && Live::Reload < Live::Set);
}
