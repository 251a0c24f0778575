//! Reading values: scalars as written (numbers, rates, durations, names,
//! SNIs), lists and mappings with their allowed keys, each error worded
//! with where it is and what is allowed.

use quoting::quote;
use saphyr::{ScalarStyle, YamlData};

use super::super::{Rate, Sni, MAX_NAME};
use super::{Node, Reader, Scalar};

impl Reader<'_> {
    /// `rate:` and `burst:` of a selector or a `per-ip:`. `rate: 0` is no rate,
    /// as upstream; the burst defaults to one second's worth.
    pub(super) fn rate(&self, m: &Map<'_, '_>, where_: &str) -> Result<Option<Rate>, String> {
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
    pub(super) fn max_age(&self, m: &Map<'_, '_>, where_: &str) -> Result<Option<u32>, String> {
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

    pub(super) fn percentage(&self, n: &Node<'_>, where_: &str) -> Result<u8, String> {
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

    pub(super) fn sni(&self, n: &Node<'_>, where_: &str) -> Result<Sni, String> {
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
    pub(super) fn name(&self, n: &Node<'_>, where_: &str) -> Result<String, String> {
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

    pub(super) fn whole(
        &self,
        n: &Node<'_>,
        what: &str,
        min: u64,
        max: u64,
    ) -> Result<u64, String> {
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
    pub(super) fn text<'a>(&self, n: &'a Node<'_>, what: &str) -> Result<&'a str, String> {
        match scalar(n) {
            Scalar::Text(t) => Ok(t),
            Scalar::Null => Err(self.err(n, format!("{what}: a value is missing"))),
            Scalar::Other(kind) => {
                Err(self.err(n, format!("{what}: a single value is expected, not {kind}")))
            }
        }
    }

    pub(super) fn seq<'a, 'y>(
        &self,
        n: &'a Node<'y>,
        what: &str,
    ) -> Result<&'a [Node<'y>], String> {
        match &n.data {
            YamlData::Sequence(s) => Ok(s),
            _ if is_null(n) => Ok(&[]),
            _ => Err(self.err(n, format!("{what}: a list (- item, or [a, b]) is expected"))),
        }
    }

    pub(super) fn map<'a, 'y>(
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

    pub(super) fn keys<'a, 'y>(
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
pub(super) struct Map<'a, 'y>(Vec<(&'a str, &'a Node<'y>)>);

impl<'a, 'y> Map<'a, 'y> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Node<'y>> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    pub(super) fn need(
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

pub(super) fn line(n: &Node<'_>) -> usize {
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

pub(super) fn is_null(n: &Node<'_>) -> bool {
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
pub(super) fn metric_part(t: &str) -> Result<(), &'static str> {
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
