//! `--count-status=LIST`: the response statuses that charge the rate
//! bucket (check-then-charge, see the README's "Brute-force protection").
//!
//! A list is a set of statuses 100–599 in a 640-bit set: matching a
//! response is one shift and mask, with no allocation on the hot path.

use crate::options::common::{invalid, OptionError};

/// What `--count-status` accepts, for its error message.
pub const ALLOWED: &str =
    "HTTP statuses 100 to 599 and classes 1xx to 5xx, comma-separated (e.g. 401,403 or 4xx)";

/// A set of HTTP statuses (100–599).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StatusList {
    bits: [u64; 10],
}

impl StatusList {
    /// `401,403`, `4xx`, `401,5xx`: statuses and classes, comma-separated.
    /// Errors name the option, the value and what is allowed.
    pub fn parse(value: &str) -> Result<StatusList, OptionError> {
        let bad = || invalid("count-status", value, ALLOWED);
        let mut list = StatusList { bits: [0; 10] };
        for item in value.split(',') {
            let b = item.as_bytes();
            if b.len() != 3 || !(b'1'..=b'5').contains(&b[0]) {
                return Err(bad());
            }
            let hundreds = u16::from(b[0] - b'0') * 100;
            if b[1..].eq_ignore_ascii_case(b"xx") {
                for s in hundreds..hundreds + 100 {
                    list.insert(s);
                }
            } else if b[1..].iter().all(u8::is_ascii_digit) {
                list.insert(hundreds + u16::from(b[1] - b'0') * 10 + u16::from(b[2] - b'0'));
            } else {
                return Err(bad());
            }
        }
        Ok(list)
    }

    fn insert(&mut self, status: u16) {
        let s = usize::from(status);
        self.bits[s / 64] |= 1 << (s % 64);
    }

    /// Whether `status` is in the list (anything outside 0–639 is not).
    #[inline]
    pub fn contains(&self, status: u16) -> bool {
        let s = usize::from(status);
        self.bits
            .get(s / 64)
            .is_some_and(|w| w & (1 << (s % 64)) != 0)
    }

    /// The list as ranges, e.g. `401,403,500-599`, for logs and `show`.
    pub fn describe(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut s = 100u16;
        while s < 600 {
            if !self.contains(s) {
                s += 1;
                continue;
            }
            let start = s;
            while s < 600 && self.contains(s) {
                s += 1;
            }
            match s - start {
                1 => out.push(start.to_string()),
                _ => out.push(format!("{start}-{}", s - 1)),
            }
        }
        out.join(",")
    }
}

impl std::fmt::Debug for StatusList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StatusList({})", self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err(v: &str) -> String {
        StatusList::parse(v).expect_err("must be rejected").0
    }

    #[test]
    fn statuses_and_classes() {
        let l = StatusList::parse("401,403").unwrap();
        assert!(l.contains(401) && l.contains(403));
        assert!(!l.contains(400) && !l.contains(402) && !l.contains(200));
        assert_eq!(l.describe(), "401,403");
        let l = StatusList::parse("4xx").unwrap();
        assert!(l.contains(400) && l.contains(499) && !l.contains(399) && !l.contains(500));
        assert_eq!(l.describe(), "400-499");
        let l = StatusList::parse("401,5XX,100,599").unwrap();
        assert_eq!(l.describe(), "100,401,500-599");
        assert!(!l.contains(0) && !l.contains(600) && !l.contains(u16::MAX));
    }

    #[test]
    fn errors_name_option_value_and_allowed() {
        assert_eq!(
            err("600"),
            format!("--count-status has an invalid value '600': allowed {ALLOWED}")
        );
        for bad in [
            "", "99", "099", "6xx", "0xx", "40x", "4x1", "401,", ",401", "401 ,403", "+401",
            "4011", "x01", "401;403", "1e2",
        ] {
            assert!(
                err(bad).starts_with(&format!("--count-status has an invalid value '{bad}'")),
                "{bad}"
            );
        }
    }

    proptest! {
        /// Every status parses alone and matches only itself; its class
        /// matches exactly its hundred.
        #[test]
        fn one_status_and_its_class(s in 100u16..600, other in 0u16..700) {
            let l = StatusList::parse(&s.to_string()).unwrap();
            prop_assert_eq!(l.contains(other), other == s);
            let c = StatusList::parse(&format!("{}xx", s / 100)).unwrap();
            prop_assert_eq!(c.contains(other), other / 100 == s / 100);
        }

        /// A list matches the union of its items, and describing it parses
        /// back (as ranges) to the same set.
        #[test]
        fn union_of_items(items in proptest::collection::vec(100u16..600, 1..20), probe in 0u16..700) {
            let text: Vec<String> = items.iter().map(u16::to_string).collect();
            let l = StatusList::parse(&text.join(",")).unwrap();
            prop_assert_eq!(l.contains(probe), items.contains(&probe));
        }

        /// Any input parses or is refused naming the option; never panics.
        #[test]
        fn never_panics(v in "[0-9xX, ;-]{0,20}") {
            if let Err(e) = StatusList::parse(&v) {
                prop_assert!(e.0.starts_with("--count-status has an invalid value"));
            }
        }
    }
}
