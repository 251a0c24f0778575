//! The decision for a request: the allow and deny lists, a ban, the path
//! and method scope, then the IP's state machine on this proxy's state or
//! on the record proxies share.

use limits::Clock;

use super::decision::{event, Action, Decision, Delayed, Event, Machine, Request, Scope, ToStep};
use super::Throttler;
use crate::lists::{canonical, Listed};
use crate::options::{DefaultAction, DenyAction, EventKind};
use crate::shared;
use crate::state::{IpState, Params, Phase, Step};
use crate::Client;

impl<C: Clock> Throttler<C> {
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
    /// caller runs with [`Throttler::step`] on local or shared state. An
    /// unknown client is on neither list: it has no address to match.
    pub fn scope(&self, req: &Request<'_>) -> Scope {
        let snap = self.current.load();
        let o = &snap.opts;
        let (client, listed) = match req.client {
            Client::Addr(ip) => {
                let ip = canonical(ip);
                (Client::Addr(ip), snap.lists.classify(ip))
            }
            Client::Unknown => (Client::Unknown, Listed::Neither),
        };
        let key = self.key(client);
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
                client,
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
            s.hold(m.client);
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
            s.hold(m.client);
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
}
