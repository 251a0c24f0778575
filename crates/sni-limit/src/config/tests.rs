use super::*;

/// Upstream's documented example (rate_limit.en.rst), indented as YAML
/// needs (the docs' own is mis-indented), with `max-age` as the docs write it.
const UPSTREAM: &str = "\
selector:
  - sni: test1.example.com
    limit: 1000
    rate: 200
    queue:
      size: 1000
      max-age: 30
    metrics:
      tag: example.com
      prefix: ddos
    ip-rep: main
    exclude: internal
  - sni: test2.example.com
    aliases: [test3.example.com, test4.example.com]
    limit: 100
ip-rep:
  - name: main
    buckets: 10
    size: 15
    percentage: 90
    max-age: 300
    perma-block:
      limit: 100
      threshold: 1
      max-age: 1800
lists:
  - name: internal
    cidr:
      - 10.0.0.0/8
      - 192.168.0.0/16
";

fn ok(text: &str) -> Config {
    parse(text, "g.yaml").unwrap_or_else(|e| panic!("refused: {e}"))
}

fn err(text: &str) -> String {
    match parse(text, "g.yaml") {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

#[test]
fn upstreams_example_reads_as_documented() {
    let c = ok(UPSTREAM);
    assert_eq!(c.selectors.len(), 2);
    let s = &c.selectors[0];
    assert_eq!(s.line, 2);
    assert_eq!(s.sni, Sni::Name("test1.example.com".into()));
    assert_eq!(s.limit, Some(1000));
    assert_eq!(
        s.rate,
        Some(Rate {
            per_second: 200.0,
            burst: 200
        })
    );
    assert_eq!(
        s.queue,
        Some(QueueConf {
            size: 1000,
            max_age: Some(30)
        })
    );
    assert_eq!(
        s.metrics,
        Some(MetricsConf {
            prefix: "ddos".into(),
            tag: "example.com".into()
        })
    );
    assert_eq!(s.ip_rep, Some(0));
    assert_eq!(s.exclude, Some(0));
    let t = &c.selectors[1];
    assert_eq!(t.aliases, ["test3.example.com", "test4.example.com"]);
    assert_eq!((t.limit, t.rate, t.queue), (Some(100), None, None));
    assert_eq!(t.metrics, None);
    let r = &c.ip_reps[0];
    assert_eq!(
        (r.buckets, r.size, r.percentage, r.max_age),
        (10, 15, 90, Some(300))
    );
    assert_eq!(
        r.perma,
        Some(PermaConf {
            limit: 100,
            threshold: 1,
            max_age: Some(1800)
        })
    );
    let l = &c.lists[0];
    assert!(l.cidrs.contains("10.1.2.3".parse().unwrap()));
    assert!(l.cidrs.contains("192.168.7.7".parse().unwrap()));
    assert!(!l.cidrs.contains("172.16.0.1".parse().unwrap()));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn max_age_is_read_in_both_spellings_but_not_twice() {
    let under = UPSTREAM.replace("max-age", "max_age");
    let c = ok(&under);
    assert_eq!(c.selectors[0].queue.and_then(|q| q.max_age), Some(30));
    assert_eq!(c.ip_reps[0].max_age, Some(300));
    assert_eq!(c.ip_reps[0].perma.and_then(|p| p.max_age), Some(1800));
    let both = "selector:\n  - sni: a.test\n    limit: 1\n    queue:\n      max-age: 3\n      max_age: 4\n";
    assert_eq!(
        err(both),
        "g.yaml:5: selector 'a.test': queue: max-age and max_age are the same key: give one"
    );
}

#[test]
fn unknown_keys_are_refused_with_their_line_and_the_allowed_ones() {
    assert_eq!(
        err("selector:\n  - sni: a.test\n    limits: 3\n"),
        "g.yaml:3: selector 1: unknown key 'limits' (allowed: sni, aliases, limit, rate, \
         burst, queue, metrics, ip-rep, exclude, per-ip)"
    );
    assert_eq!(
        err("selectors: []\n"),
        "g.yaml:1: the file: unknown key 'selectors' (allowed: selector, ip-rep, lists)"
    );
    assert_eq!(
        err("ip-rep:\n  - name: m\n    size: 12\n    perma-block:\n      limt: 3\n"),
        "g.yaml:5: ip-rep 'm': perma-block: unknown key 'limt' (allowed: limit, threshold, \
         max-age, max_age)"
    );
}

#[test]
fn bad_values_name_the_key_the_value_and_what_is_allowed() {
    let sel = |kv: &str| err(&format!("selector:\n  - sni: a.test\n    {kv}\n"));
    assert_eq!(
        sel("limit: abc"),
        "g.yaml:3: selector 'a.test': limit: 'abc' is not a whole number from 0 to 4294967295"
    );
    for v in ["-1", "1.5", "0x10", "1e3", "4294967296"] {
        assert!(
            sel(&format!("limit: {v}")).contains("is not a whole number"),
            "{v}"
        );
    }
    assert_eq!(
        sel("rate: fast"),
        "g.yaml:3: selector 'a.test': rate: 'fast' is not a number of connections per \
         second (0 to 1000000000, such as 200 or 0.5)"
    );
    for v in ["-2", "inf", "nan", "1e2", "2.5.1"] {
        assert!(
            sel(&format!("rate: {v}")).contains("is not a number"),
            "{v}"
        );
    }
    assert_eq!(
        sel("limit: [1, 2]"),
        "g.yaml:3: selector 'a.test': limit: a single value is expected, not a list"
    );
    assert_eq!(
        sel("burst: 5"),
        "g.yaml:3: selector 'a.test': burst needs a rate"
    );
    assert_eq!(
        sel("per-ip: {}"),
        "g.yaml:3: selector 'a.test': per-ip: give a limit, a rate or both"
    );
    let rep = |kv: &str| err(&format!("ip-rep:\n  - name: m\n    {kv}\n"));
    assert_eq!(
        rep("percentage: 0.9"),
        "g.yaml:3: ip-rep 'm': percentage: '0.9' is not a whole percentage from 0 to 99 \
         (such as 90; where upstream's docs write 0.9, write 90)"
    );
    assert!(rep("buckets: 100").contains("from 1 to 99"));
    assert!(rep("size: 21").contains("from 0 to 20"));
    assert_eq!(
        rep("size: 8"),
        "g.yaml:3: ip-rep 'm': size 8 is smaller than buckets 10: each bucket halves the \
         one before, so size must be at least buckets (or 0: off)"
    );
    assert_eq!(
        err("lists:\n  - name: l\n    cidr: [10.0.0.0/33]\n"),
        "g.yaml:3: list 'l': cidr: '10.0.0.0/33' is not an IP address or CIDR (such as \
         10.0.0.0/8, 2001:db8::/32 or 192.0.2.7)"
    );
}

#[test]
fn names_must_resolve_and_be_defined_once() {
    assert_eq!(
        err("selector:\n  - sni: a.test\n    limit: 2\n    ip-rep: mian\nip-rep:\n  - name: main\n    size: 12\n"),
        "g.yaml:4: selector 'a.test': ip-rep 'mian' names no ip-rep entry (defined: 'main')"
    );
    assert_eq!(
        err("selector:\n  - sni: a.test\n    limit: 2\n    exclude: internal\n"),
        "g.yaml:4: selector 'a.test': exclude 'internal' names no list (none is defined)"
    );
    assert_eq!(
        err("lists:\n  - name: l\n    cidr: [10.0.0.0/8]\n  - name: l\n    cidr: []\n"),
        "g.yaml:4: list 'l' is defined twice (first at line 2)"
    );
    assert_eq!(
        err("selector:\n  - sni: a.test\n    limit: 1\n  - sni: b.test\n    aliases: [A.test]\n    limit: 1\n"),
        "g.yaml:5: the SNI 'a.test' is already taken by the selector at line 2"
    );
    assert_eq!(
        err("selector:\n  - sni: '*'\n    limit: 1\n  - sni: default\n    limit: 1\n"),
        "g.yaml:4: the catch-all (\"*\" or \"default\") is already taken by the selector at line 2"
    );
    assert_eq!(
        err(
            "selector:\n  - sni: a.test\n    ip-rep: main\nip-rep:\n  - name: main\n    size: 12\n"
        ),
        "g.yaml:3: selector 'a.test': ip-rep needs a limit: the pressure that turns it on is \
         the share of the limit in use"
    );
}

#[test]
fn snis_are_lowercased_and_the_special_ones_read() {
    let c = ok("selector:\n  - sni: Test.Example.COM.\n    limit: 1\n  - sni: '*'\n    limit: 2\n  - sni: ''\n    limit: 3\n");
    let snis: Vec<&Sni> = c.selectors.iter().map(|s| &s.sni).collect();
    assert_eq!(
        snis,
        [
            &Sni::Name("test.example.com".into()),
            &Sni::Any,
            &Sni::Missing
        ]
    );
    assert_eq!(
        ok("selector:\n  - sni: default\n    limit: 2\n").selectors[0].sni,
        Sni::Any
    );
    assert!(err("selector:\n  - sni: '*.example.com'\n    limit: 1\n")
        .contains("wildcards are not supported"));
    assert!(err("selector:\n  - sni: 'exämple.com'\n    limit: 1\n").contains("xn--"));
    assert!(err("selector:\n  - limit: 1\n").ends_with("selector 1: sni is missing"));
}

#[test]
fn zero_means_none_as_upstream() {
    let c =
        ok("selector:\n  - sni: a.test\n    limit: 0\n    rate: 0\n    queue:\n      size: 0\n");
    let s = &c.selectors[0];
    assert_eq!((s.limit, s.rate, s.queue), (None, None, None));
    assert_eq!(
        c.warnings,
        ["g.yaml:2: selector 'a.test': no limit, rate or per-ip: it limits nothing"]
    );
    let c = ok("selector:\n  - sni: a.test\n    limit: 5\n    queue:\n");
    assert_eq!(
        c.selectors[0].queue,
        Some(QueueConf {
            size: u32::MAX,
            max_age: None
        })
    );
}

#[test]
fn ours_burst_and_per_ip() {
    let c = ok("selector:\n  - sni: a.test\n    rate: 2.5\n    burst: 4\n    per-ip:\n      limit: 3\n      rate: 10\n      keys: 1024\n");
    let s = &c.selectors[0];
    assert_eq!(
        s.rate,
        Some(Rate {
            per_second: 2.5,
            burst: 4
        })
    );
    assert_eq!(
        s.per_ip,
        Some(PerIpConf {
            limit: Some(3),
            rate: Some(Rate {
                per_second: 10.0,
                burst: 10
            }),
            keys: 1024
        })
    );
    // A fractional rate's default burst is one connection.
    let c = ok("selector:\n  - sni: a.test\n    rate: 0.5\n");
    assert_eq!(c.selectors[0].rate.map(|r| r.burst), Some(1));
}

#[test]
fn the_file_as_a_whole() {
    let c = ok("");
    assert!(c.selectors.is_empty());
    assert_eq!(
        c.warnings,
        ["g.yaml: no selector: every TLS connection passes unlimited"]
    );
    assert_eq!(
        err("selector: []\n---\nlists: []\n"),
        "g.yaml:3: the file holds several YAML documents (---): give one"
    );
    assert!(err("selector:\n  - sni: a\n   limit: 1\n").starts_with("g.yaml:3: not valid YAML"));
    assert!(err("selector:\n  - sni: a.test\n    sni: b.test\n")
        .starts_with("g.yaml:3: not valid YAML"));
    assert_eq!(
        err("- a\n"),
        "g.yaml:1: the file must be a mapping with the keys selector, ip-rep and lists"
    );
    let metrics = ok("selector:\n  - sni: a.test\n    limit: 1\n    metrics: {}\n  - sni: '*'\n    limit: 1\n    metrics:\n");
    assert_eq!(
        metrics.selectors[0].metrics,
        Some(MetricsConf {
            prefix: DEFAULT_PREFIX.into(),
            tag: "a.test".into()
        })
    );
    assert_eq!(
        metrics.selectors[1]
            .metrics
            .as_ref()
            .map(|m| m.tag.as_str()),
        Some("default")
    );
}

#[test]
fn a_billion_laughs_is_refused() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    assert!(err(&text).contains("not valid YAML"), "{}", err(&text));
}

#[test]
fn files_are_read_bounded() {
    use optspec::files::MemFiles;
    let files = MemFiles::new().with("/etc/g.yaml", UPSTREAM);
    assert_eq!(
        load(Path::new("/etc/g.yaml"), &files).map(|c| c.selectors.len()),
        Ok(2)
    );
    let e = load(Path::new("/etc/missing.yaml"), &files).unwrap_err();
    assert!(e.starts_with("cannot read /etc/missing.yaml: "), "{e}");
}

/// docs/rate_limit.md's table of keys lists exactly the keys the reader
/// takes (`max_age` is documented as `max-age`'s other spelling).
#[test]
fn the_docs_list_every_key() {
    use super::yaml::*;
    let md = include_str!("../../../../docs/rate_limit.md");
    let flat = |node: &[&str], children: &[(&str, &[&str])]| -> Vec<String> {
        let mut all: Vec<String> = node.iter().map(|k| (*k).to_owned()).collect();
        for (parent, keys) in children {
            all.extend(keys.iter().map(|k| format!("{parent}.{k}")));
        }
        all.retain(|k| !k.ends_with("max_age"));
        all.sort();
        all
    };
    let cases: [(&str, Vec<String>); 3] = [
        (
            "selector.",
            flat(
                SELECTOR,
                &[("queue", QUEUE), ("metrics", METRICS), ("per-ip", PER_IP)],
            ),
        ),
        ("ip-rep.", flat(IP_REP, &[("perma-block", PERMA)])),
        ("lists.", flat(LIST, &[])),
    ];
    for (prefix, keys) in cases {
        let documented = optspec::documented(md, "Global mode", prefix).expect("the section");
        assert_eq!(documented, keys, "{prefix}");
    }
    assert_eq!(TOP, ["selector", "ip-rep", "lists"]);
}

#[test]
fn the_file_is_bounded_in_what_it_builds() {
    let many: String = (0..=MAX_SELECTORS)
        .map(|i| format!("  - sni: s{i}.test\n    limit: 1\n"))
        .collect();
    assert_eq!(
        err(&format!("selector:\n{many}")),
        format!(
            "g.yaml: {} selectors: at most {MAX_SELECTORS} are allowed",
            MAX_SELECTORS + 1
        )
    );
    // Up to the bound, checks stay linear (hash maps): ten thousand load.
    let fine: String = (0..MAX_SELECTORS)
        .map(|i| format!("  - sni: s{i}.test\n    aliases: [t{i}.test]\n    limit: 1\n"))
        .collect();
    assert_eq!(
        ok(&format!("selector:\n{fine}")).selectors.len(),
        MAX_SELECTORS
    );
    let reps = "ip-rep:\n  - name: a\n    size: 20\n  - name: b\n    size: 20\n";
    assert_eq!(ok(reps).ip_reps.len(), 2);
    assert_eq!(
        err(&format!("{reps}  - name: c\n    size: 10\n")),
        format!(
            "g.yaml: {} addresses in the ip-reps' entry buckets (the sum of 2^size): at most \
             {MAX_SIEVE_ENTRIES} are allowed",
            (1u64 << 21) + 1024
        )
    );
}
