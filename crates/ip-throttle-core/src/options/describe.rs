//! The options as one line of text, for diags.log.

use std::path::PathBuf;

use regex::bytes::Regex;

use super::{fmt_seconds, Options};

impl Options {
    /// One line for diags.log.
    pub fn describe(&self) -> String {
        let p = &self.params;
        let re = |r: &Option<Regex>| {
            r.as_ref()
                .map_or("(any)".to_owned(), |r| r.as_str().to_owned())
        };
        let file = |f: &Option<PathBuf>| {
            f.as_ref()
                .map_or("none".to_owned(), |f| f.display().to_string())
        };
        let proxies = if self.trusted_proxies.is_empty() {
            String::new()
        } else {
            let nets: Vec<String> = self.trusted_proxies.iter().map(|n| n.to_string()).collect();
            format!(
                " trusted-proxies={} forwarded-header={}",
                nets.join(","),
                self.header().name()
            )
        };
        let store = match &self.store {
            Some(s) => format!(
                " store={} store-timeout={}ms",
                s.url(),
                self.store_timeout_ms
            ),
            None => String::new(),
        };
        format!(
            "initial-delay={} max-delay={} threshold={} max-concurrent={} ban-threshold={} \
             ban-expiration={} path-regex={} method-regex={} allow-file={} deny-file={} \
             default-action={:?} deny-action={:?} log-events={} log-only={} instance={} keys={} key-prefix={}/{}{proxies}{store}",
            fmt_seconds(p.initial_delay),
            fmt_seconds(p.max_delay),
            fmt_seconds(p.threshold),
            p.max_concurrent,
            p.ban_threshold,
            fmt_seconds(p.ban_expiration),
            re(&self.path_regex),
            re(&self.method_regex),
            file(&self.allow_file),
            file(&self.deny_file),
            self.default_action,
            self.deny_action,
            self.log_events.describe(),
            self.log_only,
            self.instance,
            self.keys,
            self.v4_prefix,
            self.v6_prefix
        )
    }
}
