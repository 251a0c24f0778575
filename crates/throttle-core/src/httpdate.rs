//! HTTP dates (RFC 9110 §5.6.7) as Unix seconds, over the `httpdate` crate,
//! which accepts IMF-fixdate and the obsolete RFC 850 and asctime forms.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses an HTTP date into Unix seconds (dates before 1970 are refused).
pub fn parse(text: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(text).ok()?.trim();
    let t = httpdate::parse_http_date(s).ok()?;
    i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()
}

/// Formats Unix seconds as an IMF-fixdate (clamped to the years 1970–9999).
pub fn format(t: i64) -> String {
    let secs = u64::try_from(t).unwrap_or(0).min(253_402_300_799);
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

/// The current time as Unix seconds.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_three_forms() {
        let t = 784_111_777;
        assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(t));
        assert_eq!(parse(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(t));
        assert_eq!(parse(b"Sun Nov  6 08:49:37 1994"), Some(t));
        assert_eq!(format(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse(b" Thu, 01 Jan 1970 00:00:00 GMT "), Some(0));
        assert_eq!(parse(b"Tue, 29 Feb 2000 00:00:00 GMT"), Some(951_782_400));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            &b""[..],
            b"yesterday",
            b"Sun, 06 Nov 1994 08:49:37 PST",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"\xff\xfe",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    proptest! {
        #[test]
        fn round_trips(t in 0i64..=253_402_300_799) {
            prop_assert_eq!(parse(format(t).as_bytes()), Some(t));
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = parse(s.as_bytes());
        }
    }
}
