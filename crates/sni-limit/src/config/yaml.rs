//! Reading the file's YAML into a [`Draft`]: each node keeps its line, and
//! each message says where (`FILE:LINE`), which key, the value as written,
//! and what is allowed.
//!
//! Scalars are read as written (saphyr's `early_parse` off) and converted
//! here, so `limit: 1e3` or `limit: 0x10` is refused rather than guessed,
//! and a quoted number reads as the number (as yaml-cpp, upstream's
//! parser, does). Both spellings of `max-age` are taken: upstream's docs
//! write `max-age`, its code reads `max_age`.

use std::sync::Arc;

use ipnet::IpNet;
use netaddr::CidrList;
use quoting::{quote, shorten_to};
use saphyr::{MarkedYaml, ScanError, YamlData, YamlLoader};
use saphyr_parser::Parser;

use super::{
    Draft, IpRepConf, ListConf, MetricsConf, Names, PerIpConf, PermaConf, QueueConf, SelectorConf,
    Sni, DEFAULT_PER_IP_KEYS, DEFAULT_PREFIX, MAX_SIEVE_SIZE,
};

mod values;

use values::{is_null, line, metric_part, Map};

/// Nodes a file may expand to through aliases (saphyr's default is 100 000).
const ALIAS_NODES: usize = 10_000;

// The keys of each node: the one list of them (messages, the docs test).
pub(crate) const TOP: &[&str] = &["selector", "ip-rep", "lists"];
pub(crate) const SELECTOR: &[&str] = &[
    "sni", "aliases", "limit", "rate", "burst", "queue", "metrics", "ip-rep", "exclude", "per-ip",
];
pub(crate) const QUEUE: &[&str] = &["size", "max-age", "max_age"];
pub(crate) const METRICS: &[&str] = &["tag", "prefix"];
pub(crate) const PER_IP: &[&str] = &["limit", "rate", "burst", "keys"];
pub(crate) const IP_REP: &[&str] = &[
    "name",
    "buckets",
    "size",
    "percentage",
    "max-age",
    "max_age",
    "perma-block",
];
pub(crate) const PERMA: &[&str] = &["limit", "threshold", "max-age", "max_age"];
pub(crate) const LIST: &[&str] = &["name", "cidr"];

/// Reads `text` (named `file` in messages).
pub(super) fn read(text: &str, file: &str) -> Result<Draft, String> {
    let mut loader: YamlLoader<'_, MarkedYaml<'_>> = YamlLoader::default();
    loader.early_parse(false);
    loader.alias_limit(ALIAS_NODES);
    let mut parser = Parser::new_from_str(text);
    let scan = |e: &ScanError| {
        format!(
            "{file}:{}: not valid YAML: {}",
            e.marker().line(),
            shorten_to(e.info(), 200)
        )
    };
    parser.load(&mut loader, true).map_err(|e| scan(&e))?;
    if let Some(e) = loader.error() {
        return Err(scan(e));
    }
    let docs = loader.into_documents();
    let r = Reader { file };
    match docs.as_slice() {
        [] => Ok(Draft::default()),
        [doc] => r.top(doc),
        [_, second, ..] => Err(r.err(
            second,
            "the file holds several YAML documents (---): give one".into(),
        )),
    }
}

/// Words messages with the file's name.
struct Reader<'f> {
    file: &'f str,
}

/// A node's scalar text, or why it has none.
enum Scalar<'a> {
    Text(&'a str),
    Null,
    Other(&'static str),
}

type Node<'y> = MarkedYaml<'y>;

impl Reader<'_> {
    fn err(&self, node: &Node<'_>, msg: String) -> String {
        format!("{}:{}: {msg}", self.file, line(node))
    }

    fn top(&self, doc: &Node<'_>) -> Result<Draft, String> {
        let mut d = Draft::default();
        let map = match &doc.data {
            YamlData::Mapping(m) => m,
            _ if is_null(doc) => return Ok(d),
            _ => {
                return Err(self.err(
                    doc,
                    "the file must be a mapping with the keys selector, ip-rep and lists".into(),
                ))
            }
        };
        let top = self.keys(map, "the file", TOP)?;
        // Lists and ip-reps first: selectors name them (resolved in config.rs).
        if let Some(n) = top.get("lists") {
            for (i, item) in self.seq(n, "lists")?.iter().enumerate() {
                d.lists.push(self.list(item, i + 1)?);
            }
        }
        if let Some(n) = top.get("ip-rep") {
            for (i, item) in self.seq(n, "ip-rep")?.iter().enumerate() {
                d.ip_reps.push(self.ip_rep(item, i + 1)?);
            }
        }
        if let Some(n) = top.get("selector") {
            for (i, item) in self.seq(n, "selector")?.iter().enumerate() {
                d.selectors
                    .push(self.selector(item, i + 1, &mut d.warnings)?);
            }
        }
        Ok(d)
    }

    fn list(&self, node: &Node<'_>, nth: usize) -> Result<ListConf, String> {
        let where_ = format!("lists entry {nth}");
        let m = self.map(node, &where_, LIST)?;
        let name = self.name(m.need(self, node, &where_, "name")?, &where_)?;
        let where_ = format!("list {}", quote(&name));
        let cidr = m.need(self, node, &where_, "cidr")?;
        let mut list = CidrList::new();
        for item in self.seq(cidr, &format!("{where_}: cidr"))? {
            let text = self.text(item, &format!("{where_}: cidr"))?;
            let net = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    self.err(
                        item,
                        format!(
                            "{where_}: cidr: {} is not an IP address or CIDR (such as \
                             10.0.0.0/8, 2001:db8::/32 or 192.0.2.7)",
                            quote(text)
                        ),
                    )
                })?;
            list.insert(netaddr::canonical_net(net));
        }
        Ok(ListConf {
            line: line(node),
            name,
            cidrs: Arc::new(list),
        })
    }

    fn ip_rep(&self, node: &Node<'_>, nth: usize) -> Result<IpRepConf, String> {
        let where_ = format!("ip-rep entry {nth}");
        let m = self.map(node, &where_, IP_REP)?;
        let name = self.name(m.need(self, node, &where_, "name")?, &where_)?;
        let where_ = format!("ip-rep {}", quote(&name));
        let buckets = match m.get("buckets") {
            Some(n) => self.whole(n, &format!("{where_}: buckets"), 1, 99)? as u8,
            None => 10,
        };
        let size = match m.get("size") {
            Some(n) => {
                let v = self.whole(n, &format!("{where_}: size"), 0, MAX_SIEVE_SIZE.into())? as u8;
                if v != 0 && v < buckets {
                    return Err(self.err(
                        n,
                        format!(
                            "{where_}: size {v} is smaller than buckets {buckets}: each bucket \
                             halves the one before, so size must be at least buckets (or 0: off)"
                        ),
                    ));
                }
                v
            }
            None => 0,
        };
        let percentage = match m.get("percentage") {
            Some(n) => self.percentage(n, &where_)?,
            None => 90,
        };
        let max_age = self.max_age(&m, &where_)?;
        let perma = match m.get("perma-block") {
            Some(n) => {
                let w = format!("{where_}: perma-block");
                let p = self.map(n, &w, PERMA)?;
                let threshold = match p.get("threshold") {
                    Some(t) => self.whole(t, &format!("{w}: threshold"), 0, buckets.into())? as u8,
                    None => 0,
                };
                Some(PermaConf {
                    limit: match p.get("limit") {
                        Some(l) => {
                            self.whole(l, &format!("{w}: limit"), 0, u32::MAX.into())? as u32
                        }
                        None => 0,
                    },
                    threshold,
                    max_age: self.max_age(&p, &w)?,
                })
            }
            None => None,
        };
        Ok(IpRepConf {
            line: line(node),
            name,
            buckets,
            size,
            percentage,
            max_age,
            perma,
        })
    }

    fn selector(
        &self,
        node: &Node<'_>,
        nth: usize,
        warnings: &mut Vec<String>,
    ) -> Result<(SelectorConf, Names), String> {
        let where_ = format!("selector {nth}");
        let m = self.map(node, &where_, SELECTOR)?;
        let sni_node = m.need(self, node, &where_, "sni")?;
        let sni = self.sni(sni_node, &where_)?;
        let label = quote(sni.label());
        let where_ = format!("selector {label}");
        let mut names = Names::default();
        let mut aliases = Vec::new();
        if let Some(a) = m.get("aliases") {
            for item in self.seq(a, &format!("{where_}: aliases"))? {
                match self.sni(item, &format!("{where_}: aliases"))? {
                    Sni::Name(n) => {
                        aliases.push(n);
                        names.alias_lines.push(line(item));
                    }
                    _ => {
                        return Err(self.err(
                            item,
                            format!(
                                "{where_}: aliases: an alias is a name (\"*\", \"default\" and \
                                 \"\" are selectors of their own)"
                            ),
                        ))
                    }
                }
            }
        }
        // 0 means none, as upstream (has_limit() is false for 0).
        let limit = match m.get("limit") {
            Some(n) => Some(self.whole(n, &format!("{where_}: limit"), 0, u32::MAX.into())? as u32)
                .filter(|&l| l > 0),
            None => None,
        };
        let rate = self.rate(&m, &where_)?;
        let queue = match m.get("queue") {
            Some(n) if is_null(n) => Some(QueueConf {
                size: u32::MAX,
                max_age: None,
            }),
            Some(n) => {
                let w = format!("{where_}: queue");
                let q = self.map(n, &w, QUEUE)?;
                let size = match q.get("size") {
                    Some(s) => self.whole(s, &format!("{w}: size"), 0, u32::MAX.into())? as u32,
                    None => u32::MAX,
                };
                // `size: 0` disables the queue (upstream's docs).
                (size > 0).then_some(QueueConf {
                    size,
                    max_age: self.max_age(&q, &w)?,
                })
            }
            None => None,
        };
        let metrics = match m.get("metrics") {
            Some(n) => {
                let w = format!("{where_}: metrics");
                let mm = if is_null(n) {
                    Map::default()
                } else {
                    self.map(n, &w, METRICS)?
                };
                let part = |key: &str, default: String| -> Result<String, String> {
                    let Some(v) = mm.get(key) else {
                        return Ok(default);
                    };
                    let w = format!("{w}: {key}");
                    let t = self.text(v, &w)?;
                    metric_part(t)
                        .map_err(|why| self.err(v, format!("{w}: {} {why}", quote(t))))?;
                    Ok(t.to_owned())
                };
                let tag_default = match &sni {
                    Sni::Name(n) => n.clone(),
                    Sni::Any => "default".to_owned(),
                    Sni::Missing => "no_sni".to_owned(),
                };
                Some(MetricsConf {
                    prefix: part("prefix", DEFAULT_PREFIX.to_owned())?,
                    tag: part("tag", tag_default)?,
                })
            }
            None => None,
        };
        for (key, slot) in [
            ("ip-rep", &mut names.ip_rep),
            ("exclude", &mut names.exclude),
        ] {
            if let Some(n) = m.get(key) {
                let t = self.text(n, &format!("{where_}: {key}"))?;
                *slot = Some((t.to_owned(), line(n)));
            }
        }
        let per_ip = match m.get("per-ip") {
            Some(n) => {
                let w = format!("{where_}: per-ip");
                let p = self.map(n, &w, PER_IP)?;
                let limit = match p.get("limit") {
                    Some(l) => {
                        Some(self.whole(l, &format!("{w}: limit"), 1, u32::MAX.into())? as u32)
                    }
                    None => None,
                };
                let rate = self.rate(&p, &w)?;
                if limit.is_none() && rate.is_none() {
                    return Err(self.err(n, format!("{w}: give a limit, a rate or both")));
                }
                let keys = match p.get("keys") {
                    Some(k) => self.whole(k, &format!("{w}: keys"), 64, 1 << 24)? as usize,
                    None => DEFAULT_PER_IP_KEYS,
                };
                Some(PerIpConf { limit, rate, keys })
            }
            None => None,
        };
        if limit.is_none() && rate.is_none() && per_ip.is_none() && m.get("ip-rep").is_none() {
            warnings.push(self.err(
                node,
                format!("{where_}: no limit, rate or per-ip: it limits nothing"),
            ));
        }
        Ok((
            SelectorConf {
                line: line(node),
                sni,
                aliases,
                limit,
                rate,
                queue,
                metrics,
                ip_rep: None,
                exclude: None,
                per_ip,
            },
            names,
        ))
    }
}
