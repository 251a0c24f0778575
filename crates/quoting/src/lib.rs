//! Values shown in error messages.
//!
//! Configuration values come from operators and files: one may be 10 KB of
//! digits or hold a NUL. Shown raw, a long value pushes what follows it past
//! the ~1 KB that ATS keeps of a diagnostic, and a NUL ends the C string that
//! carries it. Every message that shows a value goes through [`quote`] (or
//! [`shorten`] for text that is not a single value, such as a location), so
//! it stays short and printable whatever the input.

#![forbid(unsafe_code)]

use std::fmt::Write;

/// Most characters of a value shown, escapes included.
pub const MAX_SHOWN_CHARS: usize = 64;

/// `value` in single quotes for an error message: control characters escaped
/// (`\0`, `\n`, `\u{1b}`), and a value longer than [`MAX_SHOWN_CHARS`] cut at
/// a character boundary with its full length: `'99999…' (10240 bytes)`.
pub fn quote(value: &str) -> String {
    let (shown, cut) = clip(value, MAX_SHOWN_CHARS);
    match cut {
        false => format!("'{shown}'"),
        true => format!("'{shown}…' ({} bytes)", value.len()),
    }
}

/// Like [`quote`] without the quotes: `max:99999… (10244 bytes)`.
pub fn shorten(text: &str) -> String {
    shorten_to(text, MAX_SHOWN_CHARS)
}

/// [`shorten`] with another bound, for text that is useful only whole up
/// to a larger size (a file path).
pub fn shorten_to(text: &str, max_chars: usize) -> String {
    let (shown, cut) = clip(text, max_chars);
    match cut {
        false => shown,
        true => format!("{shown}… ({} bytes)", text.len()),
    }
}

/// The text with control characters escaped, up to `max` characters, and
/// whether it was cut.
fn clip(value: &str, max: usize) -> (String, bool) {
    let mut out = String::new();
    let mut width = 0;
    let mut piece = String::new();
    for c in value.chars() {
        piece.clear();
        if c.is_control() {
            // Writing to a String cannot fail.
            let _ = write!(piece, "{}", c.escape_debug());
        } else {
            piece.push(c);
        }
        let w = piece.chars().count();
        if width + w > max {
            return (out, true);
        }
        width += w;
        out.push_str(&piece);
    }
    (out, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_quoted_as_they_are() {
        assert_eq!(quote("abc"), "'abc'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b\\c'"), "'a b\\c''");
        assert_eq!(shorten("max:abc"), "max:abc");
        let exact = "x".repeat(MAX_SHOWN_CHARS);
        assert_eq!(quote(&exact), format!("'{exact}'"));
    }

    #[test]
    fn long_values_are_cut_with_their_length() {
        let q = quote(&"9".repeat(10240));
        assert_eq!(
            q,
            format!("'{}…' (10240 bytes)", "9".repeat(MAX_SHOWN_CHARS))
        );
        assert_eq!(
            shorten(&format!("max:{}", "9".repeat(10240))),
            format!("max:{}… (10244 bytes)", "9".repeat(MAX_SHOWN_CHARS - 4))
        );
    }

    #[test]
    fn cuts_at_a_character_boundary() {
        let q = quote(&"é".repeat(100));
        assert_eq!(q, format!("'{}…' (200 bytes)", "é".repeat(MAX_SHOWN_CHARS)));
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(quote("1\0"), "'1\\0'");
        assert_eq!(
            quote("a\nb\tc\r\u{1b}\u{7f}"),
            "'a\\nb\\tc\\r\\u{1b}\\u{7f}'"
        );
        assert_eq!(shorten("x\0y"), "x\\0y");
        assert_eq!(shorten_to("/etc/a\0b", 8), "/etc/a\\0… (8 bytes)");
        assert_eq!(shorten_to("/etc/a\0b", 9), "/etc/a\\0b");
        // An escape is never split by the cut.
        let v = format!("{}\u{1b}", "x".repeat(MAX_SHOWN_CHARS - 2));
        assert_eq!(
            quote(&v),
            format!("'{}…' ({} bytes)", "x".repeat(MAX_SHOWN_CHARS - 2), v.len())
        );
    }

    proptest::proptest! {
        #[test]
        fn always_short_and_printable(v in proptest::collection::vec(proptest::char::any(), 0..300)) {
            let v: String = v.into_iter().collect();
            let q = quote(&v);
            proptest::prop_assert!(!q.chars().any(char::is_control), "{:?}", q);
            proptest::prop_assert!(q.chars().count() <= MAX_SHOWN_CHARS + 30, "{:?}", q);
            if !v.chars().any(char::is_control) && v.chars().count() <= MAX_SHOWN_CHARS {
                proptest::prop_assert_eq!(q, format!("'{v}'"));
            }
        }
    }
}
