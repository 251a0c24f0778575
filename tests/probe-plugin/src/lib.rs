//! probe.so: a test-only remap plugin. Each request's path selects what the
//! safe layer is made to do, so integration tests can prove its guarantees
//! inside a real traffic_server:
//!
//! - `/panic/remap`: DoRemap panics → 500, traffic_server keeps running.
//! - `/panic/hook`: a POST_REMAP hook handler panics → 500.
//! - `/panic/close`: a TXN_CLOSE hook panics after the response was sent.
//! - `/park/<ms>`: the request is parked at POST_REMAP and resumed by a timer.
//! - `/cancel/<ms>`: parked, a timer is armed then cancelled, and the
//!   transaction resumed right away (the cancelled task must never run).
//! - anything else: passes through; the response carries
//!   `X-Probe-Txn-State: <id>` read back from per-transaction state.
//!
//! Options: `--tag=<text>` (echoed in a response header), `--log` (write a
//! line per request to probe.log). Any other option fails the rule.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ats::sched::{Pool, Timer};
use ats::stats::Stat;
use ats::textlog::TextLog;
use ats::{
    Done, Hook, HookCont, HookHandler, HookId, RemapArgs, RemapPlugin, RemapRequest, RemapStatus,
    Txn, TxnSlot,
};

struct Probe {
    tag: String,
    log: bool,
}

/// What a request asked for, kept in per-transaction state.
struct State {
    action: Action,
    tag: String,
    seq: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Action {
    Pass,
    PanicHook,
    PanicClose,
    Park(u64),
    Cancel(u64),
}

struct Globals {
    cont: HookCont,
    state: TxnSlot<State>,
    requests: Stat,
    cancelled_ran: Stat,
    log: TextLog,
}

static GLOBALS: OnceLock<Globals> = OnceLock::new();
static SEQ: AtomicU64 = AtomicU64::new(0);

fn globals() -> &'static Globals {
    GLOBALS
        .get()
        .expect("TSRemapInit ran before any instance exists")
}

impl RemapPlugin for Probe {
    const NAME: &'static str = "probe";

    fn init() -> Result<(), String> {
        let g = Globals {
            cont: HookCont::new(Hooks)?,
            state: TxnSlot::new("probe")?,
            requests: Stat::find_or_create("plugin.probe.requests")?,
            cancelled_ran: Stat::find_or_create("plugin.probe.cancelled_timer_ran")?,
            log: TextLog::create("probe", true)?,
        };
        let _ = GLOBALS.set(g);
        Ok(())
    }

    fn new_instance(args: &RemapArgs<'_>) -> Result<Self, String> {
        let mut probe = Probe {
            tag: String::new(),
            log: false,
        };
        for opt in args.options() {
            if let Some(tag) = opt.strip_prefix("--tag=") {
                probe.tag = tag.to_owned();
            } else if *opt == "--log" {
                probe.log = true;
            } else {
                return Err(format!(
                    "unknown option '{opt}' (allowed: --tag=<text>, --log)"
                ));
            }
        }
        log::info!(
            "probe rule {} -> {} tag={:?}",
            args.from_url,
            args.to_url,
            probe.tag
        );
        Ok(probe)
    }

    fn do_remap(self: &Arc<Self>, txn: Txn<'_>, req: &mut RemapRequest<'_>) -> RemapStatus {
        let g = globals();
        g.requests.inc();
        let path = req
            .request_header()
            .and_then(|h| {
                h.url_path()
                    .map(|p| String::from_utf8_lossy(&p).into_owned())
            })
            .unwrap_or_default();
        if self.log {
            g.log.write(&format!("probe path=/{path}"));
        }
        let action = match path.split('/').collect::<Vec<_>>().as_slice() {
            ["panic", "remap", ..] => panic!("probe: deliberate panic in DoRemap"),
            ["panic", "hook", ..] => Action::PanicHook,
            ["panic", "close", ..] => Action::PanicClose,
            ["park", ms, ..] => Action::Park(ms.parse().unwrap_or(10)),
            ["cancel", ms, ..] => Action::Cancel(ms.parse().unwrap_or(10)),
            _ => Action::Pass,
        };
        // Hooks run in the order they were added: the panicking TXN_CLOSE hook
        // must come before the slot's reaper, which drops the state.
        if action == Action::PanicClose {
            txn.hook(HookId::TxnClose, &g.cont);
        }
        let state = State {
            action,
            tag: self.tag.clone(),
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
        };
        if g.state.set(txn, state).is_err() {
            log::warn!("probe state already set on this transaction");
        }
        txn.hook(HookId::PostRemap, &g.cont);
        txn.hook(HookId::SendResponseHdr, &g.cont);
        RemapStatus::NoRemap
    }
}

struct Hooks;

impl HookHandler for Hooks {
    fn on_txn(&self, hook: Hook<'_>) -> Done {
        let g = globals();
        let txn = hook.txn();
        let Some(state) = g.state.get(txn) else {
            return hook.resume();
        };
        match (hook.id(), state.action) {
            (HookId::PostRemap, Action::PanicHook) => panic!("probe: deliberate panic in a hook"),
            (HookId::PostRemap, Action::Park(ms)) => hook.park(|parked| {
                let armed = Timer::after(Duration::from_millis(ms), Pool::Net, move || {
                    parked.resume()
                });
                if let Err(e) = armed {
                    log::error!("cannot arm timer: {e}");
                }
            }),
            (HookId::PostRemap, Action::Cancel(ms)) => {
                let cancelled_ran = g.cancelled_ran;
                match Timer::after(Duration::from_millis(ms), Pool::Net, move || {
                    cancelled_ran.inc()
                }) {
                    Ok(timer) if timer.cancel() => hook.resume(),
                    Ok(_) => hook.error(502),
                    Err(e) => {
                        log::error!("cannot arm timer: {e}");
                        hook.error(502)
                    }
                }
            }
            (HookId::SendResponseHdr, _) => {
                if let Some(mut resp) = txn.client_response() {
                    resp.set("X-Probe-Txn-State", &state.seq.to_string());
                    if !state.tag.is_empty() {
                        resp.set("X-Probe-Tag", &state.tag);
                    }
                }
                hook.resume()
            }
            (HookId::TxnClose, Action::PanicClose) => {
                panic!("probe: deliberate panic at TXN_CLOSE")
            }
            _ => hook.resume(),
        }
    }
}

ats::remap_plugin!(Probe);
