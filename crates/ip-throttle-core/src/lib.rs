//! Pure logic of ip_throttle.so, a port of Perlbal::Plugin::Throttle: the
//! per-IP state machine ([`state`]), the options ([`options`]), CIDR allow
//! and deny lists ([`lists`]) and the decision for one request over them
//! ([`throttler`]), with reloads that build off the request path and swap
//! in whole, the management commands ([`ctl`]), and the record proxies
//! share through a store ([`shared`]). No TS symbols; time is
//! injected (`limits::Clock`).

#![forbid(unsafe_code)]

pub mod ctl;
pub mod events;
mod files;
pub mod lists;
pub mod options;
pub mod shared;
pub mod state;
pub mod throttler;

#[cfg(test)]
mod tests;

/// Who a request's client is: an address, or `unknown` behind a trusted
/// proxy that does not name it (one state for all such clients, on no list).
pub use forwarded::Client;
pub use lists::{CidrList, Listed, Lists};
pub use options::{DefaultAction, DenyAction, EventKind, LogEvents, Options};
pub use state::{IpState, Params, Phase, Step, View};
pub use throttler::{
    Action, Decision, Delayed, Event, Held, ListName, Machine, Request, Scope, Snapshot, Throttler,
    ToStep,
};
