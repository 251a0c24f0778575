//! The per-IP state machine of Perlbal's Throttle, exactly as its
//! documentation describes it, on an injected clock (nanoseconds).
//!
//! - **allowed**: a request passes at once; the IP enters probation.
//! - **probation**: `threshold` without a request returns it to allowed; a
//!   request moves it to throttled with `delay = initial_delay`, and is
//!   delayed by `delay`.
//! - **throttled**: a request increments `violations`, doubles `delay` (at
//!   most `max_delay`) and is delayed by the new delay; when `violations`
//!   exceeds `ban_threshold` (if set) the request is refused and the IP is
//!   banned. The IP returns to probation, and `violations` and `delay` reset
//!   to 0, only once no request came for `delay` seconds *after the most
//!   recently created connection left the throttled state* (its delay
//!   ended): a client that waits out each delay and comes straight back
//!   keeps escalating.
//! - **banned**: every request is refused until `ban_expiration` has passed;
//!   then the IP is allowed again.
//! - at most `max_concurrent` requests of an IP are delayed at once; a
//!   request that would be delayed beyond that is refused (503). It still
//!   counts as a request (violations, delay), so a flood of parallel
//!   requests escalates to a ban.
//!
//! Time only moves forward through [`IpState::advance`], which every entry
//! point calls first: a state is always evaluated lazily, at the moment it
//! is looked at, so no timer per IP is needed.

use limits::Nanos;

use crate::Client;
use holder::Holder;

mod holder;

/// The state machine's tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub initial_delay: Nanos,
    pub max_delay: Nanos,
    pub threshold: Nanos,
    pub max_concurrent: u32,
    /// 0: never ban.
    pub ban_threshold: u32,
    pub ban_expiration: Nanos,
}

/// The four states of an IP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    #[default]
    Allowed,
    Probation,
    Throttled,
    Banned,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Allowed => "allowed",
            Phase::Probation => "probation",
            Phase::Throttled => "throttled",
            Phase::Banned => "banned",
        }
    }
}

/// What to do with a request that the state machine saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Handle it at once.
    Pass,
    /// Delay it by this long, then handle it (if the client is still there).
    Delay(Nanos),
    /// Refuse it (503): `max_concurrent` requests of the IP are delayed already.
    TooMany,
    /// Refuse it (403): this request banned the IP.
    Ban,
    /// Refuse it (403): the IP is banned.
    Banned,
}

/// One IP's state: 40 bytes (24 of them the state machine's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IpState {
    /// Probation: since when (its last request, or the end of its
    /// throttling). Throttled: when the most recently created connection's
    /// delay ends. Banned: until when.
    at: Nanos,
    /// Current delay (0 unless throttled).
    delay: Nanos,
    violations: u32,
    /// Requests of this IP being delayed now.
    delayed: u16,
    phase: Phase,
    /// The client the state is kept for (see `holder.rs`).
    holder: Holder,
}

/// A read-only view of an IP's state (for `show` and log lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub phase: Phase,
    pub delay: Nanos,
    pub violations: u32,
    pub delayed: u32,
    /// Banned: time left; throttled: until it may return to probation
    /// (if no request comes); probation: until allowed.
    pub remaining: Nanos,
}

impl IpState {
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// When the ban ends, if banned.
    pub fn banned_until(&self) -> Option<Nanos> {
        (self.phase == Phase::Banned).then_some(self.at)
    }

    pub fn delay(&self) -> Nanos {
        self.delay
    }

    pub fn violations(&self) -> u32 {
        self.violations
    }

    pub fn delayed(&self) -> u32 {
        u32::from(self.delayed)
    }

    /// The client that first stepped through this state (canonical, not
    /// masked to `--key-prefix`); `None` before it did.
    pub fn holder(&self) -> Option<Client> {
        self.holder.client()
    }

    /// Names the client the state is kept for, if it is not named yet:
    /// every call that may insert the state does, under the same lock.
    /// Once is enough (a key is one client's, or one prefix's, whose
    /// addresses `keys` shows masked alike), and costs a request one
    /// compare after that.
    #[inline]
    pub fn hold(&mut self, client: Client) {
        if self.holder.is_unnamed() {
            self.holder = Holder::of(client);
        }
    }

    /// Moves the state to `now`. Returns true if a ban ended (an `unban`).
    pub fn advance(&mut self, now: Nanos, p: &Params) -> bool {
        loop {
            match self.phase {
                Phase::Banned if now >= self.at => {
                    self.reset_to(Phase::Allowed, 0);
                    return true;
                }
                Phase::Throttled if now >= self.at.saturating_add(self.delay) => {
                    let since = self.at.saturating_add(self.delay);
                    self.reset_to(Phase::Probation, since);
                }
                // A request stamped a hair before the probation began (two
                // threads read the clock, then take the IP's lock in the
                // other order) counts as arriving when it began.
                Phase::Probation if now.saturating_sub(self.at) >= p.threshold => {
                    self.reset_to(Phase::Allowed, 0);
                }
                _ => return false,
            }
        }
    }

    fn reset_to(&mut self, phase: Phase, at: Nanos) {
        self.phase = phase;
        self.at = at;
        self.delay = 0;
        self.violations = 0;
    }

    /// A request of this IP that is subject to throttling, at `now` (after
    /// [`advance`](Self::advance)). A `Delay` step counts the request as
    /// delayed: the caller must call [`undelay`](Self::undelay) once its
    /// delay ends or it is dropped.
    pub fn request(&mut self, now: Nanos, p: &Params) -> Step {
        match self.phase {
            Phase::Allowed => {
                self.phase = Phase::Probation;
                self.at = now;
                Step::Pass
            }
            Phase::Probation => {
                self.phase = Phase::Throttled;
                self.violations = 0;
                self.delay = p.initial_delay.min(p.max_delay);
                self.delay_or_refuse(now, p)
            }
            Phase::Throttled => {
                self.violations = self.violations.saturating_add(1);
                self.delay = self.delay.saturating_mul(2).min(p.max_delay);
                if p.ban_threshold > 0 && self.violations > p.ban_threshold {
                    self.ban(now, p.ban_expiration);
                    return Step::Ban;
                }
                self.delay_or_refuse(now, p)
            }
            Phase::Banned => Step::Banned,
        }
    }

    fn delay_or_refuse(&mut self, now: Nanos, p: &Params) -> Step {
        if u32::from(self.delayed) >= p.max_concurrent || self.delayed == u16::MAX {
            // The refused connection leaves the throttled state at once;
            // one still being delayed keeps its later end.
            self.at = self.at.max(now);
            return Step::TooMany;
        }
        self.delayed += 1;
        self.at = now.saturating_add(self.delay);
        Step::Delay(self.delay)
    }

    /// A delayed request left its delay (resumed, or its client dropped):
    /// it no longer counts against `max_concurrent`. The delay is unchanged.
    pub fn undelay(&mut self) {
        self.delayed = self.delayed.saturating_sub(1);
    }

    /// Bans the IP until `now + duration`.
    pub fn ban(&mut self, now: Nanos, duration: Nanos) {
        self.phase = Phase::Banned;
        self.at = now.saturating_add(duration);
    }

    /// Lifts a ban at once (the `unban` command). True if there was one.
    pub fn unban(&mut self) -> bool {
        if self.phase != Phase::Banned {
            return false;
        }
        self.reset_to(Phase::Allowed, 0);
        true
    }

    /// The state as of `now`, without changing it.
    pub fn view(&self, now: Nanos, p: &Params) -> View {
        let mut s = *self;
        s.advance(now, p);
        let end = match s.phase {
            Phase::Allowed => now,
            Phase::Probation => s.at.saturating_add(p.threshold),
            Phase::Throttled => s.at.saturating_add(s.delay),
            Phase::Banned => s.at,
        };
        View {
            phase: s.phase,
            delay: s.delay,
            violations: s.violations,
            delayed: s.delayed(),
            remaining: end.saturating_sub(now),
        }
    }

    /// The state without its local part (`delayed`): what proxies share.
    pub(crate) fn shared_parts(&self) -> (Phase, Nanos, Nanos, u32) {
        (self.phase, self.at, self.delay, self.violations)
    }

    /// Replaces the shared part with another proxy's, keeping the local
    /// count of delayed requests (`max_concurrent` is per host).
    pub(crate) fn with_shared(
        self,
        phase: Phase,
        at: Nanos,
        delay: Nanos,
        violations: u32,
    ) -> Self {
        IpState {
            phase,
            at,
            delay,
            violations,
            delayed: self.delayed,
            holder: self.holder,
        }
    }

    /// This state after another copy of it (`other`, the same step run on
    /// the shared record) took its step: its shared part, and this proxy's
    /// own count of delayed requests, plus one if `count` (a delay that had
    /// no place reserved).
    pub(crate) fn adopt(self, other: &IpState, count: bool) -> IpState {
        let delayed = match count {
            true => self.delayed.saturating_add(1),
            false => self.delayed,
        };
        IpState {
            delayed,
            holder: self.holder,
            ..*other
        }
    }

    /// Takes a place among the IP's delayed requests for a request whose
    /// step runs elsewhere (the shared record); [`IpState::undelay`] gives
    /// it back.
    /// False (nothing taken) at the count's bound, which undelay could not
    /// then match.
    pub(crate) fn reserve(&mut self) -> bool {
        if self.delayed == u16::MAX {
            return false;
        }
        self.delayed += 1;
        true
    }

    /// True while the IP must not be forgotten: requests of it are delayed
    /// (their release must find the state), or it is banned.
    pub fn busy(&self) -> bool {
        self.delayed > 0 || self.phase == Phase::Banned
    }
}

/// No time needed: a ban lasts until a request of the IP moves its state on.
impl keyed::KeyState for IpState {
    fn busy(&self, _now: u64) -> bool {
        IpState::busy(self)
    }
}
