//! The global-mode file, checked: upstream's YAML (`selector:`, `ip-rep:`,
//! `lists:`) plus our `burst` and `per-ip`, as plain data.
//!
//! [`parse`] reads the text (`config/yaml.rs`: every node keeps its line,
//! so each message names the file, the line, the key, the value and what
//! is allowed) and then checks what only the whole file can tell (here):
//! names defined twice, `ip-rep` and `exclude` naming nothing, `ip-rep` on
//! a selector without a `limit`. A file that fails any check is refused
//! whole; the caller keeps serving the configuration it had.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use netaddr::CidrList;
use optspec::files::Files;
use quoting::{quote, shorten_to};

mod yaml;

#[cfg(test)]
mod tests;

/// Largest file read: a `lists:` of many CIDRs stays well below it.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Longest SNI name (a DNS name).
pub const MAX_NAME: usize = 253;

/// Largest `size:` of an ip-rep: 2^20 addresses in its entry bucket, about
/// 4 M in all, some 200 MB (see `sieve.rs` for the bytes per address).
pub const MAX_SIEVE_SIZE: u8 = 20;

/// Most selectors, names (`sni` and aliases together), ip-reps and lists
/// a file may hold: far beyond a real configuration, and checks and
/// lookups stay quick.
pub const MAX_SELECTORS: usize = 10_000;
pub const MAX_NAMES: usize = 100_000;
pub const MAX_IP_REPS: usize = 64;
pub const MAX_LISTS: usize = 1_000;

/// Most addresses all ip-reps' entry buckets hold together (the sum of
/// their 2^size): the sieves' memory bound, some 500 MB at most.
pub const MAX_SIEVE_ENTRIES: u64 = 1 << 21;

/// What `per-ip:` holds at most by default (`keys:`).
pub const DEFAULT_PER_IP_KEYS: usize = 65_536;

/// Upstream's metric prefix.
pub const DEFAULT_PREFIX: &str = "plugin.rate_limiter";

/// A checked file.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub selectors: Vec<SelectorConf>,
    pub ip_reps: Vec<IpRepConf>,
    pub lists: Vec<ListConf>,
    /// Accepted but worth a line in diags.log (e.g. a queue with nothing to wait for).
    pub warnings: Vec<String>,
}

/// Which connections a selector takes, by their SNI.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Sni {
    /// Exactly this name (lowercase ASCII, no trailing dot), or one of the aliases.
    Name(String),
    /// `"*"` or `"default"`: any connection no other selector takes,
    /// including those without an SNI unless a `""` selector takes them.
    Any,
    /// `""`: connections that sent no SNI.
    Missing,
}

impl Sni {
    /// How `show` and the logs name it.
    pub fn label(&self) -> &str {
        match self {
            Sni::Name(n) => n,
            Sni::Any => "*",
            Sni::Missing => "",
        }
    }
}

/// A rate: new connections per second, and how many may come at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

/// `queue:`: handshakes parked while the selector is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConf {
    /// Most parked at once (`size`, default unlimited: `u32::MAX`).
    pub size: u32,
    /// Longest park, seconds (`max-age`; `None`: no limit but Traffic Server's
    /// own handshake timeout).
    pub max_age: Option<u32>,
}

/// `metrics:`: the selector publishes `PREFIX.sni.TAG.*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConf {
    pub prefix: String,
    pub tag: String,
}

/// `per-ip:` (ours): each client address's own limits inside the selector.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerIpConf {
    /// Concurrent connections per address.
    pub limit: Option<u32>,
    /// New connections per second per address.
    pub rate: Option<Rate>,
    /// Addresses tracked at once (bounded table).
    pub keys: usize,
}

/// One `selector:` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectorConf {
    /// Its line in the file.
    pub line: usize,
    pub sni: Sni,
    /// Other names it takes (lowercase).
    pub aliases: Vec<String>,
    /// Concurrent TLS connections (`None`: no limit; `limit: 0` too, as upstream).
    pub limit: Option<u32>,
    /// New connections per second (`None`: no rate; `rate: 0` too).
    pub rate: Option<Rate>,
    /// `None`: no queue (over the limit, the handshake fails at once).
    pub queue: Option<QueueConf>,
    /// `None`: no metrics of its own (as upstream without `metrics:`).
    pub metrics: Option<MetricsConf>,
    /// Index into [`Config::ip_reps`].
    pub ip_rep: Option<usize>,
    /// Index into [`Config::lists`].
    pub exclude: Option<usize>,
    pub per_ip: Option<PerIpConf>,
}

/// Perma-blocking of an ip-rep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PermaConf {
    pub limit: u32,
    pub threshold: u8,
    /// Seconds.
    pub max_age: Option<u32>,
}

/// One `ip-rep:` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpRepConf {
    pub line: usize,
    pub name: String,
    pub buckets: u8,
    /// log2 of the entry bucket; 0: off.
    pub size: u8,
    pub percentage: u8,
    /// Seconds.
    pub max_age: Option<u32>,
    pub perma: Option<PermaConf>,
}

/// One `lists:` entry.
#[derive(Clone, Debug)]
pub struct ListConf {
    pub line: usize,
    pub name: String,
    pub cidrs: Arc<CidrList>,
}

/// Reads and checks the file at `path` (`shown` names it in messages).
pub fn load(path: &Path, files: &dyn Files) -> Result<Config, String> {
    let shown = shorten_to(&path.display().to_string(), 256);
    let file = files
        .read(path, MAX_FILE_BYTES)
        .map_err(|e| format!("cannot read {shown}: {}", e.std_wording()))?;
    parse(&file.text, &shown)
}

/// Parses and checks the file's text; `file` names it in messages.
pub fn parse(text: &str, file: &str) -> Result<Config, String> {
    let draft = yaml::read(text, file)?;
    check(draft, file)
}

/// What `yaml.rs` read, names not yet resolved.
#[derive(Default)]
pub(crate) struct Draft {
    pub selectors: Vec<(SelectorConf, Names)>,
    pub ip_reps: Vec<IpRepConf>,
    pub lists: Vec<ListConf>,
    pub warnings: Vec<String>,
}

/// A selector's references, with their lines.
#[derive(Default)]
pub(crate) struct Names {
    pub ip_rep: Option<(String, usize)>,
    pub exclude: Option<(String, usize)>,
    /// The line of each alias.
    pub alias_lines: Vec<usize>,
}

fn check(draft: Draft, file: &str) -> Result<Config, String> {
    let at = |line: usize, msg: String| format!("{file}:{line}: {msg}");
    bounded(&draft, file)?;
    let mut warnings = draft.warnings;
    // Names to indexes (hash maps: a file may hold many thousands).
    let mut rep_index = HashMap::with_capacity(draft.ip_reps.len());
    for (i, r) in draft.ip_reps.iter().enumerate() {
        if let Some(first) = rep_index.insert(r.name.as_str(), i) {
            let first = draft.ip_reps[first].line;
            return Err(at(
                r.line,
                format!(
                    "ip-rep {} is defined twice (first at line {first})",
                    quote(&r.name)
                ),
            ));
        }
    }
    let mut list_index = HashMap::with_capacity(draft.lists.len());
    for (i, l) in draft.lists.iter().enumerate() {
        if let Some(first) = list_index.insert(l.name.as_str(), i) {
            let first = draft.lists[first].line;
            return Err(at(
                l.line,
                format!(
                    "list {} is defined twice (first at line {first})",
                    quote(&l.name)
                ),
            ));
        }
    }
    // Every name a selector takes, to refuse one taken twice.
    let mut taken: HashMap<Sni, usize> = HashMap::new();
    let mut selectors = Vec::with_capacity(draft.selectors.len());
    for (mut s, names) in draft.selectors {
        let mut claim = |sni: Sni, line: usize| -> Result<(), String> {
            if let Some(first) = taken.get(&sni) {
                let what = match &sni {
                    Sni::Name(n) => format!("the SNI {}", quote(n)),
                    Sni::Any => "the catch-all (\"*\" or \"default\")".to_owned(),
                    Sni::Missing => "connections without an SNI (\"\")".to_owned(),
                };
                return Err(at(
                    line,
                    format!("{what} is already taken by the selector at line {first}"),
                ));
            }
            taken.insert(sni, line);
            Ok(())
        };
        claim(s.sni.clone(), s.line)?;
        for (a, line) in s.aliases.iter().zip(&names.alias_lines) {
            claim(Sni::Name(a.clone()), *line)?;
        }
        let label = quote(s.sni.label());
        if let Some((name, line)) = names.ip_rep {
            let Some(&i) = rep_index.get(name.as_str()) else {
                return Err(at(
                    line,
                    format!(
                        "selector {label}: ip-rep {} names no ip-rep entry ({})",
                        quote(&name),
                        defined(draft.ip_reps.iter().map(|r| r.name.as_str()))
                    ),
                ));
            };
            if s.limit.is_none() {
                return Err(at(
                    line,
                    format!(
                        "selector {label}: ip-rep needs a limit: the pressure that turns it on is \
                         the share of the limit in use"
                    ),
                ));
            }
            if draft.ip_reps[i].size == 0 {
                warnings.push(at(
                    line,
                    format!(
                        "selector {label}: ip-rep {} has size 0, which turns it off",
                        quote(&name)
                    ),
                ));
            }
            s.ip_rep = Some(i);
        }
        if let Some((name, line)) = names.exclude {
            let Some(&i) = list_index.get(name.as_str()) else {
                return Err(at(
                    line,
                    format!(
                        "selector {label}: exclude {} names no list ({})",
                        quote(&name),
                        defined(draft.lists.iter().map(|l| l.name.as_str()))
                    ),
                ));
            };
            s.exclude = Some(i);
        }
        if s.queue.is_some() && s.limit.is_none() && s.rate.is_none() {
            warnings.push(at(
                s.line,
                format!("selector {label}: queue has no effect without a limit or a rate"),
            ));
        }
        selectors.push(s);
    }
    if selectors.is_empty() {
        warnings.push(format!(
            "{file}: no selector: every TLS connection passes unlimited"
        ));
    }
    Ok(Config {
        selectors,
        ip_reps: draft.ip_reps,
        lists: draft.lists,
        warnings,
    })
}

/// The file's size limits (see [`MAX_SELECTORS`] and the others).
fn bounded(d: &Draft, file: &str) -> Result<(), String> {
    let names: usize = d.selectors.iter().map(|(s, _)| 1 + s.aliases.len()).sum();
    let entries: u64 = d
        .ip_reps
        .iter()
        .filter(|r| r.size > 0)
        .map(|r| 1u64 << r.size)
        .sum();
    let over = [
        ("selectors", d.selectors.len() as u64, MAX_SELECTORS as u64),
        ("names (sni and aliases)", names as u64, MAX_NAMES as u64),
        ("ip-rep entries", d.ip_reps.len() as u64, MAX_IP_REPS as u64),
        ("lists", d.lists.len() as u64, MAX_LISTS as u64),
        (
            "addresses in the ip-reps' entry buckets (the sum of 2^size)",
            entries,
            MAX_SIEVE_ENTRIES,
        ),
    ]
    .into_iter()
    .find(|(_, n, max)| n > max);
    match over {
        Some((what, n, max)) => Err(format!("{file}: {n} {what}: at most {max} are allowed")),
        None => Ok(()),
    }
}

/// "defined: a, b" or "none is defined".
fn defined<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let list: Vec<String> = names.map(quote).collect();
    if list.is_empty() {
        "none is defined".to_owned()
    } else {
        format!("defined: {}", shorten_to(&list.join(", "), 200))
    }
}
