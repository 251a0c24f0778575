//! The refusal log's lines (crates/rate-limit-core, `refusal_log.rs`): a
//! client-controlled key escaped into one `key=value` token, and the
//! per-second line bound. Input: the first byte picks the reason, the
//! client and the dry run; then the key (UTF-8, any length). Invariants:
//! the line is printable ASCII, one token per field; the key token decodes
//! (`%XX`) back to the key's first `MAX_KEY_CHARS` bytes, then `…` if cut;
//! the line stays short.

#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use rate_limit_core::refusal_log::{Event, LogBound, Reason, MAX_KEY_CHARS};

fn decode(token: &str) -> (Vec<u8>, bool) {
    let (body, cut) = match token.strip_suffix('…') {
        Some(b) => (b, true),
        None => (token, false),
    };
    let b = body.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("two hex digits");
            out.push(u8::from_str_radix(hex, 16).expect("hex"));
            i += 3;
        } else {
            assert!(b[i].is_ascii_graphic() && b[i] != b'=', "{token:?}");
            out.push(b[i]);
            i += 1;
        }
    }
    (out, cut)
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(key) = std::str::from_utf8(rest) else {
        return;
    };
    let reason = Reason::ALL[usize::from(pick & 7) % Reason::ALL.len()];
    let client = match (pick >> 3) & 3 {
        0 => None,
        1 => Some(forwarded::Client::Unknown),
        2 => Some(forwarded::Client::from(
            "192.0.2.7".parse::<std::net::IpAddr>().unwrap(),
        )),
        _ => Some(forwarded::Client::from(
            "2001:db8::1".parse::<std::net::IpAddr>().unwrap(),
        )),
    };
    let e = Event {
        rule: "api",
        client,
        key: (pick & 0x20 == 0).then_some(key),
        reason,
        waited_ms: u64::from(pick) * 997,
        dry_run: pick & 0x40 != 0,
    };
    let line = e.line();
    assert!(line.len() <= 160 + 3 * MAX_KEY_CHARS, "{line}");
    let fields: Vec<&str> = line.split(' ').collect();
    let names: Vec<&str> = fields
        .iter()
        .map(|f| f.split_once('=').expect("key=value").0)
        .collect();
    let want: &[&str] = if e.key.is_some() {
        &[
            "event", "rule", "client", "key", "reason", "wait", "dry_run",
        ]
    } else {
        &["event", "rule", "client", "reason", "wait", "dry_run"]
    };
    assert_eq!(names, want, "{line}");
    for f in &fields {
        let (name, v) = f.split_once('=').expect("key=value");
        assert!(name == "key" || !v.is_empty(), "{line}");
        assert!(!v.contains('='), "{line}");
        assert!(
            v.chars().all(|c| c.is_ascii_graphic() || c == '…'),
            "{line}"
        );
    }
    if let Some(k) = e.key {
        let token = fields[3].strip_prefix("key=").expect("key field");
        let (decoded, cut) = decode(token);
        let n = k.len().min(MAX_KEY_CHARS);
        assert_eq!(decoded, &k.as_bytes()[..n], "{line}");
        assert_eq!(cut, k.len() > MAX_KEY_CHARS, "{line}");
    }
    // The bound: a flood in one second writes at most per_second lines.
    let b = LogBound::new(u32::from(pick & 3));
    let written = rest
        .iter()
        .filter(|&&t| b.event(u64::from(t) % 3, reason).write)
        .count();
    assert!(written <= usize::from(pick & 3));
    let left = b.take_pending().map_or(0, |s| s.total());
    assert_eq!(written as u64 + left, rest.len() as u64);
});
