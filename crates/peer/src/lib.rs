//! DThrottle's peer protocol, shared by rate_limit.so and `dthrottled`.
//!
//! - [`wire`]: the versioned datagram format; a report split over datagrams
//!   of at most [`wire::MAX_DATAGRAM`] bytes.
//! - [`auth`]: the shared secret and HMAC-SHA256 of every datagram.
//! - [`receiver`]: who may send, the MAC, and replay rejection.
//! - [`transport`]: one UDP socket and one background thread, talking to the
//!   caller through bounded lock-free queues (never the TS API).
//!
//! Everything a datagram carries is hostile until its MAC checks: sizes are
//! checked before anything is read, and no input makes the decoder panic.

#![forbid(unsafe_code)]

pub mod auth;
pub mod rebind;
pub mod receiver;
pub mod transport;
pub mod wire;

#[cfg(test)]
mod tests;

pub use auth::Key;
pub use receiver::{Policy, Receiver};
pub use transport::{unix_ms, Config, Outgoing, Stats, Transport};
pub use wire::{Datagram, Entry, Kind, Reject, MAX_DATAGRAM};
