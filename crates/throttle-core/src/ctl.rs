//! Commands of `traffic_ctl plugin msg throttle …`: parsing and validation,
//! without Traffic Server.
//!
//! - `show [ID]`: every rule, or those with this id (or from-URL);
//! - `set ID max=N stale=S`: changes a live rule's `max` and `stale`
//!   allowance (one or both), with the ranges of their `@pparam`s; on a
//!   `max:auto` rule, `max=N` pins the learned max and `max=auto` lets it
//!   learn again.
//!
//! Sent quoted as one word (traffic_ctl 9.2 forwards only the first word):
//! `traffic_ctl plugin msg throttle "set cdn max=500"`; the verb may also be
//! in the target (`throttle.show`).

use limits::ctl::{unknown, words, wrong_arguments};
use limits::quote::quote;

/// The plugin's name: a message's target is it, or it and `.VERB`.
pub const PLUGIN: &str = "throttle";

const USAGE: &str = "show [ID], set ID max=N|auto stale=S";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Every rule, or those `id` names.
    Show { id: Option<String> },
    /// Changes live rules.
    Set { id: String, settings: Vec<Setting> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// Most uncached requests in flight at once (`@pparam=max`); on a
    /// `max:auto` rule, pins the learned max.
    Max(u32),
    /// `max=auto`: a pinned learned max learns again (`max:auto` rules only).
    MaxAuto,
    /// Seconds a response may be served stale when full (`@pparam=stale`).
    Stale(u32),
}

impl Setting {
    /// The `@pparam` it changes.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Max(_) | Setting::MaxAuto => "max",
            Setting::Stale(_) => "stale",
        }
    }

    /// The number set; `None` for `max=auto`.
    pub fn value(self) -> Option<u32> {
        match self {
            Setting::Max(v) | Setting::Stale(v) => Some(v),
            Setting::MaxAuto => None,
        }
    }
}

impl Command {
    pub fn verb(&self) -> &'static str {
        match self {
            Command::Show { .. } => "show",
            Command::Set { .. } => "set",
        }
    }
}

/// The command in a message, `None` if the target is not ours.
pub fn parse(target: &str, data: &[u8]) -> Option<Result<Command, String>> {
    Some(words(PLUGIN, target, data)?.and_then(|w| {
        match (w.verb, w.args.as_slice()) {
            ("show", []) => Ok(Command::Show { id: None }),
            ("show", [id]) => Ok(Command::Show {
                id: Some((*id).to_owned()),
            }),
            ("set", [id, settings @ ..]) if !settings.is_empty() => Ok(Command::Set {
                id: (*id).to_owned(),
                settings: settings
                    .iter()
                    .map(|s| setting(s))
                    .collect::<Result<_, _>>()?,
            }),
            ("show" | "set", args) => Err(wrong_arguments(w.verb, args, USAGE)),
            (verb, _) => Err(unknown(verb, USAGE)),
        }
    }))
}

/// `max=N` or `stale=S`: whole numbers from 0 to 4294967295, as their
/// `@pparam`s (`max=0` refuses every uncached request, as `@pparam=max:0`;
/// a pinned learned max is at least 1); or `max=auto`.
fn setting(s: &str) -> Result<Setting, String> {
    let bad = |allowed: &str| format!("set: {} is invalid: allowed {allowed}", quote(s));
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| bad("NAME=VALUE with NAME max or stale"))?;
    let number = |what: &str| {
        value
            .parse::<u32>()
            .ok()
            .filter(|_| !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| bad(&format!("{name}= {what} from 0 to {}", u32::MAX)))
    };
    match name {
        "max" if value == "auto" => Ok(Setting::MaxAuto),
        "max" => number("auto or a whole number").map(Setting::Max),
        "stale" => number("a whole number of seconds").map(Setting::Stale),
        _ => Err(bad("max= or stale=")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(target: &str, data: &str) -> Result<Command, String> {
        parse(target, data.as_bytes()).expect("our target")
    }

    #[test]
    fn both_forms_parse() {
        assert_eq!(cmd("throttle", "show"), Ok(Command::Show { id: None }));
        assert_eq!(
            cmd("throttle.show", "cdn"),
            Ok(Command::Show {
                id: Some("cdn".into())
            })
        );
        assert_eq!(
            cmd("throttle", " set cdn max=0 stale=4294967295 "),
            Ok(Command::Set {
                id: "cdn".into(),
                settings: vec![Setting::Max(0), Setting::Stale(u32::MAX)]
            })
        );
        assert_eq!(
            cmd("throttle.set", "cdn stale=60"),
            Ok(Command::Set {
                id: "cdn".into(),
                settings: vec![Setting::Stale(60)]
            })
        );
        assert_eq!(
            cmd("throttle", "set cdn max=auto"),
            Ok(Command::Set {
                id: "cdn".into(),
                settings: vec![Setting::MaxAuto]
            })
        );
        assert_eq!(Setting::MaxAuto.value(), None);
        assert_eq!(Setting::MaxAuto.name(), "max");
        assert!(parse("ip_throttle", b"show").is_none());
        assert!(parse("throttles", b"show").is_none());
    }

    #[test]
    fn bad_commands_say_what_was_wrong() {
        let e = |d: &str| cmd("throttle", d).expect_err(d);
        assert!(e("shw").starts_with("unknown command 'shw': allowed show [ID], set ID"));
        assert!(e("").starts_with("unknown command ''"));
        assert!(e("set cdn").starts_with("set: wrong arguments 'cdn'"));
        assert!(e("show a b").starts_with("show: wrong arguments 'a b'"));
        for (d, want) in [
            (
                "set cdn max=-1",
                "'max=-1' is invalid: allowed max= auto or a whole number from 0 to 4294967295",
            ),
            ("set cdn max=4294967296", "'max=4294967296' is invalid"),
            ("set cdn max=+5", "'max=+5' is invalid"),
            ("set cdn max=", "'max=' is invalid"),
            ("set cdn max=Auto", "'max=Auto' is invalid"),
            (
                "set cdn stale=1.5",
                "allowed stale= a whole number of seconds from 0",
            ),
            ("set cdn statfreq=5", "allowed max= or stale="),
            ("set cdn max", "NAME=VALUE"),
        ] {
            assert!(e(d).contains(want), "{d}: {}", e(d));
        }
        assert!(cmd("throttle", &"x".repeat(limits::ctl::MAX_COMMAND + 1))
            .unwrap_err()
            .contains("too long"));
    }
}
