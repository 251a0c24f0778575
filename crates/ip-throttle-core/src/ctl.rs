//! Commands of `traffic_ctl plugin msg ip_throttle …`: parsing and
//! validation, without Traffic Server.
//!
//! - `reload allow|deny|config [RULE]`: reads a list (or the options and
//!   both lists) again and swaps it in whole; a bad file changes nothing;
//! - `unban IP [RULE]`: lifts the IP's ban now;
//! - `show IP [RULE]`: the IP's state.
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

const USAGE: &str =
    "reload allow|deny|config [RULE], unban IP|unknown [RULE], show IP|unknown [RULE]";

/// What `reload` reads again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    List(ListName),
    /// The options (and `--config` file) and both lists.
    Config,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Reload { what: Reload, rule: Option<String> },
    Unban { ip: Client, rule: Option<String> },
    Show { ip: Client, rule: Option<String> },
}

impl Command {
    pub fn verb(&self) -> &'static str {
        match self {
            Command::Reload { .. } => "reload",
            Command::Unban { .. } => "unban",
            Command::Show { .. } => "show",
        }
    }

    /// The rule named, if any (`None`: every rule).
    pub fn rule(&self) -> Option<&str> {
        match self {
            Command::Reload { rule, .. }
            | Command::Unban { rule, .. }
            | Command::Show { rule, .. } => rule.as_deref(),
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
            ("show", [ip, r @ ..]) if r.len() <= 1 => Ok(Command::Show {
                ip: address("show", ip)?,
                rule: rule(r.first()),
            }),
            ("reload" | "unban" | "show", args) => Err(wrong_arguments(w.verb, args, USAGE)),
            (verb, _) => Err(unknown(verb, USAGE)),
        }
    }))
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
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn cmd(target: &str, data: &str) -> Result<Command, String> {
        parse(target, data.as_bytes()).expect("our target")
    }

    #[test]
    fn every_command_parses() {
        assert_eq!(
            cmd("ip_throttle", "reload deny"),
            Ok(Command::Reload {
                what: Reload::List(ListName::Deny),
                rule: None
            })
        );
        assert_eq!(
            cmd("ip_throttle.reload", "config http.t.test"),
            Ok(Command::Reload {
                what: Reload::Config,
                rule: Some("http.t.test".into())
            })
        );
        let ip2 = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(
            cmd("ip_throttle", "unban 127.0.0.2"),
            Ok(Command::Unban {
                ip: Client::Addr(ip2),
                rule: None
            })
        );
        assert_eq!(
            cmd("ip_throttle.show", "unknown r"),
            Ok(Command::Show {
                ip: Client::Unknown,
                rule: Some("r".into())
            })
        );
        let shown = cmd("ip_throttle", " show  2001:db8::1  r ").unwrap();
        assert_eq!(shown.verb(), "show");
        assert_eq!(shown.rule(), Some("r"));
        assert!(parse("throttle", b"show 1.2.3.4").is_none());
        assert!(parse("ip_throttler", b"show 1.2.3.4").is_none());
    }

    #[test]
    fn bad_commands_say_what_was_wrong() {
        let e = |d: &str| cmd("ip_throttle", d).expect_err(d);
        for (d, want) in [
            (
                "ban 1.2.3.4",
                "unknown command 'ban': allowed reload allow|deny|config",
            ),
            ("", "unknown command ''"),
            ("reload", "reload: wrong arguments ''"),
            (
                "reload lists",
                "reload: 'lists' is not allow, deny or config",
            ),
            ("reload allow a b", "reload: wrong arguments 'allow a b'"),
            ("unban", "unban: wrong arguments"),
            (
                "unban 10.0.0.0/8",
                "unban: '10.0.0.0/8' is not an IP address",
            ),
            (
                "show host.example",
                "show: 'host.example' is not an IP address",
            ),
            ("show 1.2.3.4 r extra", "show: wrong arguments"),
        ] {
            assert!(e(d).starts_with(want), "{d}: {}", e(d));
        }
    }
}
