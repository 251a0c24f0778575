//! Integration test harness: runs a real `traffic_server` with our plugins.
//!
//! - [`ats`]: which Traffic Server runs (`ATS_PREFIX` unset: Debian's 9.2;
//!   set: the install under that prefix, e.g. 10.x), its detected version,
//!   binaries, default configs and upstream plugins.
//! - [`TrafficServer`]: a throwaway instance of it in its own runroot and
//!   ports, started directly or made reachable by `traffic_ctl` (under
//!   `traffic_manager` in 9.2), whose logs are printed when the test fails.
//! - [`Origin`]: a loopback origin whose responses the test controls per
//!   request (delay, status, Cache-Control, body size) and which records
//!   every request it receives.
//! - [`client`]: a small HTTP/1.1 client (single requests, keep-alive
//!   connections, concurrent bursts, aborts) with timings.
//! - [`capacity_origin`] and [`closed_loop`]: an origin of a given capacity
//!   and closed-loop clients, for the learned limits (issue 34).
//! - [`h2`]: a scripted HTTP/2 client over TLS (python3-h2): many streams
//!   per connection, RST_STREAM, connection close, with timings.
//! - [`tls`]: scripted TLS handshakes (python's `ssl`): SNI, source
//!   address, held connections, with timings (the global mode).
//! - [`nginx`]: an nginx with the test's `server` blocks, for side-by-side
//!   comparisons.
//! - [`redis`]: a redis-server per test (and a delaying relay in front of
//!   it) for the store tests.
//! - [`redis_cluster`]: a three-master Redis Cluster per test.
//! - [`plugin`]: paths of the freshly built plugin `.so` files.

#![forbid(unsafe_code)]

pub mod ats;
pub mod capacity_origin;
pub mod client;
pub mod closed_loop;
pub mod h2;
pub mod memcached;
pub mod nginx;
mod origin;
mod plugins;
pub mod redis;
pub mod redis_cluster;
mod server;
pub mod tls;

pub use origin::{Origin, Received};
pub use plugins::{install, plugin};
pub use server::{process_alive, runroot_processes, StartError, TrafficServer, TsBuilder};

use std::time::{Duration, Instant};

/// A remap.config line mapping `http://{host}/` to `origin` through
/// `plugin_name`, with each whitespace-separated option as an `@pparam`.
pub fn rule(plugin_name: &str, host: &str, origin: &Origin, params: &str) -> String {
    let pp: String = params
        .split_whitespace()
        .map(|p| format!(" @pparam={p}"))
        .collect();
    format!(
        "map http://{host}/ {} @plugin={}{pp}\n",
        origin.url(),
        plugin(plugin_name)
    )
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
