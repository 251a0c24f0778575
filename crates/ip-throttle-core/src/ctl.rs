//! Commands of `traffic_ctl plugin msg ip_throttle …`: parsing and
//! validation, without Traffic Server.
//!
//! - `reload allow|deny|config [RULE]`: reads a list (or the options and
//!   both lists) again and swaps it in whole; a bad file changes nothing;
//! - `unban IP [RULE]`: lifts the IP's ban now;
//! - `show IP [RULE]`: the IP's state; `key IP [RULE]` is the same command
//!   under rate_limit's per-key name;
//! - `keys [N] [RULE]`: the N hottest IPs (`throttler::Held`'s order).
//!
//! IP may be `unknown`: the clients behind trusted proxies that do not name
//! them, which share one state.
//!
//! Without RULE a command applies to every rule. Sent quoted as one word
//! (traffic_ctl 9.2 forwards only the first word):
//! `traffic_ctl plugin msg ip_throttle "unban 192.0.2.7"`; the verb may
//! also be in the target (`ip_throttle.show`).

use std::net::IpAddr;

use limits::ctl::{unknown, words, wrong_arguments};
use limits::quote::quote;

use crate::{Client, ListName};

/// The plugin's name: a message's target is it, or it and `.VERB`.
pub const PLUGIN: &str = "ip_throttle";

const USAGE: &str = "reload allow|deny|config [RULE], unban IP|unknown [RULE], \
     show IP|unknown [RULE], key IP|unknown [RULE], keys [N] [RULE]";

/// `keys`' N: by default, and at most (as rate_limit's `keys`).
pub const KEYS_DEFAULT: usize = 20;
pub const KEYS_MAX: usize = 1000;

/// What `reload` reads again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    List(ListName),
    /// The options (and `--config` file) and both lists.
    Config,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Reload {
        what: Reload,
        rule: Option<String>,
    },
    Unban {
        ip: Client,
        rule: Option<String>,
    },
    /// `show`, and `key` (its alias: same answer).
    Show {
        ip: Client,
        rule: Option<String>,
    },
    Keys {
        n: usize,
        rule: Option<String>,
    },
}

impl Command {
    pub fn verb(&self) -> &'static str {
        match self {
            Command::Reload { .. } => "reload",
            Command::Unban { .. } => "unban",
            Command::Show { .. } => "show",
            Command::Keys { .. } => "keys",
        }
    }

    /// The rule named, if any (`None`: every rule).
    pub fn rule(&self) -> Option<&str> {
        match self {
            Command::Reload { rule, .. }
            | Command::Unban { rule, .. }
            | Command::Show { rule, .. }
            | Command::Keys { rule, .. } => rule.as_deref(),
        }
    }
}

/// The command in a message, `None` if the target is not ours.
pub fn parse(target: &str, data: &[u8]) -> Option<Result<Command, String>> {
    Some(words(PLUGIN, target, data)?.and_then(|w| {
        let rule = |r: Option<&&str>| r.map(|r| (*r).to_owned());
        match (w.verb, w.args.as_slice()) {
            ("reload", [what, r @ ..]) if r.len() <= 1 => Ok(Command::Reload {
                what: match *what {
                    "allow" => Reload::List(ListName::Allow),
                    "deny" => Reload::List(ListName::Deny),
                    "config" => Reload::Config,
                    other => {
                        return Err(format!(
                            "reload: {} is not allow, deny or config",
                            quote(other)
                        ))
                    }
                },
                rule: rule(r.first()),
            }),
            ("unban", [ip, r @ ..]) if r.len() <= 1 => Ok(Command::Unban {
                ip: address("unban", ip)?,
                rule: rule(r.first()),
            }),
            ("show" | "key", [ip, r @ ..]) if r.len() <= 1 => Ok(Command::Show {
                ip: address(w.verb, ip)?,
                rule: rule(r.first()),
            }),
            ("keys", []) => Ok(Command::Keys {
                n: KEYS_DEFAULT,
                rule: None,
            }),
            // A lone number is N; anything else names a rule (an
            // --instance that is a number needs N before it).
            ("keys", [one]) if !is_number(one) => Ok(Command::Keys {
                n: KEYS_DEFAULT,
                rule: rule(Some(one)),
            }),
            ("keys", [n, r @ ..]) if r.len() <= 1 => Ok(Command::Keys {
                n: count(n)?,
                rule: rule(r.first()),
            }),
            ("reload" | "unban" | "show" | "key" | "keys", args) => {
                Err(wrong_arguments(w.verb, args, USAGE))
            }
            (verb, _) => Err(unknown(verb, USAGE)),
        }
    }))
}

/// Digits, perhaps signed: meant as N (`keys -1` is a bad N, not a rule).
fn is_number(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// `keys`' N.
fn count(n: &str) -> Result<usize, String> {
    n.parse::<usize>()
        .ok()
        .filter(|n| (1..=KEYS_MAX).contains(n))
        .ok_or_else(|| {
            format!(
                "keys: N has an invalid value {}: allowed 1 to {KEYS_MAX}",
                quote(n)
            )
        })
}

fn address(verb: &str, s: &str) -> Result<Client, String> {
    if s == "unknown" {
        return Ok(Client::Unknown);
    }
    s.parse::<IpAddr>().map(Client::Addr).map_err(|_| {
        format!(
            "{verb}: {} is not an IP address (e.g. 192.0.2.7 or 2001:db8::1) nor unknown",
            quote(s)
        )
    })
}

#[cfg(test)]
mod tests;
