//! Upstream's default metric tag: `scheme.host`, plus `:port` when the port
//! is not the scheme's default, from the rule's "from" URL.
//!
//! The name in a rule's metric names: rate_limit.so's when the rule has no
//! `--tag` (through `rate_limit_core::tag`), ip_throttle.so's always. A leaf
//! with no dependencies, so ip_throttle.so does not link rate_limit's core
//! for it.

#![forbid(unsafe_code)]

/// `http://cdn.example.com/` → `http.cdn.example.com`;
/// `https://h:8443/x` → `https.h:8443`. `None` if there is no host.
pub fn from_url(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        (format!("[{h}]"), after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return None;
    }
    let default_port = match scheme.as_str() {
        "http" | "ws" => Some("80"),
        "https" | "wss" => Some("443"),
        _ => None,
    };
    let host = host.to_ascii_lowercase();
    Some(match port {
        Some(p) if !p.is_empty() && Some(p) != default_port => format!("{scheme}.{host}:{p}"),
        _ => format!("{scheme}.{host}"),
    })
}

#[cfg(test)]
mod tests {
    use super::from_url;

    #[test]
    fn upstream_examples() {
        assert_eq!(
            from_url("http://cdn.example.com/").as_deref(),
            Some("http.cdn.example.com")
        );
        assert_eq!(
            from_url("http://cdn.example.com:80/").as_deref(),
            Some("http.cdn.example.com")
        );
        assert_eq!(
            from_url("https://cdn.example.com:443/a").as_deref(),
            Some("https.cdn.example.com")
        );
        assert_eq!(
            from_url("http://127.0.0.1:8080/").as_deref(),
            Some("http.127.0.0.1:8080")
        );
        assert_eq!(from_url("https://h:80/").as_deref(), Some("https.h:80"));
        assert_eq!(
            from_url("http://[::1]:8080/").as_deref(),
            Some("http.[::1]:8080")
        );
        assert_eq!(
            from_url("http://u:p@Host.Example/").as_deref(),
            Some("http.host.example")
        );
        assert_eq!(from_url("/relative"), None);
        assert_eq!(from_url("http:///x"), None);
    }
}
