//! HTTP dates (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and
//! asctime forms recipients must accept. Times are Unix seconds.

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn month(s: &str) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(s))
        .map(|i| i as u32 + 1)
}

fn num(s: &str, digits: std::ops::RangeInclusive<usize>) -> Option<u32> {
    (digits.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn time_of_day(s: &str) -> Option<i64> {
    let mut it = s.split(':');
    let (h, m, sec) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() {
        return None;
    }
    let (h, m, sec) = (num(h, 2..=2)?, num(m, 2..=2)?, num(sec, 2..=2)?);
    // 60 allows a leap second.
    (h < 24 && m < 60 && sec <= 60).then(|| i64::from(h * 3600 + m * 60 + sec))
}

fn build(y: i64, m: u32, d: u32, tod: i64) -> Option<i64> {
    (d >= 1 && d <= days_in_month(y, m)).then(|| days_from_civil(y, m, d) * 86_400 + tod)
}

/// Parses an HTTP date into Unix seconds.
pub fn parse(text: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(text).ok()?.trim();
    let parts: Vec<&str> = s.split_ascii_whitespace().collect();
    match parts.as_slice() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        [_wd, d, mon, y, t, "GMT"] => build(
            i64::from(num(y, 4..=4)?),
            month(mon)?,
            num(d, 1..=2)?,
            time_of_day(t)?,
        ),
        // Sunday, 06-Nov-94 08:49:37 GMT
        [_wd, dmy, t, "GMT"] => {
            let mut it = dmy.split('-');
            let (d, mon, y) = (it.next()?, it.next()?, it.next()?);
            let y = i64::from(num(y, 2..=2)?);
            // RFC 9110: a two-digit year more than 50 years ahead is in the past century.
            let y = if y < 70 { 2000 + y } else { 1900 + y };
            build(y, month(mon)?, num(d, 1..=2)?, time_of_day(t)?)
        }
        // Sun Nov  6 08:49:37 1994
        [_wd, mon, d, t, y] => build(
            i64::from(num(y, 4..=4)?),
            month(mon)?,
            num(d, 1..=2)?,
            time_of_day(t)?,
        ),
        _ => None,
    }
}

/// Formats Unix seconds as an IMF-fixdate.
pub fn format(t: i64) -> String {
    let days = t.div_euclid(86_400);
    let rem = t.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
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
        assert_eq!(parse(b"Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse(b"Tue, 29 Feb 2000 00:00:00 GMT"), Some(951_782_400));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            &b""[..],
            b"yesterday",
            b"Sun, 06 Nov 1994 08:49:37 PST",
            b"Sun, 31 Feb 1994 08:49:37 GMT",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 06 Nov 94 08:49:37 GMT",
            b"\xff\xfe",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    proptest! {
        #[test]
        fn round_trips(t in -2_000_000_000i64..=253_402_300_799) {
            prop_assert_eq!(parse(format(t).as_bytes()), Some(t));
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = parse(s.as_bytes());
        }
    }
}
