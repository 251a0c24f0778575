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
/// Default and largest `top` count (`keys`: its own default).
pub const TOP_DEFAULT: usize = 10;
pub const KEYS_DEFAULT: usize = 20;
pub const TOP_MAX: usize = 1000;
/// Longest block by command: as `--block`.
pub const MAX_BLOCK_SECONDS: u64 = crate::options::MAX_BLOCK_SECONDS;
/// The KEY naming a rule-wide limiter's own state (a rule without `--key`).
pub const WHOLE_RULE: &str = "*";

/// The commands, for a message about a wrong one.
fn usage() -> String {
    format!(
        "show [GROUP|TAG|SNI], top GROUP|TAG [N], keys GROUP|TAG [N], key GROUP|TAG KEY, \
         block GROUP|TAG KEY SECONDS, unblock GROUP|TAG KEY, forget GROUP|TAG KEY, {}, reload",
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
    /// `top` by another name, 20 keys unless N says otherwise.
    Keys { target: String, n: usize },
    /// One key's state (`*`: the rule's, without `--key`).
    Key { target: String, key: String },
    /// Refuses KEY for SECONDS, whatever its rate.
    Block {
        target: String,
        key: String,
        seconds: u32,
    },
    /// Lifts KEY's block.
    Unblock { target: String, key: String },
    /// Forgets what KEY owes: a full bucket, no block, no lock-out.
    Forget { target: String, key: String },
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
            Command::Keys { .. } => "keys",
            Command::Key { .. } => "key",
            Command::Block { .. } => "block",
            Command::Unblock { .. } => "unblock",
            Command::Forget { .. } => "forget",
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
        ("top", [t, n]) => Ok(Command::Top {
            target: (*t).to_owned(),
            n: count(verb, n)?,
        }),
        ("keys", [t]) => Ok(Command::Keys {
            target: (*t).to_owned(),
            n: KEYS_DEFAULT,
        }),
        ("keys", [t, n]) => Ok(Command::Keys {
            target: (*t).to_owned(),
            n: count(verb, n)?,
        }),
        ("key", [t, k]) => Ok(Command::Key {
            target: (*t).to_owned(),
            key: (*k).to_owned(),
        }),
        ("block", [t, k, s]) => {
            let seconds = s
                .parse::<u64>()
                .ok()
                .filter(|s| (1..=MAX_BLOCK_SECONDS).contains(s))
                .ok_or_else(|| {
                    format!(
                        "block: SECONDS has an invalid value {}: allowed 1 to {MAX_BLOCK_SECONDS}",
                        quote(s)
                    )
                })?;
            Ok(Command::Block {
                target: (*t).to_owned(),
                key: (*k).to_owned(),
                seconds: seconds as u32,
            })
        }
        ("unblock", [t, k]) => Ok(Command::Unblock {
            target: (*t).to_owned(),
            key: (*k).to_owned(),
        }),
        ("forget", [t, k]) => Ok(Command::Forget {
            target: (*t).to_owned(),
            key: (*k).to_owned(),
        }),
        ("set", [t, settings @ ..]) if !settings.is_empty() => Ok(Command::Set {
            target: (*t).to_owned(),
            settings: settings
                .iter()
                .map(|s| Setting::parse(s))
                .collect::<Result<_, _>>()?,
        }),
        ("reload", []) => Ok(Command::Reload),
        (
            "show" | "top" | "keys" | "key" | "block" | "unblock" | "forget" | "set" | "reload",
            _,
        ) => Err(limits::ctl::wrong_arguments(verb, args, &usage())),
        _ => Err(limits::ctl::unknown(verb, &usage())),
    }
}

/// `top`'s and `keys`' N.
fn count(verb: &str, n: &str) -> Result<usize, String> {
    n.parse::<usize>()
        .ok()
        .filter(|n| (1..=TOP_MAX).contains(n))
        .ok_or_else(|| {
            format!(
                "{verb}: N has an invalid value {}: allowed 1 to {TOP_MAX}",
                quote(n)
            )
        })
}

#[cfg(test)]
mod tests;
