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
use saphyr::{MarkedYaml, ScalarStyle, ScanError, YamlData, YamlLoader};
use saphyr_parser::Parser;

use super::{
    Draft, IpRepConf, ListConf, MetricsConf, Names, PerIpConf, PermaConf, QueueConf, Rate,
    SelectorConf, Sni, DEFAULT_PER_IP_KEYS, DEFAULT_PREFIX, MAX_NAME, MAX_SIEVE_SIZE,
};

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

    /// `rate:` and `burst:` of a selector or a `per-ip:`. `rate: 0` is no rate,
    /// as upstream; the burst defaults to one second's worth.
    fn rate(&self, m: &Map<'_, '_>, where_: &str) -> Result<Option<Rate>, String> {
        let burst = match m.get("burst") {
            Some(b) => Some(self.whole(b, &format!("{where_}: burst"), 1, 1_000_000)? as u32),
            None => None,
        };
        let Some(n) = m.get("rate") else {
            if let Some(b) = m.get("burst") {
                return Err(self.err(b, format!("{where_}: burst needs a rate")));
            }
            return Ok(None);
        };
        let w = format!("{where_}: rate");
        let t = self.text(n, &w)?;
        let r = t
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite() && (0.0..=1e9).contains(r) && plain_decimal(t))
            .ok_or_else(|| {
                self.err(
                    n,
                    format!(
                        "{w}: {} is not a number of connections per second (0 to 1000000000, \
                         such as 200 or 0.5)",
                        quote(t)
                    ),
                )
            })?;
        if r == 0.0 {
            return Ok(None);
        }
        Ok(Some(Rate {
            per_second: r,
            burst: burst.unwrap_or_else(|| r.ceil().clamp(1.0, 1_000_000.0) as u32),
        }))
    }

    /// `max-age` or `max_age` (not both), seconds; 0 is none.
    fn max_age(&self, m: &Map<'_, '_>, where_: &str) -> Result<Option<u32>, String> {
        let node = match (m.get("max-age"), m.get("max_age")) {
            (Some(a), Some(_)) => {
                return Err(self.err(
                    a,
                    format!("{where_}: max-age and max_age are the same key: give one"),
                ))
            }
            (Some(n), None) | (None, Some(n)) => n,
            (None, None) => return Ok(None),
        };
        let secs = self.whole(node, &format!("{where_}: max-age"), 0, u32::MAX.into())? as u32;
        Ok((secs > 0).then_some(secs))
    }

    fn percentage(&self, n: &Node<'_>, where_: &str) -> Result<u8, String> {
        let w = format!("{where_}: percentage");
        let t = self.text(n, &w)?;
        match t.parse::<u8>() {
            Ok(p) if p <= 99 && t.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
            _ => Err(self.err(
                n,
                format!(
                    "{w}: {} is not a whole percentage from 0 to 99 (such as 90; where \
                     upstream's docs write 0.9, write 90)",
                    quote(t)
                ),
            )),
        }
    }

    fn sni(&self, n: &Node<'_>, where_: &str) -> Result<Sni, String> {
        let t = self.text(n, where_)?;
        if t == "*" || t == "default" {
            return Ok(Sni::Any);
        }
        if t.is_empty() {
            return Ok(Sni::Missing);
        }
        let name = t.strip_suffix('.').unwrap_or(t).to_ascii_lowercase();
        let ok = !name.is_empty()
            && name.len() <= MAX_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !ok {
            let why = if name.contains('*') {
                "wildcards are not supported: list the names (aliases), or use \"*\" for every \
                 name no other selector takes"
            } else if !name.is_ascii() {
                "write an internationalized name in its ASCII (xn--) form"
            } else {
                "an SNI is a host name of letters, digits, '-', '.' and '_', at most 253 characters \
                 (\"*\": any other name; \"\": no SNI)"
            };
            return Err(self.err(n, format!("{where_}: {} is not an SNI: {why}", quote(t))));
        }
        Ok(Sni::Name(name))
    }

    /// A name of an ip-rep or a list.
    fn name(&self, n: &Node<'_>, where_: &str) -> Result<String, String> {
        let t = self.text(n, &format!("{where_}: name"))?;
        if t.is_empty() || t.len() > 128 || t.chars().any(char::is_control) {
            return Err(self.err(
                n,
                format!(
                    "{where_}: name {} must be 1 to 128 printable characters",
                    quote(t)
                ),
            ));
        }
        Ok(t.to_owned())
    }

    fn whole(&self, n: &Node<'_>, what: &str, min: u64, max: u64) -> Result<u64, String> {
        let t = self.text(n, what)?;
        t.parse::<u64>()
            .ok()
            .filter(|v| (min..=max).contains(v) && t.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                self.err(
                    n,
                    format!(
                        "{what}: {} is not a whole number from {min} to {max}",
                        quote(t)
                    ),
                )
            })
    }

    /// A scalar's text (a number reads as written).
    fn text<'a>(&self, n: &'a Node<'_>, what: &str) -> Result<&'a str, String> {
        match scalar(n) {
            Scalar::Text(t) => Ok(t),
            Scalar::Null => Err(self.err(n, format!("{what}: a value is missing"))),
            Scalar::Other(kind) => {
                Err(self.err(n, format!("{what}: a single value is expected, not {kind}")))
            }
        }
    }

    fn seq<'a, 'y>(&self, n: &'a Node<'y>, what: &str) -> Result<&'a [Node<'y>], String> {
        match &n.data {
            YamlData::Sequence(s) => Ok(s),
            _ if is_null(n) => Ok(&[]),
            _ => Err(self.err(n, format!("{what}: a list (- item, or [a, b]) is expected"))),
        }
    }

    fn map<'a, 'y>(
        &self,
        n: &'a Node<'y>,
        what: &str,
        allowed: &[&str],
    ) -> Result<Map<'a, 'y>, String> {
        match &n.data {
            YamlData::Mapping(m) => self.keys(m, what, allowed),
            _ => Err(self.err(
                n,
                format!(
                    "{what}: a mapping (key: value) is expected, with the keys {}",
                    allowed.join(", ")
                ),
            )),
        }
    }

    fn keys<'a, 'y>(
        &self,
        m: &'a saphyr::AnnotatedMapping<'y, Node<'y>>,
        what: &str,
        allowed: &[&str],
    ) -> Result<Map<'a, 'y>, String> {
        let mut out = Map::default();
        for (k, v) in m {
            let key = match scalar(k) {
                Scalar::Text(t) => t,
                _ => return Err(self.err(k, format!("{what}: a key must be a plain word"))),
            };
            if !allowed.contains(&key) {
                return Err(self.err(
                    k,
                    format!(
                        "{what}: unknown key {} (allowed: {})",
                        quote(key),
                        allowed.join(", ")
                    ),
                ));
            }
            out.0.push((key, v));
        }
        Ok(out)
    }
}

/// A mapping's known keys, in file order.
#[derive(Default)]
struct Map<'a, 'y>(Vec<(&'a str, &'a Node<'y>)>);

impl<'a, 'y> Map<'a, 'y> {
    fn get(&self, key: &str) -> Option<&'a Node<'y>> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn need(
        &self,
        r: &Reader<'_>,
        parent: &Node<'_>,
        what: &str,
        key: &str,
    ) -> Result<&'a Node<'y>, String> {
        self.get(key)
            .ok_or_else(|| r.err(parent, format!("{what}: {key} is missing")))
    }
}

fn line(n: &Node<'_>) -> usize {
    n.span.start.line()
}

fn scalar<'a>(n: &'a Node<'_>) -> Scalar<'a> {
    match &n.data {
        YamlData::Representation(text, style, tag) => {
            if tag.is_some() {
                return Scalar::Other("a tagged value");
            }
            let plain = *style == ScalarStyle::Plain;
            if plain && matches!(text.as_ref(), "" | "~" | "null" | "Null" | "NULL") {
                Scalar::Null
            } else {
                Scalar::Text(text)
            }
        }
        YamlData::Value(saphyr::Scalar::Null) => Scalar::Null,
        YamlData::Sequence(_) => Scalar::Other("a list"),
        YamlData::Mapping(_) => Scalar::Other("a mapping"),
        _ => Scalar::Other("this kind of node"),
    }
}

fn is_null(n: &Node<'_>) -> bool {
    matches!(scalar(n), Scalar::Null)
}

/// Digits with at most one '.', no sign, exponent, `inf` or `nan`.
fn plain_decimal(t: &str) -> bool {
    let mut dots = 0;
    !t.is_empty()
        && t.bytes().all(|b| {
            dots += usize::from(b == b'.');
            b.is_ascii_digit() || b == b'.'
        })
        && dots <= 1
        && t != "."
}

/// A metric name part: ATS metric names are dotted words.
fn metric_part(t: &str) -> Result<(), &'static str> {
    let ok = !t.is_empty()
        && t.len() <= 200
        && !t.starts_with('.')
        && !t.ends_with('.')
        && !t.contains("..")
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
    if ok {
        Ok(())
    } else {
        Err("is not a metric name part (letters, digits, '-', '_', ':' and inner dots)")
    }
}
