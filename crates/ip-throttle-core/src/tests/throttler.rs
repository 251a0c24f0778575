//! The throttler (`Throttler` and its snapshots), by subject (throttler/),
//! and the helpers its parts share.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use limits::ManualClock;

use super::{MemFiles, MS, S};
use crate::options::EventKind;
use crate::state::Phase;
use crate::throttler::{Action, ListName, Request, Snapshot, Throttler};
use crate::{Client, Options};
use optspec::files::Files;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn at(s: &str) -> Client {
    Client::Addr(ip(s))
}

fn files() -> MemFiles {
    MemFiles::of(&[
        ("/etc/ts/allow.txt", "10.9.0.0/16\n2001:db8:aa::/48\n"),
        ("/etc/ts/deny.txt", "10.0.0.0/8\n192.0.2.66\n"),
    ])
}

const SMALL: &str =
    "--initial-delay=1 --max-delay=4 --threshold=1 --ban-threshold=3 --ban-expiration=3";

fn throttler(args: &str, f: &dyn Files) -> (Throttler<Arc<ManualClock>>, Arc<ManualClock>) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let o = Options::parse(&args, Path::new("/etc/ts"), f).unwrap();
    let clock = Arc::new(ManualClock::new(1000 * S));
    (
        Throttler::new(Snapshot::load(o, f).unwrap(), clock.clone()),
        clock,
    )
}

fn get(addr: &str) -> Request<'static> {
    Request {
        client: ip(addr).into(),
        method: b"GET",
        path: b"/",
    }
}

fn kinds(d: &crate::Decision) -> Vec<EventKind> {
    d.events().map(|e| e.kind).collect()
}

mod held;
mod lists;
mod proxies;
mod shared_store;
mod timeline;
