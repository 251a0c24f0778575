//! Value helpers shared by the front ends. Each returns what it parsed or a
//! typed reason; the front end words the message (its option, the value
//! quoted, what it allows), so every plugin keeps its own wording.

use std::net::IpAddr;

use ipnet::IpNet;

/// Why a number was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumberError {
    Empty,
    /// Starts with `-`.
    Negative,
    /// Anything but ASCII digits (a sign, a space, a suffix, a second `.`).
    NotDigits,
    /// More than the type holds.
    TooLarge,
    /// A number, outside the range asked for.
    OutOfRange,
}

/// A whole number written strictly (ASCII digits only: no sign, space or
/// suffix) from `min` to `max`.
pub fn uint(v: &str, min: u64, max: u64) -> Result<u64, NumberError> {
    if v.is_empty() {
        return Err(NumberError::Empty);
    }
    if v.starts_with('-') {
        return Err(NumberError::Negative);
    }
    if !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NumberError::NotDigits);
    }
    let n: u64 = v.parse().map_err(|_| NumberError::TooLarge)?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(NumberError::OutOfRange)
    }
}

/// Nanoseconds in a second.
const NANOS: u64 = 1_000_000_000;

/// Seconds as written (`3`, `0.25`, `.5`, `1.5`): digits, an optional
/// fraction of at most 9 digits; exact in nanoseconds (no float rounding).
pub fn seconds(v: &str) -> Result<u64, NumberError> {
    if v.is_empty() {
        return Err(NumberError::Empty);
    }
    if v.starts_with('-') {
        return Err(NumberError::Negative);
    }
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty()
        || !digits(int)
        || !digits(frac)
        || frac.len() > 9
        || (v.contains('.') && frac.is_empty())
    {
        return Err(NumberError::NotDigits);
    }
    let whole: u64 = match int {
        "" => 0,
        _ => int.parse().map_err(|_| NumberError::TooLarge)?,
    };
    let mut f: u64 = match frac {
        "" => 0,
        _ => frac.parse().map_err(|_| NumberError::NotDigits)?,
    };
    for _ in frac.len()..9 {
        f *= 10;
    }
    whole
        .checked_mul(NANOS)
        .and_then(|n| n.checked_add(f))
        .ok_or(NumberError::TooLarge)
}

/// The parts of a comma-separated list, each trimmed (empty parts kept:
/// whether `a,,b` is allowed is the option's call).
pub fn list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim)
}

/// An IP network (`10.0.0.0/8`) or one address (`::1`, as a /32 or /128),
/// as written (neither truncated nor made canonical).
pub fn cidr(part: &str) -> Option<IpNet> {
    part.parse::<IpNet>()
        .ok()
        .or_else(|| part.parse::<IpAddr>().ok().map(IpNet::from))
}

/// `true`/`1`/`yes`/`on` or `false`/`0`/`no`/`off` (lowercase, as written).
pub fn bool_word(v: &str) -> Option<bool> {
    match v {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The value of the word `v` names in `words`.
pub fn word<T: Copy>(v: &str, words: &[(&str, T)]) -> Option<T> {
    words.iter().find(|(w, _)| *w == v).map(|(_, t)| *t)
}
