//! The words of a `traffic_ctl plugin msg TARGET DATA` command, shared by the
//! plugins' command parsers.
//!
//! traffic_ctl 9.2 forwards only the first word of its DATA argument, so a
//! command with arguments is sent quoted, as one word:
//! `traffic_ctl plugin msg throttle "set api max=20"`. The verb may also be
//! in the target (`throttle.show`), as upstream's abuse_shield does.

use crate::quote::quote;

/// Longest command accepted.
pub const MAX_COMMAND: usize = 4096;

/// A command split into its verb and arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Words<'a> {
    pub verb: &'a str,
    pub args: Vec<&'a str>,
}

/// The words of a message for `plugin`; `None` if the target is not
/// `plugin` or `plugin.VERB`. Data is bytes (hostile): bounded, UTF-8.
pub fn words<'a>(
    plugin: &str,
    target: &'a str,
    data: &'a [u8],
) -> Option<Result<Words<'a>, String>> {
    let verb_in_target = match target.strip_prefix(plugin)? {
        "" => None,
        rest => Some(rest.strip_prefix('.')?),
    };
    Some(split(verb_in_target, data))
}

fn split<'a>(verb_in_target: Option<&'a str>, data: &'a [u8]) -> Result<Words<'a>, String> {
    if data.len() > MAX_COMMAND {
        return Err(format!(
            "command of {} bytes is too long: at most {MAX_COMMAND}",
            data.len()
        ));
    }
    let text = std::str::from_utf8(data).map_err(|_| "command is not UTF-8 text".to_owned())?;
    let mut words = text.split_whitespace();
    let verb = match verb_in_target {
        Some(v) => v,
        None => words.next().unwrap_or(""),
    };
    Ok(Words {
        verb,
        args: words.collect(),
    })
}

/// `unknown command 'X': allowed USAGE`.
pub fn unknown(verb: &str, usage: &str) -> String {
    format!("unknown command {}: allowed {usage}", quote(verb))
}

/// `VERB: wrong arguments 'A B': usage USAGE`.
pub fn wrong_arguments(verb: &str, args: &[&str], usage: &str) -> String {
    format!(
        "{verb}: wrong arguments {}: usage {usage}",
        quote(&args.join(" "))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verb_in_data_or_target() {
        let w = words("throttle", "throttle", b" set  a max=3 \0").unwrap();
        assert_eq!(
            w,
            Ok(Words {
                verb: "set",
                args: vec!["a", "max=3", "\0"]
            })
        );
        let w = words("throttle", "throttle.show", b"a").unwrap().unwrap();
        assert_eq!((w.verb, w.args), ("show", vec!["a"]));
        assert_eq!(
            words("throttle", "throttle", b"").unwrap().unwrap().verb,
            ""
        );
    }

    #[test]
    fn other_targets_are_not_ours() {
        for target in ["ip_throttle", "throttled", "throttle_x", "rate_limit", ""] {
            assert!(words("throttle", target, b"show").is_none(), "{target}");
        }
    }

    #[test]
    fn hostile_data_is_refused() {
        let long = vec![b'a'; MAX_COMMAND + 1];
        assert!(words("t", "t", &long)
            .unwrap()
            .unwrap_err()
            .contains("too long"));
        assert_eq!(
            words("t", "t", &[0xff]).unwrap(),
            Err("command is not UTF-8 text".into())
        );
        assert_eq!(
            unknown("shw", "show"),
            "unknown command 'shw': allowed show"
        );
        assert_eq!(
            wrong_arguments("set", &["a"], "set ID"),
            "set: wrong arguments 'a': usage set ID"
        );
    }
}
