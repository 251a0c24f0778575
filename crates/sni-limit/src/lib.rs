//! Pure logic of rate_limit.so's global mode: TLS connections limited per
//! SNI at the client hello, before the handshake's cost is paid.
//!
//! No TS symbols: the plugin (`plugins/rate_limit_global`) maps the
//! decisions to the client-hello hook, parked handshakes and timers. Time
//! is injected ([`limits::Clock`]).
//!
//! - [`config`]: the YAML file (upstream's format, checked whole, with the
//!   line of every error).
//! - [`Selectors`]: one loaded file: a connection's selector by its SNI
//!   (`select.rs`), each [`Selector`] built from its entry, keeping the
//!   limiters of the file it replaces (`build.rs`).
//! - [`Selector::admit`] (`gate.rs`): one connection's decision: `exclude`,
//!   then the address's own limits (`per-ip`), then the IP-reputation
//!   sieve under pressure, then the selector's rate, limit and queue (a
//!   [`rate_limit_core::Limiter`], the engine of the remap rules).
//! - [`sieve`]: the IP-reputation sieve (`ip-rep:`), bounded and sharded.

#![forbid(unsafe_code)]

pub mod config;
mod gate;
mod select;
pub mod sieve;

pub use config::{Config, Sni};
pub use gate::{Counts, Hold, NoWait, Pending, Refusal, Selector, Verdict};
pub use select::Selectors;
