//! One rule's throttler: the decision for a request (lists, scope, the
//! per-IP state machine), per-IP state in the bounded keyed table, and the
//! management operations (`unban`, `show`, reloads).
//!
//! The reloadable part (options and lists) is one immutable [`Snapshot`]
//! behind an `ArcSwap`: a request loads it without a lock (a few ns); a
//! reload builds a whole new snapshot on the caller's thread (a task
//! thread, never a request path) and swaps it in at once. Reloads are
//! serialised by a mutex that only reloaders take.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use keyed::KeyTable;
use limits::{Clock, MonotonicClock, Nanos};
use netaddr::{mask128, mask32};
use parking_lot::Mutex;

use crate::lists::{canonical, CidrList, Listed, Lists};
use crate::options::{DefaultAction, DenyAction, EventKind, LogEvents, Options};
use crate::shared;
use crate::state::{IpState, Params, Phase, Step, View};
use crate::Files;

/// The reloadable configuration of a rule.
#[derive(Debug)]
pub struct Snapshot {
    pub opts: Options,
    pub lists: Lists,
}

impl Snapshot {
    /// Reads the list files `opts` names.
    pub fn load(opts: Options, files: &dyn Files) -> Result<Snapshot, String> {
        let read = |f: &Option<PathBuf>, opt: &str| -> Result<Arc<CidrList>, String> {
            match f {
                Some(p) => CidrList::load(p, files)
                    .map(Arc::new)
                    .map_err(|e| format!("--{opt}: {e}")),
                None => Ok(Arc::new(CidrList::new())),
            }
        };
        let lists = Lists {
            allow: read(&opts.allow_file, "allow-file")?,
            deny: read(&opts.deny_file, "deny-file")?,
        };
        Ok(Snapshot { opts, lists })
    }
}

/// The parts of a request the decision reads.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub ip: IpAddr,
    pub method: &'a [u8],
    /// The path with its leading `/`, without the query.
    pub path: &'a [u8],
}

/// What the plugin does with the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Pass,
    /// Hold it this long (a timer), then pass it if the client is still there.
    Delay(Nanos),
    /// 403 Forbidden (banned or deny-listed).
    Forbid,
    /// 503 Too many connections.
    TooMany,
}

/// Something that happened, for `ip_throttle.log`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The IP's state after the event.
    pub phase: Phase,
    pub delay: Nanos,
    pub violations: u32,
}

/// The decision for one request.
#[derive(Debug)]
pub struct Decision {
    /// What to do (always `Pass` with `--log-only`).
    pub action: Action,
    /// What would be done without `--log-only` (= `action` otherwise).
    pub would: Action,
    /// At most two events: an expired ban's `unban`, then the request's own.
    pub events: [Option<Event>; 2],
    /// Held while the request counts as delayed (against `max_concurrent`):
    /// drop it when the delay ends or the request goes away. With
    /// `--log-only` a would-be-delayed request counts until it completes.
    pub delayed: Option<Delayed>,
    /// This request banned the IP until then (to log the `unban` on time).
    pub banned_until: Option<Nanos>,
    /// The IP's key in the state table.
    pub key: u64,
    /// The state table was full of busy IPs: the request passed untracked.
    pub untracked: bool,
    /// The rule's `--log-events` and `--log-only` when it was decided.
    pub log_events: LogEvents,
    pub log_only: bool,
}

impl Decision {
    fn new(key: u64, would: Action, o: &Options) -> Decision {
        let log_only = o.log_only;
        Decision {
            log_events: o.log_events,
            log_only,
            action: if log_only { Action::Pass } else { would },
            would,
            events: [None, None],
            delayed: None,
            banned_until: None,
            key,
            untracked: false,
        }
    }

    fn push(&mut self, e: Event) {
        if let Some(slot) = self.events.iter_mut().find(|s| s.is_none()) {
            *slot = Some(e);
        }
    }

    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.events.iter().flatten()
    }
}

/// A request counted as delayed; dropping it stops counting it.
pub struct Delayed {
    table: Arc<KeyTable<IpState>>,
    key: u64,
}

impl std::fmt::Debug for Delayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Delayed({:#x})", self.key)
    }
}

impl Drop for Delayed {
    fn drop(&mut self) {
        // A delayed IP is busy, so never evicted: the state is there.
        self.table.get(self.key, IpState::undelay);
    }
}

/// What [`Throttler::scope`] found.
#[derive(Debug)]
pub enum Scope {
    /// Decided without the state machine (listed, out of scope, banned).
    Decided(Decision),
    /// The IP's state machine decides.
    Machine(ToStep),
}

/// A request left to the state machine.
#[derive(Clone, Copy, Debug)]
pub struct ToStep {
    pub key: u64,
    /// The client's canonical address (the shared record's key).
    pub ip: IpAddr,
    deny_listed: bool,
}

/// Where the state machine runs.
#[derive(Debug)]
pub enum Machine<'a> {
    /// On this proxy's state.
    Local,
    /// On the shared record; adopt its outcome. `reserved`: the place
    /// [`Throttler::reserve`] took when the request was sent.
    Shared {
        update: &'a shared::Update,
        reserved: Option<Delayed>,
    },
}

/// Which list a reload reads again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListName {
    Allow,
    Deny,
}

/// A rule's throttler.
pub struct Throttler<C: Clock = MonotonicClock> {
    table: Arc<KeyTable<IpState>>,
    current: ArcSwap<Snapshot>,
    /// Taken by reloads only (never by requests).
    reloading: Mutex<()>,
    clock: C,
    /// Fixed for the throttler's life (the table is sized and keyed by them).
    keys: usize,
    v4_prefix: u8,
    v6_prefix: u8,
}

fn event(kind: EventKind, s: &IpState) -> Event {
    Event {
        kind,
        phase: s.phase(),
        delay: s.delay(),
        violations: s.violations(),
    }
}

impl<C: Clock> Throttler<C> {
    pub fn new(snapshot: Snapshot, clock: C) -> Throttler<C> {
        let o = &snapshot.opts;
        Throttler {
            table: Arc::new(KeyTable::new(o.keys)),
            keys: o.keys,
            v4_prefix: o.v4_prefix,
            v6_prefix: o.v6_prefix,
            current: ArcSwap::from_pointee(snapshot),
            reloading: Mutex::new(()),
            clock,
        }
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Whether the scope needs the request's (method, path): without
    /// `--method-regex`/`--path-regex` the plugin need not read them.
    pub fn scope_needs(&self) -> (bool, bool) {
        let s = self.current.load();
        (s.opts.method_regex.is_some(), s.opts.path_regex.is_some())
    }

    /// The configuration in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The state table (for the keys/evicted metrics).
    pub fn table(&self) -> &KeyTable<IpState> {
        &self.table
    }

    /// The state key of an address: its canonical form aggregated to the
    /// rule's prefix (IPv6 /64 by default), hashed with the table's seed.
    pub fn key(&self, ip: IpAddr) -> u64 {
        match canonical(ip) {
            IpAddr::V4(a) => {
                let b = (u32::from(a) & mask32(self.v4_prefix)).to_be_bytes();
                self.table.hash(&b)
            }
            IpAddr::V6(a) => {
                let b = (u128::from(a) & mask128(self.v6_prefix)).to_be_bytes();
                self.table.hash(&b)
            }
        }
    }

    /// The client of a request from `peer` under the configuration in
    /// force (`--trusted-proxies`, `--forwarded-header`): see
    /// [`Options::client_ip`]. Lists, bans and state all apply to it.
    pub fn client_ip(
        &self,
        peer: IpAddr,
        read: impl FnOnce(&'static str) -> Option<Vec<u8>>,
    ) -> IpAddr {
        self.current.load().opts.client_ip(peer, read)
    }

    /// Decides what happens to `req` on this proxy's own state.
    pub fn decide(&self, req: &Request<'_>) -> Decision {
        match self.scope(req) {
            Scope::Decided(d) => d,
            Scope::Machine(m) => self.step(m, Machine::Local),
        }
    }

    /// The part of the decision before the IP's state machine. In
    /// Perlbal's order: the allow list, a ban, the deny list, the path and
    /// method scope, `--default-action`; then the state machine, which the
    /// caller runs with [`Throttler::step`] on local or shared state.
    pub fn scope(&self, req: &Request<'_>) -> Scope {
        let snap = self.current.load();
        let o = &snap.opts;
        let ip = canonical(req.ip);
        let listed = snap.lists.classify(ip);
        let key = self.key(ip);
        if listed == Listed::Allow {
            let mut d = Decision::new(key, Action::Pass, o);
            d.push(Event {
                kind: EventKind::Whitelisted,
                phase: Phase::Allowed,
                delay: 0,
                violations: 0,
            });
            return Scope::Decided(d);
        }
        let now = self.clock.now();
        let p = &o.params;
        let throttle = match listed {
            Listed::Deny => o.deny_action == DenyAction::Throttle,
            _ => {
                o.default_action == DefaultAction::Throttle
                    && o.path_regex.as_ref().is_none_or(|r| r.is_match(req.path))
                    && o.method_regex
                        .as_ref()
                        .is_none_or(|r| r.is_match(req.method))
            }
        };
        if throttle {
            return Scope::Machine(ToStep {
                key,
                ip,
                deny_listed: listed == Listed::Deny,
            });
        }
        // Only a ban can stop it: look, but never insert an IP.
        let mut d = Decision::new(key, Action::Pass, o);
        let banned = self.table.get(key, |s| {
            if s.advance(now, p) {
                d.push(event(EventKind::Unban, s));
            }
            (s.phase() == Phase::Banned).then(|| event(EventKind::Banned, s))
        });
        match banned.flatten() {
            Some(e) => {
                d = Decision {
                    events: d.events,
                    ..Decision::new(key, Action::Forbid, o)
                };
                d.push(e);
            }
            None if listed == Listed::Deny => {
                d = Decision {
                    events: d.events,
                    ..Decision::new(key, Action::Forbid, o)
                };
                d.push(Event {
                    kind: EventKind::Blacklisted,
                    phase: Phase::Allowed,
                    delay: 0,
                    violations: 0,
                });
            }
            None => {}
        }
        Scope::Decided(d)
    }

    /// For a step on the shared record: this proxy's state of the IP (its
    /// `delayed` counts the requests of the IP delayed here or already on
    /// their way to the store), the moment on both clocks, the parameters,
    /// and this request's own place among them. The place is taken now,
    /// before the store answers, so parallel requests of one IP cannot all
    /// pass `--max-concurrent`; [`Throttler::step`] keeps it for a delay and
    /// gives it back otherwise. `None` if the table is full of busy IPs.
    pub fn reserve(
        &self,
        m: &ToStep,
        wall_ms: u64,
    ) -> (IpState, shared::Now, Params, Option<Delayed>) {
        let now = shared::Now {
            mono: self.clock.now(),
            wall_ms,
        };
        let p = self.current.load().opts.params;
        match self.table.with(m.key, |s| {
            let before = *s;
            (before, s.reserve())
        }) {
            Ok((before, reserved)) => (
                before,
                now,
                p,
                reserved.then(|| Delayed {
                    table: self.table.clone(),
                    key: m.key,
                }),
            ),
            Err(keyed::Full) => (IpState::default(), now, p, None),
        }
    }

    /// The shared record's key for `ip`: its prefix under `--key-prefix`
    /// (the unit this proxy keeps state for), in `--instance`.
    pub fn record_key(&self, ip: IpAddr) -> String {
        let net = match canonical(ip) {
            IpAddr::V4(a) => {
                let n = std::net::Ipv4Addr::from(u32::from(a) & mask32(self.v4_prefix));
                (IpAddr::V4(n), self.v4_prefix, 32)
            }
            IpAddr::V6(a) => {
                let n = std::net::Ipv6Addr::from(u128::from(a) & mask128(self.v6_prefix));
                (IpAddr::V6(n), self.v6_prefix, 128)
            }
        };
        shared::key(&self.current.load().opts.instance, net)
    }

    /// The IP's state machine for a request that [`Throttler::scope`] left
    /// to it: on this proxy's state, or adopting the result of the same step
    /// run on the record proxies share ([`shared::request`]).
    pub fn step(&self, m: ToStep, how: Machine<'_>) -> Decision {
        let (how, reserved) = match how {
            Machine::Local => (None, None),
            Machine::Shared { update, reserved } => (Some(update), reserved),
        };
        let snap = self.current.load();
        let o = &snap.opts;
        let p = &o.params;
        let now = self.clock.now();
        let key = m.key;
        let mut d = Decision::new(key, Action::Pass, o);
        let got = self.table.with(key, |s| {
            let was_banned = s.phase() == Phase::Banned;
            let (unbanned, step) = match how {
                None => (s.advance(now, p), s.request(now, p)),
                Some(u) => {
                    // A delay keeps the place reserved when the request was
                    // sent; without one (table full then), it takes one now.
                    let count = matches!(u.step, Step::Delay(_)) && reserved.is_none();
                    *s = s.adopt(&u.state, count);
                    (u.unbanned, u.step)
                }
            };
            if unbanned {
                d.push(Event {
                    kind: EventKind::Unban,
                    phase: Phase::Allowed,
                    delay: 0,
                    violations: 0,
                });
            }
            let (would, kind) = match step {
                Step::Pass => (Action::Pass, None),
                Step::Delay(n) => (Action::Delay(n), Some(EventKind::Throttled)),
                Step::TooMany => (Action::TooMany, Some(EventKind::Concurrent)),
                Step::Ban => (Action::Forbid, Some(EventKind::Ban)),
                Step::Banned => (Action::Forbid, Some(EventKind::Banned)),
            };
            if m.deny_listed && step != Step::Banned {
                // Perlbal logs a deny-listed client's throttling as "blacklisted".
                let kind = match kind {
                    Some(EventKind::Throttled) | None => EventKind::Blacklisted,
                    Some(k) => k,
                };
                d.push(event(kind, s));
            } else if let Some(k) = kind {
                d.push(event(k, s));
            }
            // A ban another proxy set (first seen here) is logged as ending
            // on time here too; once per ban, not per refused request.
            if step == Step::Ban || (step == Step::Banned && !was_banned) {
                d.banned_until = s.banned_until();
            }
            (would, matches!(step, Step::Delay(_)))
        });
        match got {
            Ok((would, delayed)) => {
                d.would = would;
                if !o.log_only {
                    d.action = would;
                }
                if delayed {
                    d.delayed = Some(reserved.unwrap_or_else(|| Delayed {
                        table: self.table.clone(),
                        key,
                    }));
                }
                // Otherwise `reserved`, if any, is dropped here (after the
                // table's lock): the place is given back.
            }
            Err(keyed::Full) => d.untracked = true,
        }
        d
    }

    /// Ends a ban that has expired (the `unban` timer). The event if it did.
    pub fn expire(&self, key: u64) -> Option<Event> {
        self.expire_by(key, 0)
    }

    /// As [`Throttler::expire`], for a timer armed for a ban's end `due`
    /// that fires a hair early (ATS's timers run off a cached clock that can
    /// lag the real one): a ban that still ends at or before `due` ends now.
    /// Any other state (the ban was lifted, or replaced) advances on the real
    /// clock only.
    pub fn expire_by(&self, key: u64, due: Nanos) -> Option<Event> {
        let now = self.clock.now();
        let p = self.current.load().opts.params;
        self.table
            .get(key, |s| {
                let banned_until = s.banned_until();
                let t = match banned_until {
                    Some(end) if end <= due => now.max(end),
                    _ => now,
                };
                s.advance(t, &p).then(|| event(EventKind::Unban, s))
            })
            .flatten()
    }

    /// Lifts a ban on `ip` at once (the `unban` command). The event if it did.
    pub fn unban(&self, ip: IpAddr) -> Option<Event> {
        self.table
            .get(self.key(ip), |s| {
                s.unban().then(|| event(EventKind::Unban, s))
            })
            .flatten()
    }

    /// The state of `ip` now (the `show` command); `None`: not tracked,
    /// which means allowed.
    pub fn show(&self, ip: IpAddr) -> Option<View> {
        let now = self.clock.now();
        let p = self.current.load().opts.params;
        self.table.get(self.key(ip), |s| s.view(now, &p))
    }

    /// Builds a new snapshot from `opts` (reading its list files) and
    /// swaps it in. `opts` must keep `--keys` and `--key-prefix`: they
    /// shape the state table, which a reload keeps (per-IP state survives).
    pub fn reload(&self, opts: Options, files: &dyn Files) -> Result<(), String> {
        if opts.keys != self.keys
            || (opts.v4_prefix, opts.v6_prefix) != (self.v4_prefix, self.v6_prefix)
        {
            return Err(format!(
                "--keys and --key-prefix cannot change on a reload (in force: --keys={} \
                 --key-prefix={}/{}); reload remap.config instead",
                self.keys, self.v4_prefix, self.v6_prefix
            ));
        }
        let _one = self.reloading.lock();
        let next = Snapshot::load(opts, files)?;
        self.current.store(Arc::new(next));
        Ok(())
    }

    /// Reads one list file again and swaps it in; the other list and the
    /// options stay. The number of prefixes loaded.
    pub fn reload_list(&self, which: ListName, files: &dyn Files) -> Result<usize, String> {
        let _one = self.reloading.lock();
        let cur = self.current.load_full();
        let (file, opt) = match which {
            ListName::Allow => (&cur.opts.allow_file, "allow-file"),
            ListName::Deny => (&cur.opts.deny_file, "deny-file"),
        };
        let Some(file) = file else {
            return Err(format!("no --{opt} is configured"));
        };
        let list = Arc::new(CidrList::load(file, files).map_err(|e| format!("--{opt}: {e}"))?);
        let n = list.len();
        let mut lists = cur.lists.clone();
        match which {
            ListName::Allow => lists.allow = list,
            ListName::Deny => lists.deny = list,
        }
        self.current.store(Arc::new(Snapshot {
            opts: cur.opts.clone(),
            lists,
        }));
        Ok(n)
    }
}
