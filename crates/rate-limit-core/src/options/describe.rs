//! The options as text: those that make up the limiter (compared between
//! the rules of a group) and a one-line summary for the log.

use super::Options;

impl Options {
    /// The options that make up the limiter (rules of a group must agree on
    /// them), as `(option, value)` in a fixed order. The others (`--error`,
    /// `--retry`, `--header`, metrics, `--ratelimit-headers`) belong to each rule.
    pub fn limiter_options(&self) -> Vec<(&'static str, String)> {
        let none = || "none".to_owned();
        let key = self.key.as_ref();
        vec![
            (
                "limit",
                match self.auto {
                    Some(_) => "auto".to_owned(),
                    None => self.limit.map_or_else(none, |l| l.to_string()),
                },
            ),
            (
                "limit-min",
                self.auto.map_or_else(none, |a| a.min.to_string()),
            ),
            (
                "limit-max",
                self.auto.map_or_else(none, |a| a.max.to_string()),
            ),
            ("rate", self.rate.map_or_else(none, |r| r.to_string())),
            ("burst", self.burst.to_string()),
            (
                "count-status",
                self.count_status.map_or_else(none, |c| c.describe()),
            ),
            ("queue", self.queue.to_string()),
            ("maxage", self.maxage_ms.to_string()),
            ("block", self.block_s.to_string()),
            ("conntrack", self.conntrack.to_string()),
            ("key", key.map_or_else(none, |k| k.describe_sources())),
            (
                "key-prefix",
                key.map_or_else(none, |k| format!("{}/{}", k.v4_prefix, k.v6_prefix)),
            ),
            ("keys", key.map_or_else(none, |_| self.keys.to_string())),
            (
                "key-missing",
                key.map_or_else(none, |_| self.key_missing.name().to_owned()),
            ),
            (
                "trusted-proxies",
                key.map_or_else(none, |k| {
                    k.proxies
                        .trusted
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ),
            (
                "forwarded-header",
                key.map_or_else(none, |k| format!("{:?}", k.proxies.forwarded)),
            ),
            (
                "peers",
                self.peer.as_ref().map_or_else(none, |p| p.describe()),
            ),
            (
                "store",
                self.store.as_ref().map_or_else(none, |s| s.describe()),
            ),
            (
                "fair",
                self.fair
                    .as_ref()
                    .map_or_else(none, |f| f.describe_source()),
            ),
            (
                "flow-slots",
                self.fair.as_ref().map_or_else(none, |f| {
                    f.flow_slots
                        .map_or_else(|| "fair share".to_owned(), |n| n.to_string())
                }),
            ),
            (
                "flow-over",
                self.fair.as_ref().map_or_else(none, |f| {
                    match f.over {
                        crate::fair::Over::Reject => "reject",
                        crate::fair::Over::Wait => "wait",
                    }
                    .to_owned()
                }),
            ),
            (
                "strict",
                self.fair
                    .as_ref()
                    .map_or_else(none, |f| f.strict.to_string()),
            ),
            (
                "flow-weights",
                self.fair
                    .as_ref()
                    .map_or_else(none, |f| f.describe_weights()),
            ),
        ]
    }

    /// A one-line summary for the log.
    pub fn describe(&self) -> String {
        let limit = match self.auto {
            Some(a) => format!("auto({}-{})", a.min, a.max),
            None => self.limit.map_or("none".to_owned(), |l| l.to_string()),
        };
        let rate = self.rate.map_or("none".to_owned(), |r| {
            let counted = self.count_status.map_or(String::new(), |c| {
                format!(" charged by responses {}", c.describe())
            });
            format!("{r}/s burst {}{counted}", self.burst)
        });
        let queue = if self.queue == u32::MAX {
            "unlimited".to_owned()
        } else {
            self.queue.to_string()
        };
        let key = match &self.key {
            None => String::new(),
            Some(k) => format!(
                " key={} per key (prefix {}/{}, {} trusted proxies, missing={}) keys={}",
                k.describe_sources(),
                k.v4_prefix,
                k.v6_prefix,
                k.proxies.trusted.len(),
                self.key_missing.name(),
                self.keys
            ),
        };
        let key = key
            + &self.fair.as_ref().map_or(String::new(), |f| {
                format!(
                    " fair={} flow-slots={} flow-over={} strict={} flow-weights={}",
                    f.describe_source(),
                    f.flow_slots
                        .map_or_else(|| "fair-share".to_owned(), |n| n.to_string()),
                    if f.over == crate::fair::Over::Reject {
                        "reject"
                    } else {
                        "wait"
                    },
                    f.strict,
                    f.describe_weights()
                )
            });
        format!(
            "limit={limit} rate={rate} queue={queue} maxage={}ms error={} retry={} conntrack={}{key}{} metrics={}.remap.{}",
            self.maxage_ms,
            self.error,
            self.retry,
            self.conntrack,
            self.group
                .as_ref()
                .map_or(String::new(), |g| format!(" group={g}"))
                + &self
                    .peer
                    .as_ref()
                    .map_or(String::new(), |p| format!(" peers={}", p.describe()))
                + &self
                    .store
                    .as_ref()
                    .map_or(String::new(), |s| format!(" store={}", s.describe()))
                + &if self.block_s > 0 {
                    format!(" block={}s", self.block_s)
                } else {
                    String::new()
                }
                + if self.dry_run { " dry-run" } else { "" }
                + &if self.enforce < crate::enforce::ALL {
                    format!(" enforce={}%", self.enforce)
                } else {
                    String::new()
                }
                + &self.exempt.as_ref().map_or(String::new(), |e| {
                    format!(" exempt={} network(s)", e.nets.len())
                })
                + &self
                    .log
                    .as_ref()
                    .map_or(String::new(), |l| format!(" log={l}.log")),
            self.prefix,
            self.metric_tag
        )
    }
}
