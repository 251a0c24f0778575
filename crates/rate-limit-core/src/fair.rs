//! `--fair` and its options: a rule's (or group's) `--limit` slots shared
//! fairly between flows (OMERO's per-session, per-user and per-group
//! throttling strategies), and the `--flow-weights` file.
//!
//! | OMERO term | option |
//! |---|---|
//! | strategy (per session / user / group) | `--fair=session`, `--fair=header:X-User`, `--fair=header:X-Group`, … |
//! | slots (per host) | `--flow-slots=N` (default: the fair share) |
//! | hard limit (`OverUsageException`) / soft limit | `--flow-over=reject` / `--flow-over=wait` |
//! | strict / borrowing | `--strict` / default |

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;

use limits::quote::quote;
use limits::{FairConfig, FlowWeight};
use optspec::files::{Files, FsFiles};

use crate::key::KeySpec;
use optspec::{Live, Opt};

use crate::options::common::{apply_given, invalid, OptionError, Order};

/// Most lines of a weights file.
pub const MAX_WEIGHT_LINES: usize = 100_000;
/// Largest weight.
pub const MAX_WEIGHT: u32 = 1000;
/// Largest weights file read: its most lines at ~160 bytes each.
pub const MAX_WEIGHTS_BYTES: u64 = 16 << 20;

/// What a flow is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowSource {
    /// The client connection (OMERO's per-session strategy).
    Session,
    /// A `--key` source: `ip`, `header:NAME`, `cookie:NAME`, `query:NAME`.
    Key(KeySpec),
}

/// What a flow at its slots gets (`--flow-over`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Over {
    /// Refused at once with `--error` (a hard limit).
    Reject,
    /// Waits in its flow's queue (a soft limit).
    Wait,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FairOptions {
    pub source: FlowSource,
    /// `--flow-slots`; `None`: the fair share of the active flows.
    pub flow_slots: Option<u32>,
    pub over: Over,
    pub strict: bool,
    /// `--flow-weights`, as written (relative to ATS's config dir).
    pub weights_file: Option<String>,
    /// The file's entries, once [`load_weights`] read it.
    pub weights: Weights,
}

/// Key values with their own slots or weight: (key bytes, weight), in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Weights {
    pub entries: Vec<(Vec<u8>, FlowWeight)>,
}

impl Weights {
    /// Identifies the contents, so a reload sees an edited file as a change.
    pub fn fingerprint(&self) -> u64 {
        let mut h =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .build_hasher();
        for (k, w) in &self.entries {
            h.write(k);
            h.write_u32(w.slots.map_or(0, |s| s + 1));
            h.write_u32(w.weight);
        }
        h.finish()
    }
}

impl FairOptions {
    /// The scheduler's configuration, with flow keys hashed by `hash`.
    pub fn config(&self, hash: impl Fn(&[u8]) -> u64) -> FairConfig {
        FairConfig {
            flow_slots: self.flow_slots,
            strict: self.strict,
            reject_over: self.over == Over::Reject,
            weights: self
                .weights
                .entries
                .iter()
                .map(|(k, w)| (hash(k), *w))
                .collect::<HashMap<_, _>>(),
        }
    }

    pub fn describe_source(&self) -> String {
        match &self.source {
            FlowSource::Session => "session".to_owned(),
            FlowSource::Key(k) => k.describe_sources(),
        }
    }

    /// `--flow-weights` for reports and change detection: the file and a
    /// fingerprint of what it held when loaded.
    pub fn describe_weights(&self) -> String {
        match &self.weights_file {
            None => "none".to_owned(),
            Some(f) => format!(
                "{f} ({} entries, {:016x})",
                self.weights.entries.len(),
                self.weights.fingerprint()
            ),
        }
    }
}

/// The fair-share options: the single source of their names. Their values
/// are checked in this order, whatever the order given; `u32` is the most
/// `--flow-slots` allowed (the rule's `--limit`).
pub static OPTIONS: &[Opt<Values, u32, OptionError>] = &[
    Opt::value(
        "fair",
        "share the limit's slots fairly between flows: what a flow is",
        set_fair,
    ),
    Opt::value(
        "flow-slots",
        "slots one flow may hold at once on this host",
        |f: &mut Values, v: &str, &most: &u32| {
            let allowed = || format!("an integer from 1 to the --limit ({most})");
            let n = optspec::value::uint(v, 1, u64::from(most))
                .map_err(|_| invalid("flow-slots", v, &allowed()))?;
            f.flow_slots = Some(n as u32);
            Ok(())
        },
    )
    .live(Live::Reload),
    Opt::value(
        "flow-over",
        "a flow at its slots: reject or wait",
        |f: &mut Values, v: &str, _: &u32| {
            f.over = optspec::value::word(v, &[("wait", Over::Wait), ("reject", Over::Reject)])
                .ok_or_else(|| invalid("flow-over", v, "reject or wait"))?;
            Ok(())
        },
    )
    .live(Live::Reload),
    Opt::flag(
        "strict",
        "a flow never holds more than its slots, even when others are idle",
        |f: &mut Values, _: &u32| {
            f.strict = true;
            Ok(())
        },
    )
    .live(Live::Reload),
    Opt::value(
        "flow-weights",
        "file of key values with their own slots or weight",
        |f: &mut Values, v: &str, _: &u32| {
            if v.is_empty() || v.len() > 4096 || v.contains('\0') {
                return Err(invalid(
                    "flow-weights",
                    v,
                    "a file name of 1 to 4096 bytes (relative to the config dir)",
                ));
            }
            f.weights_file = Some(v.to_owned());
            Ok(())
        },
    )
    .live(Live::Reload),
];

/// The fair-share options' values, before they are checked together.
pub struct Values {
    source: Option<FlowSource>,
    flow_slots: Option<u32>,
    over: Over,
    strict: bool,
    weights_file: Option<String>,
}

fn set_fair(f: &mut Values, v: &str, _: &u32) -> Result<(), OptionError> {
    if v == "session" {
        f.source = Some(FlowSource::Session);
        return Ok(());
    }
    let sources = KeySpec::parse_sources(v)
        .ok()
        .filter(|s| s.len() == 1)
        .ok_or_else(|| {
            invalid(
                "fair",
                v,
                "one of session, ip, header:NAME, cookie:NAME or query:NAME",
            )
        })?;
    f.source = Some(FlowSource::Key(KeySpec {
        sources,
        v4_prefix: 32,
        v6_prefix: 64,
        proxies: crate::key::TrustedProxies::none(),
    }));
    Ok(())
}

/// Parses the `--fair` options (`raw`: name and value as given). `limit`:
/// the rule's concurrency limit; `key`, `conntrack`: whether those are set.
pub fn parse(
    raw: &[(&'static str, String)],
    limit: Option<u32>,
    key: bool,
    conntrack: bool,
) -> Result<Option<FairOptions>, OptionError> {
    // Values first (an error names the option and its value), then how
    // the options combine.
    let mut given = Values {
        source: None,
        flow_slots: None,
        over: Over::Wait,
        strict: false,
        weights_file: None,
    };
    apply_given(
        OPTIONS,
        raw,
        Order::Table,
        &mut given,
        &limit.unwrap_or(u32::MAX),
    )?;
    let Values {
        source,
        flow_slots,
        over,
        strict,
        weights_file,
    } = given;
    let Some(source) = source else {
        if let Some((other, _)) = raw.first() {
            return Err(OptionError(format!(
                "--{other} needs --fair (it configures fair shares between flows)"
            )));
        }
        return Ok(None);
    };
    if limit.is_none() {
        return Err(OptionError(
            "--fair needs --limit (it shares the rule's concurrency slots)".to_owned(),
        ));
    }
    if key {
        return Err(OptionError(
            "--fair cannot be combined with --key: --key gives each client its own limits, \
             --fair shares one limit between clients"
                .to_owned(),
        ));
    }
    if conntrack {
        return Err(OptionError(
            "--fair cannot be combined with --conntrack (use --fair=session to share slots per connection)"
                .to_owned(),
        ));
    }
    if weights_file.is_some() && source == FlowSource::Session {
        return Err(OptionError(
            "--flow-weights needs --fair=ip, header:NAME, cookie:NAME or query:NAME: \
             sessions have no names to list"
                .to_owned(),
        ));
    }
    Ok(Some(FairOptions {
        source,
        flow_slots,
        over,
        strict,
        weights_file,
        weights: Weights::default(),
    }))
}

/// Reads `--flow-weights` (a relative name is under `config_dir`).
pub fn load_weights(o: &mut FairOptions, config_dir: &Path) -> Result<(), OptionError> {
    let Some(name) = &o.weights_file else {
        return Ok(());
    };
    let path = config_dir.join(name);
    let file = FsFiles.read(&path, MAX_WEIGHTS_BYTES).map_err(|e| {
        OptionError(format!(
            "--flow-weights cannot read {}: {}",
            quote(&path.display().to_string()),
            e.std_wording()
        ))
    })?;
    o.weights = parse_weights(&file.text, name, &o.source)?;
    Ok(())
}

/// Parses a weights file: one key value a line, then `slots=N` and/or
/// `weight=W`; `#` starts a comment. A bad line fails with `file:line`.
pub fn parse_weights(text: &str, file: &str, source: &FlowSource) -> Result<Weights, OptionError> {
    let FlowSource::Key(spec) = source else {
        return Ok(Weights::default());
    };
    let mut entries: Vec<(Vec<u8>, FlowWeight)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let at = || format!("--flow-weights {}:{}", quote(file), n + 1);
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if entries.len() >= MAX_WEIGHT_LINES {
            return Err(OptionError(format!(
                "{}: more than {MAX_WEIGHT_LINES} entries",
                at()
            )));
        }
        let mut words = line.split_ascii_whitespace();
        let value = words.next().unwrap_or_default();
        let mut key = Vec::new();
        if !spec.value_key(value, &mut key) {
            return Err(OptionError(format!(
                "{}: {} is not an IP address (--fair=ip)",
                at(),
                quote(value)
            )));
        }
        let mut w = FlowWeight::default();
        let mut any = false;
        for word in words {
            let bad = || {
                OptionError(format!(
                    "{}: {} is not slots=N (1 to 4294967295) or weight=W (1 to {MAX_WEIGHT})",
                    at(),
                    quote(word)
                ))
            };
            let (k, v) = word.split_once('=').ok_or_else(bad)?;
            let num = v
                .parse::<u32>()
                .ok()
                .filter(|&x| x >= 1 && v.bytes().all(|b| b.is_ascii_digit()));
            match (k, num) {
                ("slots", Some(x)) => w.slots = Some(x),
                ("weight", Some(x)) if x <= MAX_WEIGHT => w.weight = x,
                _ => return Err(bad()),
            }
            any = true;
        }
        if !any {
            return Err(OptionError(format!(
                "{}: {} needs slots=N and/or weight=W",
                at(),
                quote(value)
            )));
        }
        if !seen.insert(key.clone()) {
            return Err(OptionError(format!(
                "{}: {} is listed twice",
                at(),
                quote(value)
            )));
        }
        entries.push((key, w));
    }
    Ok(Weights { entries })
}

#[cfg(test)]
mod tests;
