//! Helpers shared by fair.rs and fair_sources.rs: a rule, and requests of a
//! user (the `X-User` header) held at the origin.

use std::thread;

use ats_tests::client::{self, Response};
use ats_tests::Origin;

pub fn rule(host: &str, origin: &Origin, params: &str) -> String {
    ats_tests::rule("rate_limit", host, origin, params)
}

/// One request of `user` held `delay_ms` at the origin, on a fresh connection.
pub fn req(
    port: u16,
    host: &str,
    path: &str,
    user: &str,
    delay_ms: u64,
) -> std::io::Result<Response> {
    let delay = delay_ms.to_string();
    client::get(
        port,
        host,
        path,
        &[("X-User", user), ("X-Origin-Delay", &delay)],
    )
}

/// `n` requests of `user` at once, in the background.
pub fn flood(
    port: u16,
    host: &'static str,
    user: &'static str,
    n: usize,
    delay_ms: u64,
) -> thread::JoinHandle<Vec<std::io::Result<Response>>> {
    thread::spawn(move || {
        client::burst(n, move |i| {
            req(port, host, &format!("/{user}/{i}"), user, delay_ms)
        })
    })
}
