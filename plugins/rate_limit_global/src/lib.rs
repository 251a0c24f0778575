//! rate_limit.so's global mode: `rate_limit.so FILE.yaml` in plugin.config
//! limits TLS connections per SNI at the client hello, before the handshake
//! is paid for (docs/rate_limit.md, "Global mode"). The file is upstream's
//! YAML; its logic is `sni_limit`. A crate of its own because its path is a
//! connection's, not a remap transaction's (plugins/rate_limit, which links
//! it and answers `traffic_ctl plugin msg` for both).
//!
//! One connection, top to bottom:
//! 1. CLIENT_HELLO ([`Hello::on_client_hello`]): the selector of its SNI
//!    decides (`sni_limit::Selector::admit`). Excluded: the handshake goes
//!    on untouched. Go: the connection keeps its hold (slots) in
//!    per-connection state and the handshake goes on. Refused: the
//!    handshake fails. Wait: the handshake parks (`queue.rs`).
//! 2. Parked: a rate wait is a timer, a slot wait a place in the selector's
//!    FIFO; a connection that closes hands its slot to the oldest parked
//!    handshake at once, which resumes on its own thread. `max-age` (and,
//!    always, Traffic Server's own handshake timeout) fails it.
//! 3. VCONN_CLOSE: the hold drops with the connection's state, freeing its
//!    slots.
//!
//! Reload: `traffic_ctl config reload` or `traffic_ctl plugin msg rate_limit
//! reload` rereads the file; a file that fails any check is refused and the
//! one loaded keeps serving. A selector of the same SNI keeps its live
//! state (open connections, parked handshakes, buckets).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use ats::stats::Stat;
use ats::{ClientHello, ClientHelloHandler, Done, VConnData};
use limits::MonotonicClock;
use optspec::files::FsFiles;
use parking_lot::Mutex;
use sni_limit::{config, Config, Hold, Refusal, Selectors, Verdict};

mod queue;
pub mod show;

use queue::Waiting;

/// The global mode's state, made once by [`init`].
struct Global {
    file: PathBuf,
    loaded: ArcSwap<Loaded>,
    conns: VConnData<ConnHold>,
    /// Serialises reloads' build and swap (`traffic_ctl config reload` and
    /// the `reload` command).
    reloading: Mutex<()>,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

/// One loaded file.
pub struct Loaded {
    selectors: Selectors<Waiting>,
    /// The plugin's side of each selector, by its index.
    sels: Vec<Arc<Sel>>,
}

/// One selector, with its metrics.
pub(crate) struct Sel {
    core: Arc<sni_limit::Selector<Waiting>>,
    metrics: Option<Metrics>,
}

/// `PREFIX.sni.TAG.*`, with a `metrics:` node (as upstream).
#[derive(Clone, Copy)]
pub(crate) struct Metrics {
    // Upstream's four.
    queued: Stat,
    rejected: Stat,
    expired: Stat,
    resumed: Stat,
    // Ours.
    admitted: Stat,
    excluded: Stat,
    abandoned: Stat,
    active: Stat,
    waiting: Stat,
}

impl Metrics {
    fn new(m: &config::MetricsConf) -> Result<Metrics, String> {
        let stat = |s: &str| Stat::find_or_create(&format!("{}.sni.{}.{s}", m.prefix, m.tag));
        Ok(Metrics {
            queued: stat("queued")?,
            rejected: stat("rejected")?,
            expired: stat("expired")?,
            resumed: stat("resumed")?,
            admitted: stat("admitted")?,
            excluded: stat("excluded")?,
            abandoned: stat("abandoned")?,
            active: stat("active")?,
            waiting: stat("waiting")?,
        })
    }
}

impl Sel {
    fn count(&self, pick: impl FnOnce(&Metrics) -> Stat) {
        if let Some(m) = &self.metrics {
            pick(m).inc();
        }
    }

    fn count_up_waiting(&self) {
        self.count(|m| m.waiting);
    }

    fn count_down_waiting(&self) {
        if let Some(m) = &self.metrics {
            m.waiting.dec();
        }
    }

    fn refused(&self, why: Refusal) {
        self.count(|m| match why {
            Refusal::Expired => m.expired,
            _ => m.rejected,
        });
        if log::log_enabled!(log::Level::Debug) {
            log::debug!(
                "global: {}: handshake refused ({})",
                self.core.conf().sni.label(),
                why.word()
            );
        }
    }
}

/// What an admitted connection holds until it closes.
pub(crate) struct ConnHold {
    _hold: Hold<Waiting>,
    active: Option<Stat>,
}

impl ConnHold {
    fn new(hold: Hold<Waiting>, sel: &Sel) -> ConnHold {
        let active = sel.metrics.map(|m| m.active);
        if let Some(a) = active {
            a.inc();
        }
        ConnHold {
            _hold: hold,
            active,
        }
    }
}

impl Drop for ConnHold {
    fn drop(&mut self) {
        if let Some(a) = self.active {
            a.dec();
        }
    }
}

/// Starts the global mode from plugin.config's arguments (none: the line
/// only pins the .so; then `Ok(false)`). An error stops traffic_server.
pub fn init(args: &[&str]) -> Result<bool, String> {
    let file = match args {
        [] => return Ok(false),
        [f] => resolve(f),
        _ => {
            return Err(format!(
                "rate_limit.so takes one argument in plugin.config, its global-mode YAML \
                 file; got {}",
                args.len()
            ))
        }
    };
    if GLOBAL.get().is_some() {
        return Err("rate_limit.so is listed twice with a file in plugin.config".into());
    }
    let config = config::load(&file, &FsFiles)?;
    let loaded = build(&config, metrics(&config)?, None);
    GLOBAL
        .set(Global {
            conns: VConnData::new("rate_limit.conn")?,
            loaded: ArcSwap::from_pointee(loaded),
            file: file.clone(),
            reloading: Mutex::new(()),
        })
        .map_err(|_| "global mode started twice".to_owned())?;
    ats::hook_client_hello("rate_limit", Hello)?;
    ats::mgmt::on_config_reload("rate_limit", &file, || {
        let _ = reload("traffic_ctl config reload");
    })?;
    log::info!("global mode: {}: {}", file.display(), summary(&config));
    for w in &config.warnings {
        log::warn!("global mode: {w}");
    }
    Ok(true)
}

/// A relative file name is in Traffic Server's configuration directory
/// (`join` keeps an absolute one as it is).
fn resolve(f: &str) -> PathBuf {
    ats::config_dir().join(f)
}

fn summary(c: &Config) -> String {
    let names: Vec<String> = c
        .selectors
        .iter()
        .map(|s| limits::quote::quote(s.sni.label()))
        .collect();
    format!(
        "{} selector(s) {}, {} ip-rep, {} list(s)",
        c.selectors.len(),
        limits::quote::shorten(&names.join(", ")),
        c.ip_reps.len(),
        c.lists.len()
    )
}

/// Each selector's metrics, created or found by name (before anything of
/// the running file changes: the one step that can fail).
fn metrics(config: &Config) -> Result<Vec<Option<Metrics>>, String> {
    config
        .selectors
        .iter()
        .map(|s| s.metrics.as_ref().map(Metrics::new).transpose())
        .collect()
}

/// Builds a loaded file from `config` and its metrics, taking over `old`'s
/// live state. No TS call: a reload runs it under its lock.
fn build(config: &Config, metrics: Vec<Option<Metrics>>, old: Option<&Loaded>) -> Loaded {
    let selectors = Selectors::build(config, old.map(|o| &o.selectors), MonotonicClock);
    let sels = selectors
        .all()
        .iter()
        .zip(metrics)
        .map(|(core, metrics)| {
            Arc::new(Sel {
                core: core.clone(),
                metrics,
            })
        })
        .collect();
    Loaded { selectors, sels }
}

/// Rereads the file: the new one serves if it passes every check, else the
/// old one goes on. Returns what happened, as logged.
pub fn reload(why: &str) -> Result<String, String> {
    let g = GLOBAL.get().ok_or_else(|| {
        "global mode is off: list `rate_limit.so FILE.yaml` in plugin.config".to_owned()
    })?;
    let shown = g.file.display();
    let read = config::load(&g.file, &FsFiles).and_then(|c| metrics(&c).map(|m| (c, m)));
    match read {
        Ok((c, m)) => {
            // Only the build from the file in force and the swap are
            // serialised (two reloads must not both build on the same one).
            let one = g.reloading.lock();
            let old = g.loaded.load_full();
            g.loaded.store(Arc::new(build(&c, m, Some(&old))));
            drop(one);
            let msg = format!("global mode: {shown} reloaded ({why}): {}", summary(&c));
            log::info!("{msg}");
            for w in &c.warnings {
                log::warn!("global mode: {w}");
            }
            Ok(msg)
        }
        Err(e) => {
            let msg =
                format!("global mode: {shown}: reload refused, the loaded file keeps serving: {e}");
            log::error!("{msg}");
            Err(msg)
        }
    }
}

/// The file in force (for `show`).
pub(crate) fn loaded() -> Option<(PathBuf, Arc<Loaded>)> {
    let g = GLOBAL.get()?;
    Some((g.file.clone(), g.loaded.load_full()))
}

struct Hello;

impl ClientHelloHandler for Hello {
    fn on_client_hello(&self, hello: ClientHello<'_>) -> Done {
        let Some(g) = GLOBAL.get() else {
            return hello.resume();
        };
        let loaded = g.loaded.load();
        let vc = hello.vconn();
        let Some(sel) = loaded
            .selectors
            .index(vc.sni())
            .and_then(|i| loaded.sels.get(i))
        else {
            return hello.resume();
        };
        match sel.core.admit(vc.client_ip()) {
            Verdict::Excluded => {
                sel.count(|m| m.excluded);
                hello.resume()
            }
            Verdict::Go(hold) => {
                sel.count(|m| m.admitted);
                // A connection already holding state (a second client hello
                // cannot happen) would drop this hold at once.
                let _ = g.conns.set(vc, ConnHold::new(hold, sel));
                hello.resume()
            }
            Verdict::Refuse(why) => {
                sel.refused(why);
                hello.refuse()
            }
            Verdict::Wait(pending) => queue::park(sel.clone(), hello, pending),
        }
    }
}

/// Keeps an admitted connection's hold until it closes (after a wait).
fn keep(vc: ats::VConn<'_>, hold: ConnHold) {
    if let Some(g) = GLOBAL.get() {
        let _ = g.conns.set(vc, hold);
    }
}
