//! Helpers shared by the fuzz targets (`fuzz_targets/*.rs`): how a target
//! cuts its input into arguments and files, and the inputs it skips.

#![forbid(unsafe_code)]

use std::net::SocketAddr;

/// The input as text, cut at NUL into sections: the first holds the
/// arguments (one a line), the others files. Not UTF-8: `None` (the
/// parsers take `&str`; ATS and the file readers hand them nothing else).
pub fn sections(data: &[u8]) -> Option<Vec<&str>> {
    Some(std::str::from_utf8(data).ok()?.split('\0').collect())
}

/// The lines of a section, as arguments (`@pparam`s), at most `max`.
pub fn args(section: &str, max: usize) -> Vec<&str> {
    section.lines().take(max).collect()
}

/// True if parsing `value` as `HOST:PORT` would ask the resolver (a name,
/// not an address): `str::to_socket_addrs` looks the host up whenever the
/// text is not a socket address but ends in `:PORT`. Fuzz inputs that
/// would are skipped: a lookup is slow, and it depends on the network.
pub fn resolves(value: &str) -> bool {
    let one = |v: &str| {
        v.parse::<SocketAddr>().is_err()
            && v.rsplit_once(':')
                .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
    };
    one(value) || one(value.trim()) || value.split(',').any(|p| one(p.trim()))
}

/// True if some argument of an option whose name starts with `prefix`
/// (`--peer` for rate_limit's `--peers`, `--peer-group`, `--peer-listen`),
/// as `--name=VALUE` or `--name VALUE`, [`resolves`].
pub fn any_resolves(args: &[&str], prefix: &str) -> bool {
    args.iter().enumerate().any(|(i, a)| {
        a.starts_with(prefix)
            && (a.split_once('=').is_some_and(|(_, v)| resolves(v))
                || args.get(i + 1).is_some_and(|v| resolves(v)))
    })
}

/// Messages are meant for a log line (ATS keeps about 1 KB of one): no
/// error message of a parser may grow with its input without bound.
/// `limit` is the target's bound; the message is shown if over it.
pub fn bounded(msg: &str, limit: usize) {
    assert!(
        msg.len() <= limit,
        "a {}-byte error message (at most {limit}): {msg:.2000}",
        msg.len()
    );
}
