//! May a cached response be served stale, and how stale is it?
//!
//! ATS tells the plugin *whether* a hit is stale; this module works out *how*
//! stale, from the cached response's own headers (the 9.2 API does not expose
//! ATS's fill time):
//! - age = max(now − `Date`, `Age`) (RFC 9111 §4.2.3 with the fill time taken
//!   as `Date`);
//! - freshness lifetime = `s-maxage`, else `max-age`, else `Expires` − `Date`,
//!   else 0 (a heuristic lifetime is ATS's business; counting staleness from
//!   `Date` is the conservative choice);
//! - allowance = the greater of the rule's `stale` and the response's
//!   `stale-if-error`;
//! - responses whose directives forbid serving them stale (RFC 9111 §4.2.4:
//!   `must-revalidate`, `proxy-revalidate`, `s-maxage`, `no-cache`,
//!   `no-store`) are never served stale.

use crate::httpdate;

/// Largest delta-seconds value (RFC 9111 §1.2.2 caps overflow at 2^31).
const DELTA_MAX: u64 = 1 << 31;

/// The `Cache-Control` directives that matter here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub stale_if_error: Option<u64>,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub no_cache: bool,
    pub no_store: bool,
}

fn delta_seconds(v: &str) -> Option<u64> {
    let v = v.trim().trim_matches('"');
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.parse::<u64>().unwrap_or(DELTA_MAX).min(DELTA_MAX))
}

impl CacheControl {
    /// Parses `Cache-Control` field values (each may hold several
    /// comma-separated directives). Names are case-insensitive; for a
    /// repeated directive the first valid value counts.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> CacheControl {
        let mut cc = CacheControl::default();
        for value in values {
            let text = String::from_utf8_lossy(value);
            for directive in text.split(',') {
                let (name, arg) = match directive.split_once('=') {
                    Some((n, a)) => (n.trim(), Some(a)),
                    None => (directive.trim(), None),
                };
                let seconds = || arg.and_then(delta_seconds);
                let name = name.to_ascii_lowercase();
                match name.as_str() {
                    "max-age" => cc.max_age = cc.max_age.or_else(seconds),
                    "s-maxage" => cc.s_maxage = cc.s_maxage.or_else(seconds),
                    "stale-if-error" => cc.stale_if_error = cc.stale_if_error.or_else(seconds),
                    "must-revalidate" => cc.must_revalidate = true,
                    "proxy-revalidate" => cc.proxy_revalidate = true,
                    // A qualified no-cache="field" is treated as the plain one.
                    "no-cache" => cc.no_cache = true,
                    "no-store" => cc.no_store = true,
                    _ => {}
                }
            }
        }
        cc
    }

    /// The directive that forbids serving the response stale, if any.
    pub fn forbids_stale(&self) -> Option<&'static str> {
        if self.must_revalidate {
            Some("must-revalidate")
        } else if self.proxy_revalidate {
            Some("proxy-revalidate")
        } else if self.s_maxage.is_some() {
            Some("s-maxage")
        } else if self.no_cache {
            Some("no-cache")
        } else if self.no_store {
            Some("no-store")
        } else {
            None
        }
    }
}

/// What the plugin knows about a cached response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cached {
    /// `Date`, Unix seconds.
    pub date: Option<i64>,
    /// `Age`, seconds.
    pub age: Option<u64>,
    /// `Expires`, Unix seconds.
    pub expires: Option<i64>,
    pub cc: CacheControl,
}

impl Cached {
    /// Builds from raw header values (as the cache holds them).
    pub fn from_headers<'a>(
        date: Option<&[u8]>,
        age: Option<&[u8]>,
        expires: Option<&[u8]>,
        cache_control: impl IntoIterator<Item = &'a [u8]>,
    ) -> Cached {
        Cached {
            date: date.and_then(httpdate::parse),
            age: age
                .and_then(|a| std::str::from_utf8(a).ok())
                .and_then(delta_seconds),
            expires: expires.and_then(httpdate::parse),
            cc: CacheControl::parse(cache_control),
        }
    }

    /// Current age in seconds at `now`; `None` without a usable `Date`.
    pub fn age_at(&self, now: i64) -> Option<u64> {
        let date = self.date?;
        let apparent = u64::try_from(now.saturating_sub(date)).unwrap_or(0);
        Some(apparent.max(self.age.unwrap_or(0)))
    }

    /// Freshness lifetime in seconds (0 without explicit freshness information).
    pub fn lifetime(&self) -> u64 {
        if let Some(s) = self.cc.s_maxage.or(self.cc.max_age) {
            return s;
        }
        match (self.expires, self.date) {
            (Some(e), Some(d)) => u64::try_from(e.saturating_sub(d)).unwrap_or(0),
            _ => 0,
        }
    }
}

/// The verdict on a cached response when the rule is over `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it: stale for `stale_for` seconds (0 when it only just expired),
    /// within `allowance`.
    Serve { stale_for: u64, allowance: u64 },
    /// Stale for longer than the allowance (which may be 0).
    TooOld { stale_for: u64, allowance: u64 },
    /// The response's directives forbid serving it stale.
    Forbidden(&'static str),
    /// No usable `Date`: its age is unknown.
    Undated,
}

impl Verdict {
    pub fn serve(self) -> bool {
        matches!(self, Verdict::Serve { .. })
    }
}

/// How a cached response stands at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    Stale { stale_for: u64 },
    Undated,
}

/// Freshness by the module's reckoning (ATS's own can differ by about a
/// second, since it knows when it stored the response).
pub fn freshness(cached: &Cached, now: i64) -> Freshness {
    match cached.age_at(now) {
        None => Freshness::Undated,
        Some(age) if age <= cached.lifetime() => Freshness::Fresh,
        Some(age) => Freshness::Stale {
            stale_for: age - cached.lifetime(),
        },
    }
}

/// Decides whether a response ATS found stale may be served, given the rule's
/// `stale` seconds. A response this module still deems fresh counts as stale
/// for 0 seconds: ATS has the last word on freshness.
pub fn decide(cached: &Cached, now: i64, stale_param: u64) -> Verdict {
    if let Some(why) = cached.cc.forbids_stale() {
        return Verdict::Forbidden(why);
    }
    let allowance = stale_param.max(cached.cc.stale_if_error.unwrap_or(0));
    let stale_for = match freshness(cached, now) {
        Freshness::Undated => return Verdict::Undated,
        Freshness::Fresh => 0,
        Freshness::Stale { stale_for } => stale_for,
    };
    if allowance > 0 && stale_for <= allowance {
        Verdict::Serve {
            stale_for,
            allowance,
        }
    } else {
        Verdict::TooOld {
            stale_for,
            allowance,
        }
    }
}

#[cfg(test)]
mod tests;
