//! Clients of the shared stores that fleet-wide limits keep their state in.
//! No TS symbols: plugins hand requests in and take completions out, each on
//! their own (ATS) threads; this crate's threads never call the TS API.
//!
//! - [`Client`]: the shared machinery. One background I/O thread per client
//!   takes requests from a bounded lock-free queue, sends every request
//!   waiting at once in one round trip (a pipeline), and hands each answer
//!   back through a second bounded queue. Every request has a deadline: it
//!   completes by then, with the store's answer or [`Answer::Timeout`]. A
//!   broken connection is reopened with exponential backoff; while it is
//!   down, requests fail at once ([`Answer::Error`]) rather than wait.
//! - [`redis`]: the Redis backend (GCRA and concurrency leases in one Lua
//!   script using the server's clock) and its key layout.
//! - [`redis_cas`]: Redis as a compare-and-swap store ([`rmw`]).
//! - Both Redis backends send their batches through one connection layer
//!   (`redis_conn`): one server, or a Redis Cluster's masters
//!   (`redis_cluster`: slots, the slot map, redirects), each server's
//!   connection and replies read by `resp`.
//! - Every backend's sockets (`net`): one deadline bounds a whole exchange
//!   (a server that drips its answer cannot stretch it), and host names
//!   are resolved off the I/O thread.
//!
//! A later memcached backend (ip_throttle's shared state) implements
//! [`Backend`] and reuses the rest.

#![forbid(unsafe_code)]

mod client;
mod clients;
pub mod memcached;
mod net;
pub mod redis;
pub mod redis_cas;
mod redis_cluster;
mod redis_conn;
mod resp;
pub mod rmw;

pub use client::{
    Answer, Backend, BatchError, Client, Completion, Config, Exited, Stats, SubmitError,
};
pub use clients::Clients;
/// The RESP reply reader over bytes, for the fuzz target (`fuzz/`).
#[doc(hidden)]
pub use resp::read_reply;
/// `--store` values and the addresses they name (the `store-url` leaf).
pub use store_url as url;
