//! What every part of `ats-bench tls` runs against: the SNI and the
//! client addresses, the selectors' YAML, the records, which rate_limit.so,
//! and the traffic_server that loads it.

use std::net::Ipv4Addr;

use ats_tests::{TrafficServer, TsBuilder};

/// The SNI every measured connection sends (the harness's certificate is
/// for `*.test`).
pub const SNI: &str = "bench.test";
/// The flood's source, and the light client's.
pub const FLOODER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
pub const LIGHT: &str = "127.0.0.3";
/// The connection that keeps a `limit: 1` selector full in the refused windows.
pub const HOLDER: &str = "127.0.0.4";
/// The measured connections' source.
pub const CLIENT: &str = "127.0.0.1";

/// A selector that never refuses: every connection takes its normal path
/// (a slot taken at the client hello, given back at VCONN_CLOSE).
pub fn yaml_accept() -> String {
    format!("selector:\n  - sni: {SNI}\n    limit: 1000000\n")
}
/// Full once one connection is held open: every other connection is
/// refused at the client hello, in ours and in upstream's.
pub fn yaml_refuse() -> String {
    format!("selector:\n  - sni: {SNI}\n    limit: 1\n")
}
/// The flood's selector: each address at most 20 connections at once and
/// 50 new ones a second.
pub fn yaml_flood() -> String {
    format!("selector:\n  - sni: {SNI}\n    per-ip:\n      limit: 20\n      rate: 50\n")
}

/// records for every traffic_server of this bench, besides the load
/// bench's (`crate::records::ATS_RECORDS`). No session tickets: with them, a client
/// that closes while tickets are in flight resets the connection instead of
/// closing it, and ATS takes another path for it (counts then vary with
/// timing). A handshaken connection that sends no request (the held one)
/// must not time out during a window slowed down by callgrind.
pub const TLS_RECORDS: &[(&str, &str)] = &[
    ("proxy.config.ssl.server.session_ticket.enable", "INT 0"),
    ("proxy.config.ssl.server.session_ticket.number", "INT 0"),
    ("proxy.config.http.accept_no_activity_timeout", "INT 3600"),
];

/// Which rate_limit.so a server loads, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plugin {
    None,
    Ours,
    Upstream,
}

impl Plugin {
    pub fn so(self) -> Option<String> {
        let p = match self {
            Plugin::None => return None,
            Plugin::Ours => ats_tests::plugin("rate_limit"),
            Plugin::Upstream => ats_tests::ats::upstream_plugin("rate_limit"),
        };
        // callgrind names an object by its real path.
        Some(
            std::fs::canonicalize(&p)
                .map(|c| c.display().to_string())
                .unwrap_or(p),
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            Plugin::None => "no plugin",
            Plugin::Ours => "our rate_limit.so",
            Plugin::Upstream => "upstream rate_limit.so (C++)",
        }
    }
}

/// A traffic_server with a TLS port, loading `plugin` with `yaml` (by
/// absolute path: upstream opens it as given), in `root`.
pub fn builder(plugin: Plugin, yaml: &str, root: &std::path::Path) -> TsBuilder {
    let mut b = TrafficServer::builder().root(root).tls();
    if let Some(so) = plugin.so() {
        let file = root.join("etc/global.yaml");
        b = b
            .plugin_config(format!("{so} {}\n", file.display()))
            .config_file("global.yaml", yaml);
    }
    for (k, v) in crate::records::ATS_RECORDS.iter().chain(TLS_RECORDS) {
        b = b.record(k, v);
    }
    b
}
