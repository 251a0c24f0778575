//! `--trusted-proxies` and `--forwarded-header`.

use super::*;

#[test]
fn trusted_proxies_and_their_header() {
    let o = parse(&[]).unwrap();
    assert!(o.trusted_proxies.is_empty());
    assert_eq!(o.header(), forwarded::ForwardedHeader::XForwardedFor);
    let o = parse(&[
        "--trusted-proxies=10.1.2.3/8, 127.0.0.1,2001:db8::/32",
        "--forwarded-header=forwarded",
    ])
    .unwrap();
    let nets: Vec<String> = o.trusted_proxies.iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["10.0.0.0/8", "127.0.0.1/32", "2001:db8::/32"]);
    assert_eq!(o.header(), forwarded::ForwardedHeader::Forwarded);
    assert!(
        o.describe().contains(
            " trusted-proxies=10.0.0.0/8,127.0.0.1/32,2001:db8::/32 forwarded-header=Forwarded"
        ),
        "{}",
        o.describe()
    );
    // The same from a config file.
    let files = MemFiles::of(&[(
        "/etc/ts/t.conf",
        "trusted-proxies = 10.0.0.0/8 # the balancers\nforwarded-header = X-Forwarded-For\n",
    )]);
    let o = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap();
    assert_eq!(o.trusted_proxies.len(), 1);
    assert_eq!(o.header(), forwarded::ForwardedHeader::XForwardedFor);
}

#[test]
fn trusted_proxy_errors_name_the_option_the_value_and_what_is_allowed() {
    let e = parse(&["--trusted-proxies=10.0.0.0/8,lb.example"]).unwrap_err();
    assert_eq!(
        e,
        "--trusted-proxies has an invalid value '10.0.0.0/8,lb.example': allowed IP addresses or \
         CIDRs, comma-separated, at most 64 (e.g. 10.0.0.0/8,2001:db8::/32; 'lb.example' is not \
         an IP address or CIDR)"
    );
    let e = parse(&["--trusted-proxies="]).unwrap_err();
    assert!(
        e.starts_with("--trusted-proxies has an invalid value '': allowed IP addresses"),
        "{e}"
    );
    let many: Vec<String> = (0..65).map(|i| format!("10.0.0.{i}")).collect();
    let e = parse(&[&format!("--trusted-proxies={}", many.join(","))]).unwrap_err();
    assert!(
        e.starts_with("--trusted-proxies has an invalid value '10.0.0.0,")
            && e.ends_with("allowed at most 64 IP addresses or CIDRs"),
        "{e}"
    );
    let e = parse(&[
        "--trusted-proxies=10.0.0.0/8",
        "--forwarded-header=X-Real-IP",
    ])
    .unwrap_err();
    assert_eq!(
        e,
        "--forwarded-header has an invalid value 'X-Real-IP': allowed X-Forwarded-For or Forwarded"
    );
    let e = parse(&["--forwarded-header=Forwarded"]).unwrap_err();
    assert_eq!(
        e,
        "--forwarded-header needs --trusted-proxies: the header is read only from them"
    );
    let files = MemFiles::of(&[("/etc/ts/t.conf", "\ntrusted-proxies = 10.0.0.0/33\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    assert!(
        e.starts_with(
            "--trusted-proxies has an invalid value '10.0.0.0/33' (at /etc/ts/t.conf:2): allowed"
        ),
        "{e}"
    );
}
