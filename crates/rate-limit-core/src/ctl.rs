//! Commands of `traffic_ctl plugin msg rate_limit …`: parsing and
//! validation, without Traffic Server.
//!
//! traffic_ctl 9.2 forwards only the first word of its DATA argument, so a
//! command with arguments is sent quoted, as one word:
//! `traffic_ctl plugin msg rate_limit "set api limit=20"`. The verb may also
//! be in the target (`rate_limit.show`), as upstream's abuse_shield does.

use limits::quote::quote;

pub mod answer;

/// The plugin's name: a message's target is it, or it and `.VERB`.
pub const PLUGIN: &str = "rate_limit";
/// Longest command accepted.
pub const MAX_COMMAND: usize = limits::ctl::MAX_COMMAND;
/// Default and largest `top` count.
pub const TOP_DEFAULT: usize = 10;
pub const TOP_MAX: usize = 1000;

/// The commands, for a message about a wrong one.
fn usage() -> String {
    format!(
        "show [GROUP|TAG|SNI], top GROUP|TAG [N], {}, reload",
        crate::options::live::usage()
    )
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Every limiter and global-mode selector, or those `target` names.
    Show { target: Option<String> },
    /// The keys of a keyed limiter holding the most slots or waiters, or
    /// furthest over their rate.
    Top { target: String, n: usize },
    /// Changes a live limiter.
    Set {
        target: String,
        settings: Vec<Setting>,
    },
    /// Rereads the global-mode file (plugin.config's `rate_limit.so FILE`).
    Reload,
}

pub use crate::options::live::{apply, Setting};

impl Command {
    pub fn verb(&self) -> &'static str {
        match self {
            Command::Show { .. } => "show",
            Command::Top { .. } => "top",
            Command::Set { .. } => "set",
            Command::Reload => "reload",
        }
    }
}

/// The command in a message, `None` if the target is not ours.
pub fn parse(target: &str, data: &[u8]) -> Option<Result<Command, String>> {
    Some(limits::ctl::words(PLUGIN, target, data)?.and_then(|w| parse_words(w.verb, &w.args)))
}

fn parse_words(verb: &str, args: &[&str]) -> Result<Command, String> {
    match (verb, args) {
        ("show", []) => Ok(Command::Show { target: None }),
        ("show", [t]) => Ok(Command::Show {
            target: Some((*t).to_owned()),
        }),
        ("top", [t]) => Ok(Command::Top {
            target: (*t).to_owned(),
            n: TOP_DEFAULT,
        }),
        ("top", [t, n]) => {
            let n = n
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=TOP_MAX).contains(n))
                .ok_or_else(|| {
                    format!(
                        "top: N has an invalid value {}: allowed 1 to {TOP_MAX}",
                        quote(n)
                    )
                })?;
            Ok(Command::Top {
                target: (*t).to_owned(),
                n,
            })
        }
        ("set", [t, settings @ ..]) if !settings.is_empty() => Ok(Command::Set {
            target: (*t).to_owned(),
            settings: settings
                .iter()
                .map(|s| Setting::parse(s))
                .collect::<Result<_, _>>()?,
        }),
        ("reload", []) => Ok(Command::Reload),
        ("show" | "top" | "set" | "reload", _) => {
            Err(limits::ctl::wrong_arguments(verb, args, &usage()))
        }
        _ => Err(limits::ctl::unknown(verb, &usage())),
    }
}

#[cfg(test)]
mod tests;
