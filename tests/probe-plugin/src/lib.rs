//! probe.so: a test-only remap plugin (its process-wide objects are
//! `globals.rs`; one arm of one hook handler per path below, checked best
//! against this list in one file). Each request's path selects what the
//! safe layer is made to do, so integration tests can prove its guarantees
//! inside a real traffic_server:
//!
//! - `/panic/remap`: DoRemap panics → 500, traffic_server keeps running.
//! - `/panic/hook`: a POST_REMAP hook handler panics → 500.
//! - `/panic/close`: a TXN_CLOSE hook panics after the response was sent.
//! - `/park/<ms>`: the request is parked at POST_REMAP and resumed by a timer.
//! - `/cancel/<ms>`: parked, a timer is armed then cancelled, and the
//!   transaction resumed right away (the cancelled task must never run).
//! - `/panic/parked`: parked, then a task-thread timer panics while holding
//!   the parked token: the transaction must be failed safe (500) after the
//!   guard stopped the unwind, never during it.
//! - `/home/net/<ms>`, `/home/task/<ms>`: parked, resumed by a timer on a
//!   net (any) or task thread through `Parked::on_home`, which changes the
//!   transaction (a request header) and resumes it.
//! - `/home/handoff`: a one-slot gate: the holder's TXN_CLOSE hands the
//!   slot to the oldest parked request, resumed through `on_home` from
//!   whichever thread closed the holder.
//!
//!   For `/home/...` the response carries `X-Probe-Home: on|off` (was the
//!   transaction changed on the thread it parked on, as recorded by the
//!   probe itself) and `X-Probe-Initiated: home|foreign` (where the resume
//!   was started); the counters `plugin.probe.off_home_mutations` and
//!   `plugin.probe.foreign_resumes` sum them.
//! - anything else: passes through.
//!
//! Every response (of a request whose state was stored) carries, read back
//! from per-transaction state: `X-Probe-Txn-State: <id>` (a number unique
//! to the transaction), `X-Probe-Mark: <mark>` if the request sent the
//! header `X-Probe-Mark` (echoed, so a client can tell its own transaction's
//! state from another's), and `X-Probe-States-Live: <n>`, how many
//! transactions had state stored in the slot when the response went out.
//! The gauge `plugin.probe.txn_states_live` counts stored states that were
//! not dropped yet (0 once every one was reaped at TXN_CLOSE); the counter
//! `plugin.probe.txn_states_stored`, bumped after the gauge, counts every
//! state stored (a witness for the gauge: see `wait_metrics_after` in the
//! test harness).
//!
//! Options: `--tag=<text>` (echoed in a response header), `--log` (write a
//! line per request to probe.log), `--slot-table-bits=<0..=20>` (the
//! probe's `TxnData` is made with `TxnData::with_table_bits("probe", N)`:
//! on Traffic Server 10 a table of 2^N buckets of 4, so with 0 a fifth open
//! transaction spills to the user argument; ignored by the slot on 9.2).
//! The slot and the probe's other globals are created once, by the first
//! probe rule ATS loads (the first in remap.config at startup), so
//! `--slot-table-bits` only takes effect on that rule; a later rule (or a
//! reload) that asks for a table other than the one in effect is refused.
//! Any other option fails the rule.
#![forbid(unsafe_code)]

mod globals;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ats::sched::{Pool, Timer};
use ats::{
    Done, EventThread, HomeTxn, Hook, HookHandler, HookId, Parked, RemapArgs, RemapPlugin,
    RemapRequest, RemapStatus, Txn,
};

use crate::globals::{
    globals, init_globals, parse_table_bits, Globals, GLOBALS, LIVE, MAX_TABLE_BITS, SEQ,
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
    /// The request's `X-Probe-Mark` ("" if none), echoed in the response.
    mark: String,
    /// Counted in the live states (set once the slot holds it).
    counted: AtomicBool,
    /// For `/home/...`: 0 not resumed yet, 1 changed on its home thread, 2 off it.
    home: AtomicU8,
    /// For `/home/...`: 1 resume started on the home thread, 2 elsewhere.
    initiated: AtomicU8,
    /// The thread the transaction parked on, to compare with the thread its
    /// later hooks run on (the transaction's own, whatever the safe layer
    /// recorded).
    parked_on: Mutex<Option<EventThread>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Action {
    Pass,
    PanicHook,
    PanicClose,
    PanicParked,
    PanicParkedHome,
    Park(u64),
    Cancel(u64),
    HomeNet(u64),
    HomeTask(u64),
    HomeHandoff,
}

/// The `/home/handoff` gate: whether its one slot is held, and who waits.
static GATE: Mutex<(bool, VecDeque<Waiting>)> = Mutex::new((false, VecDeque::new()));

/// A parked request and the thread it parked on, as the probe saw it.
struct Waiting {
    parked: Parked,
    home: Option<EventThread>,
}

impl State {
    /// Counts the state as live once the slot holds it; the counter, a
    /// witness for the gauge, comes after the gauge.
    fn count_stored(&self, g: &Globals) {
        self.counted.store(true, Ordering::Relaxed);
        LIVE.fetch_add(1, Ordering::Relaxed);
        g.states_live.inc();
        g.states_stored.inc();
    }
}

impl Drop for State {
    fn drop(&mut self) {
        if *self.counted.get_mut() {
            LIVE.fetch_sub(1, Ordering::Relaxed);
            if let Some(g) = GLOBALS.get() {
                g.states_live.dec();
            }
        }
    }
}

impl RemapPlugin for Probe {
    const NAME: &'static str = "probe";

    fn new_instance(args: &RemapArgs<'_>) -> Result<Self, String> {
        let mut probe = Probe {
            tag: String::new(),
            log: false,
        };
        let mut table_bits = None;
        for opt in args.options() {
            if let Some(tag) = opt.strip_prefix("--tag=") {
                probe.tag = tag.to_owned();
            } else if *opt == "--log" {
                probe.log = true;
            } else if let Some(v) = opt.strip_prefix("--slot-table-bits=") {
                table_bits = Some(parse_table_bits(v)?);
            } else {
                return Err(format!(
                    "unknown option '{opt}' (allowed: --tag=<text>, --log), \
                     or on the first probe rule --slot-table-bits=<0..={MAX_TABLE_BITS}>"
                ));
            }
        }
        init_globals(table_bits)?;
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
            if let Err(e) = g.log.write(&format!("probe path=/{path}")) {
                log::error!("probe.log: {e}");
            }
        }
        let action = match path.split('/').collect::<Vec<_>>().as_slice() {
            ["panic", "remap", ..] => panic!("probe: deliberate panic in DoRemap"),
            ["panic", "hook", ..] => Action::PanicHook,
            ["panic", "close", ..] => Action::PanicClose,
            ["panic", "parked", "home", ..] => Action::PanicParkedHome,
            ["panic", "parked", ..] => Action::PanicParked,
            ["park", ms, ..] => Action::Park(ms.parse().unwrap_or(10)),
            ["cancel", ms, ..] => Action::Cancel(ms.parse().unwrap_or(10)),
            ["home", "net", ms, ..] => Action::HomeNet(ms.parse().unwrap_or(1)),
            ["home", "task", ms, ..] => Action::HomeTask(ms.parse().unwrap_or(1)),
            ["home", "handoff", ..] => Action::HomeHandoff,
            _ => Action::Pass,
        };
        // Hooks run in the order they were added: the panicking TXN_CLOSE hook
        // must come before the slot's reaper, which drops the state.
        if matches!(action, Action::PanicClose | Action::HomeHandoff) {
            txn.hook(HookId::TxnClose, &g.cont);
        }
        let mark = req
            .request_header()
            .and_then(|h| h.get("X-Probe-Mark"))
            .map(|m| String::from_utf8_lossy(&m).into_owned())
            .unwrap_or_default();
        let state = State {
            action,
            tag: self.tag.clone(),
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
            mark,
            counted: AtomicBool::new(false),
            home: AtomicU8::new(0),
            initiated: AtomicU8::new(0),
            parked_on: Mutex::new(None),
        };
        match g.state.set(txn, state) {
            Ok(stored) => stored.count_stored(g),
            Err(_) => log::warn!("probe state already set on this transaction"),
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
                    parked.on_home(|h| h.resume())
                });
                if let Err(e) = armed {
                    log::error!("cannot arm timer: {e}");
                }
            }),
            (HookId::PostRemap, Action::PanicParked | Action::PanicParkedHome) => {
                let home_thread = state.action == Action::PanicParkedHome;
                hook.park(move |parked| {
                    let task = move || {
                        let _held = parked;
                        panic!("probe: deliberate panic holding a parked transaction");
                    };
                    // On a task thread, or on the transaction's own thread,
                    // where a fail-safe run during the unwind would run inline.
                    let armed = match home_thread {
                        false => Timer::after(Duration::from_millis(5), Pool::Task, task),
                        true => Timer::after(Duration::from_millis(5), home_of_hook(), task),
                    };
                    if let Err(e) = armed {
                        log::error!("cannot arm timer: {e}");
                    }
                })
            }
            (HookId::PostRemap, Action::HomeNet(ms) | Action::HomeTask(ms)) => {
                let pool = match state.action {
                    Action::HomeTask(_) => Pool::Task,
                    _ => Pool::Net,
                };
                *state.parked_on.lock().unwrap_or_else(|e| e.into_inner()) = EventThread::current();
                hook.park(|parked| {
                    let home = EventThread::current();
                    let armed = Timer::after(Duration::from_millis(ms), pool, move || {
                        resume_home(Waiting { parked, home })
                    });
                    if let Err(e) = armed {
                        log::error!("cannot arm timer: {e}");
                    }
                })
            }
            (HookId::PostRemap, Action::HomeHandoff) => {
                let mut gate = GATE.lock().unwrap_or_else(|e| e.into_inner());
                if !gate.0 {
                    gate.0 = true;
                    drop(gate);
                    return hook.resume();
                }
                *state.parked_on.lock().unwrap_or_else(|e| e.into_inner()) = EventThread::current();
                hook.park(move |parked| {
                    let home = EventThread::current();
                    gate.1.push_back(Waiting { parked, home });
                })
            }
            (HookId::TxnClose, Action::HomeHandoff) => {
                // Only a holder's close hands the slot on (a parked request
                // cannot close before it is resumed as the next holder).
                let next = {
                    let mut gate = GATE.lock().unwrap_or_else(|e| e.into_inner());
                    let next = gate.1.pop_front();
                    if next.is_none() {
                        gate.0 = false;
                    }
                    next
                };
                if let Some(w) = next {
                    resume_home(w);
                }
                hook.resume()
            }
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
                    if !state.mark.is_empty() {
                        resp.set("X-Probe-Mark", &state.mark);
                    }
                    let live = LIVE.load(Ordering::Relaxed);
                    resp.set("X-Probe-States-Live", &live.to_string());
                    let home = match state.home.load(Ordering::Acquire) {
                        1 => Some("on"),
                        2 => Some("off"),
                        _ => None,
                    };
                    let initiated = match state.initiated.load(Ordering::Acquire) {
                        1 => Some("home"),
                        2 => Some("foreign"),
                        _ => None,
                    };
                    if let Some(v) = home {
                        resp.set("X-Probe-Home", v);
                    }
                    if let Some(v) = initiated {
                        resp.set("X-Probe-Initiated", v);
                    }
                    // Where it parked against where its own hooks run now.
                    let parked_on = *state.parked_on.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(t) = parked_on {
                        let same = Some(t) == EventThread::current();
                        resp.set("X-Probe-Same-Thread", if same { "yes" } else { "no" });
                    }
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

/// Where a hook runs: the transaction's own thread (a pool if, impossibly,
/// not on an event thread).
fn home_of_hook() -> ats::sched::Target {
    match EventThread::current() {
        Some(t) => t.into(),
        None => Pool::Net.into(),
    }
}

/// Resumes a parked request through `on_home`, recording (in its state and
/// the counters) whether the change to the transaction happened on the
/// thread it parked on, and whether the resume started elsewhere.
fn resume_home(w: Waiting) {
    let started_home = EventThread::current() == w.home;
    let home = w.home;
    w.parked.on_home(move |h: HomeTxn<'_>| {
        let g = globals();
        let on_home = EventThread::current() == home;
        if !on_home {
            g.off_home.inc();
        }
        if !started_home {
            g.foreign.inc();
        }
        if let Some(mut req) = h.txn().client_request() {
            req.append("X-Probe-Home", if on_home { "on" } else { "off" });
        }
        if let Some(st) = g.state.get(h.txn()) {
            st.home
                .store(if on_home { 1 } else { 2 }, Ordering::Release);
            st.initiated
                .store(if started_home { 1 } else { 2 }, Ordering::Release);
        }
        h.resume()
    });
}

ats::remap_plugin!(Probe);
