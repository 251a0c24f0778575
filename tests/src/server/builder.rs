//! Setting up an instance: [`TsBuilder`]'s options.

use std::path::PathBuf;
use std::time::Duration;

use super::TsBuilder;

impl TsBuilder {
    /// remap.config contents. Use `{origin}` style formatting in the caller.
    pub fn remap(mut self, remap: impl Into<String>) -> Self {
        self.remap = remap.into();
        self
    }

    /// Overrides a records.config setting: `record("proxy.config.x", "INT 1")`
    /// (`INT`, `FLOAT` or `STRING`, 9.2 names). On 10.x it goes to
    /// records.yaml under its 10.x name; one that 10.x dropped (such as
    /// `proxy.config.process_manager.mgmt_port`) is left out.
    pub fn record(mut self, name: &str, typed_value: &str) -> Self {
        self.records.insert(name.to_owned(), typed_value.to_owned());
        self
    }

    /// plugin.config contents (global plugins).
    pub fn plugin_config(mut self, text: impl Into<String>) -> Self {
        self.plugin_config = text.into();
        self
    }

    /// An extra file in the config directory (e.g. a plugin's config
    /// file); `name` may hold subdirectories (`ats-throttle/x.config`).
    pub fn config_file(mut self, name: &str, contents: &str) -> Self {
        self.files.push((name.to_owned(), contents.to_owned()));
        self
    }

    /// Make `traffic_ctl` work: in 9.x start under `traffic_manager`; in
    /// 10.x (no traffic_manager) start traffic_server as usual and wait for
    /// its JSON-RPC socket as well.
    pub fn with_manager(mut self) -> Self {
        self.manager = true;
        self
    }

    /// Run in this directory (emptied first) instead of a temp dir.
    pub fn root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.root = Some(dir.into());
        self
    }

    /// Also listen on [::1], the same port (reach it with
    /// [`Conn::open_ipv6`](crate::client::Conn::open_ipv6)).
    pub fn ipv6(mut self) -> Self {
        self.ipv6 = true;
        self
    }

    /// The port expects a PROXY protocol header before each connection's
    /// first request (`:pp`; send it with
    /// [`Conn::open_proxied`](crate::client::Conn::open_proxied)).
    pub fn proxy_protocol(mut self) -> Self {
        self.proxy_protocol = true;
        self
    }

    /// Also listen for TLS (HTTP/1.1 and HTTP/2 by ALPN) on another
    /// loopback port ([`TrafficServer::tls_port`]), with a self-signed
    /// certificate the `openssl` CLI makes for the test. Map `https://HOST/`
    /// in remap.config for requests that arrive there.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Listen on this port instead of a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Starts traffic_server (or, with the manager, traffic_manager) through
    /// this command, e.g. `valgrind --tool=callgrind`. The wrapper must run
    /// it in its own process (as `nice` and valgrind do), so that the
    /// child's pid stays traffic_server's.
    pub fn wrapper(mut self, argv: &[&str]) -> Self {
        self.wrapper = argv.iter().map(|a| (*a).to_owned()).collect();
        self
    }

    /// How long to wait for "fully initialized" (default 30 s; longer
    /// under a wrapper such as valgrind).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Debug tags to enable (default: our plugins' tags).
    pub fn debug_tags(mut self, tags: &str) -> Self {
        self.debug_tags = tags.to_owned();
        self
    }
}
