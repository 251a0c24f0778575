//! The events ip_throttle.so can log (`--log-events`), by Perlbal's names.

/// Events written to `ip_throttle.log` (`--log-events`), Perlbal's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A ban is added.
    Ban,
    /// A ban ends (expired or lifted).
    Unban,
    /// Let through because the client is on the allow list.
    Whitelisted,
    /// Denied or throttled because the client is on the deny list.
    Blacklisted,
    /// Denied (403) because the client is banned.
    Banned,
    /// Refused (503) because `max_concurrent` of its requests are delayed.
    Concurrent,
    /// Delayed.
    Throttled,
}

impl EventKind {
    pub const ALL: [EventKind; 7] = [
        EventKind::Ban,
        EventKind::Unban,
        EventKind::Whitelisted,
        EventKind::Blacklisted,
        EventKind::Banned,
        EventKind::Concurrent,
        EventKind::Throttled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EventKind::Ban => "ban",
            EventKind::Unban => "unban",
            EventKind::Whitelisted => "whitelisted",
            EventKind::Blacklisted => "blacklisted",
            EventKind::Banned => "banned",
            EventKind::Concurrent => "concurrent",
            EventKind::Throttled => "throttled",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of [`EventKind`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEvents(u8);

impl LogEvents {
    pub const ALL: LogEvents = LogEvents(0x7f);
    pub const NONE: LogEvents = LogEvents(0);

    pub fn has(self, e: EventKind) -> bool {
        self.0 & e.bit() != 0
    }

    /// `ban,unban,throttled`, `all`, `none`; comma- or space-separated, as
    /// Perlbal (which applies them in order: `all` then `none` is none).
    pub fn parse(v: &str) -> Option<LogEvents> {
        let mut set = 0u8;
        let mut any = false;
        for w in v.split([',', ' ']).filter(|w| !w.is_empty()) {
            any = true;
            match w.to_ascii_lowercase().as_str() {
                "all" => set = Self::ALL.0,
                "none" => set = 0,
                w => set |= EventKind::ALL.iter().find(|e| e.name() == w)?.bit(),
            }
        }
        any.then_some(LogEvents(set))
    }

    pub fn describe(self) -> String {
        match self {
            Self::ALL => "all".into(),
            Self::NONE => "none".into(),
            s => {
                let v: Vec<&str> = EventKind::ALL
                    .iter()
                    .filter(|e| s.has(**e))
                    .map(|e| e.name())
                    .collect();
                v.join(",")
            }
        }
    }
}
