//! `ats-bench tls`: what rate_limit.so's global mode (TLS connections per
//! SNI at the client hello, issue 29) costs per connection, and what it
//! does against a flood.
//!
//! 1. Instructions per TLS connection under callgrind (`icount.rs`): no
//!    plugin, ours accepting, ours refusing, and on 10.x upstream's
//!    rate_limit.so accepting and refusing with the same YAML; each its own
//!    traffic_server.
//! 2. A flood (`flood.rs`, the flooder in `flooder.rs`): ~2,000 connections
//!    a second from 127.0.0.2 against a `per-ip` selector, a light client's
//!    handshakes from 127.0.0.3 unloaded and under the flood, and
//!    traffic_server's CPU.
//!
//! The clients are Python's `ssl` (`client.rs`, bench/tls/client.py), the
//! markdown is `report.rs` (the flood's part in `flood.rs`). Both parts
//! start their traffic_servers from `setup.rs` and take their options from
//! `args.rs`.

mod args;
mod client;
mod flood;
mod flooder;
mod icount;
mod report;
mod setup;

use std::process::ExitCode;

use self::args::{parse_args, Args, USAGE};
use self::setup::Plugin;
use crate::report::Context;

fn run(args: &Args) -> Result<String, String> {
    if !std::path::Path::new(client::PYTHON).is_file() {
        return Err(format!("{} is missing (the TLS client)", client::PYTHON));
    }
    let machine = crate::sys::Machine::probe();
    let ctx = Context {
        machine: &machine,
        command: crate::report::command(),
    };
    let icount = if args.icount {
        Some(icount::run(args)?)
    } else {
        None
    };
    let mut floods = Vec::new();
    if args.flood {
        for plugin in [Plugin::None, Plugin::Ours] {
            floods.push((plugin, flood::measure(args, plugin)?));
        }
    }
    Ok(report::section(&ctx, args, icount.as_ref(), &floods))
}

/// The BENCHMARKS.md section of the Traffic Server under test.
fn section_name() -> String {
    match ats_tests::ats::version() {
        (9, _) => "tls".to_owned(),
        (major, minor) => format!("tls-{major}.{minor}"),
    }
}

pub fn main(argv: &[String]) -> ExitCode {
    let args = match crate::report::args_or_exit("ats-bench tls", USAGE, parse_args(argv)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(&args) {
        Ok(body) => {
            crate::sections::publish("ats-bench tls", &section_name(), body, args.out.as_deref())
        }
        Err(e) => {
            eprintln!("ats-bench tls: {e}");
            ExitCode::FAILURE
        }
    }
}
