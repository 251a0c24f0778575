//! One rule's throttler: the decision for a request (lists, scope, the
//! per-IP state machine), per-IP state in the bounded keyed table, and the
//! management operations (`unban`, `show`, reloads).
//!
//! The reloadable part (options and lists) is one immutable [`Snapshot`]
//! behind an `ArcSwap`: a request loads it without a lock (a few ns); a
//! reload builds a whole new snapshot on the caller's thread (a task
//! thread, never a request path) and swaps it in at once. Reloads are
//! serialised by a mutex that only reloaders take.
//!
//! - `decision`: what a request gets ([`Decision`], [`Action`], [`Event`])
//!   and the steps between ([`Scope`], [`ToStep`], [`Machine`], [`Delayed`]);
//! - `decide`: the decision itself (lists, scope, the state machine on local
//!   or shared state);
//! - `manage`: the [`Snapshot`] and what changes it or reads it outside a
//!   request (expiry timers, `unban`, `show`, reloads);
//! - `held`: the hottest IPs of the table, for `keys` ([`Held`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use arc_swap::ArcSwap;
use keyed::KeyTable;
use limits::{Clock, MonotonicClock, Nanos};
use netaddr::{mask128, mask32};
use parking_lot::Mutex;

use crate::lists::canonical;
use crate::shared;
use crate::state::IpState;
use crate::Client;

mod decide;
mod decision;
mod held;
mod manage;

pub use decision::{Action, Decision, Delayed, Event, Machine, Request, Scope, ToStep};
pub use held::{Best, Held};
pub use manage::{ListName, Snapshot};

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

    /// The state key of a client: its address's canonical form aggregated
    /// to the rule's prefix (IPv6 /64 by default), hashed with the table's
    /// seed. Every unknown client has one key, which no address has (an
    /// address is 4 or 16 bytes).
    pub fn key(&self, client: impl Into<Client>) -> u64 {
        let ip = match client.into() {
            Client::Addr(ip) => ip,
            Client::Unknown => return self.table.hash(&[]),
        };
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

    /// The client of a request from `remote` under the configuration in
    /// force (`--trusted-proxies`, `--forwarded-header`): see
    /// [`Options::client_ip`]. Lists, bans and state all apply to it
    /// (no list to an unknown client).
    pub fn client_ip(
        &self,
        remote: IpAddr,
        read: impl FnOnce(&'static str) -> Option<Vec<u8>>,
    ) -> Client {
        self.current.load().opts.client_ip(remote, read)
    }

    /// The shared record's key for a client: its prefix under
    /// `--key-prefix` (the unit this proxy keeps state for), in
    /// `--instance`; `unknown` for every unknown client.
    pub fn record_key(&self, client: impl Into<Client>) -> String {
        let instance = &self.current.load().opts.instance;
        let net = match self.unit(client.into()) {
            (Client::Addr(ip), Some(len)) => (ip, len, if ip.is_ipv4() { 32 } else { 128 }),
            _ => return shared::unknown_key(instance),
        };
        shared::key(instance, net)
    }

    /// What a client's state is kept for: its canonical address masked to
    /// the rule's prefix, with the prefix's length.
    pub fn unit(&self, client: Client) -> (Client, Option<u8>) {
        let Client::Addr(ip) = client else {
            return (Client::Unknown, None);
        };
        let (ip, len) = match canonical(ip) {
            IpAddr::V4(a) => {
                let n = Ipv4Addr::from(u32::from(a) & mask32(self.v4_prefix));
                (IpAddr::V4(n), self.v4_prefix)
            }
            IpAddr::V6(a) => {
                let n = Ipv6Addr::from(u128::from(a) & mask128(self.v6_prefix));
                (IpAddr::V6(n), self.v6_prefix)
            }
        };
        (Client::Addr(ip), Some(len))
    }
}
