//! ip_throttle.so: Perlbal::Plugin::Throttle for Traffic Server. Per client
//! IP: delays that double while it keeps coming too fast, bans, at most
//! `--max-concurrent` delayed requests, allow and deny lists.
//!
//! One transaction, top to bottom:
//! 1. `do_remap`: the client (the connection's, or the PROXY protocol
//!    source; behind `--trusted-proxies`, the address they forward for),
//!    then the decision
//!    ([`Throttler::decide`](ip_throttle_core::Throttler::decide): lists,
//!    ban, scope, the IP's state machine), its events to `ip_throttle.log`
//!    and its metrics. Pass: nothing more. Forbid (403) / TooMany (503):
//!    the status is set in remap, so ATS answers with its error page and
//!    never contacts the origin. Delay: the wait is stored with the
//!    transaction and POST_REMAP is hooked.
//! 2. POST_REMAP: park the transaction on a timer on its own thread
//!    ([`delay::hold`]); no thread blocks. When it fires: if the client left,
//!    the request ends there (never reaching the origin); otherwise it goes
//!    on. Either way it stops counting against `--max-concurrent`.
//! 3. SEND_RESPONSE_HDR (503 only): the reason phrase `Too many connections`.
//! 4. TXN_CLOSE: the transaction's state is dropped; a request still
//!    counted as delayed (it never reached POST_REMAP, or `--log-only`)
//!    stops counting.
//!
//! Beside the remap path: `rule.rs` is a rule as loaded, with what the
//! management commands do to it, the process-wide objects and the
//! per-transaction state; `delay.rs` holds delays and logs ban ends,
//! `shared.rs` runs the step on the shared record (`--store`), `report.rs`
//! writes the metrics and `ip_throttle.log`, and [`ctl`] answers the
//! management commands (`traffic_ctl plugin msg ip_throttle`).
#![forbid(unsafe_code)]

mod ctl;
mod delay;
mod report;
mod rule;
mod shared;

use std::sync::Arc;

use ats::{
    Done, Hook, HookCont, HookHandler, HookId, ReloadStatus, RemapArgs, RemapPlugin, RemapRequest,
    RemapStatus, Txn, TxnData,
};
use ip_throttle_core::{Action, Client, Machine, Request, Scope};
use parking_lot::Mutex;

use crate::delay::Delay;
use crate::rule::{too_many, Globals, Rule, TxnState, GLOBALS};

impl Rule {
    /// Answers the request per the decision's action.
    fn apply(
        self: &Arc<Self>,
        g: &Globals,
        txn: Txn<'_>,
        ip: Client,
        d: ip_throttle_core::Decision,
    ) {
        if let Some(until) = d.banned_until {
            delay::unban_at(self, d.key, ip, until);
        }
        match d.action {
            Action::Pass => {
                // --log-only: a would-be-delayed request counts against
                // --max-concurrent until it completes.
                if let Some(counted) = d.delayed {
                    let _ = g.txn.set(
                        txn,
                        TxnState::waiting(Delay {
                            rule: self.clone(),
                            delay: 0,
                            counted,
                        }),
                    );
                }
            }
            Action::Delay(delay) => {
                let Some(counted) = d.delayed else { return };
                let state = TxnState::waiting(Delay {
                    rule: self.clone(),
                    delay,
                    counted,
                });
                if g.txn.set(txn, state).is_ok() {
                    txn.hook(HookId::PostRemap, &g.hooks);
                } else {
                    log::error!("ip_throttle.so is listed twice on one remap rule: only the first instance throttles it");
                }
            }
            Action::Forbid => txn.set_status(403),
            Action::TooMany => {
                txn.set_status(503);
                too_many(txn);
            }
        }
    }
}

impl RemapPlugin for Rule {
    const NAME: &'static str = "ip_throttle";

    fn init() -> Result<(), String> {
        if GLOBALS.get().is_none() {
            let g = Globals {
                hooks: HookCont::new(Hooks)?,
                txn: TxnData::new("ip_throttle")?,
            };
            let _ = GLOBALS.set(g);
            ctl::init();
        }
        Ok(())
    }

    fn new_instance(args: &RemapArgs<'_>) -> Result<Self, String> {
        Rule::new(args)
    }

    fn created(rule: &Arc<Self>) {
        ctl::enlist(rule);
    }

    fn pre_reload() {
        ctl::pre_reload();
    }

    fn post_reload(status: ReloadStatus) {
        ctl::post_reload(status);
    }

    fn do_remap(self: &Arc<Self>, txn: Txn<'_>, req: &mut RemapRequest<'_>) -> RemapStatus {
        let Some(g) = GLOBALS.get() else {
            return RemapStatus::NoRemap;
        };
        if txn.is_internal() {
            return RemapStatus::NoRemap;
        }
        // The connection's client (a PROXY protocol source counts), then,
        // if that is a trusted proxy, the client it forwards for (unknown
        // if it names none).
        let Some(remote) = txn.connection_client_ip() else {
            return RemapStatus::NoRemap;
        };
        let hdr = req.request_header();
        let ip = self
            .throttler
            .client_ip(remote, |name| hdr.as_ref()?.joined(name));
        // Read only what the scope regexes need (each read copies).
        let (need_method, need_path) = self.throttler.scope_needs();
        let method = match (&hdr, need_method) {
            (Some(h), true) => h.method(),
            _ => Vec::new(),
        };
        let path = match (&hdr, need_path) {
            (Some(h), true) => {
                let mut p = b"/".to_vec();
                p.extend(h.url_path().unwrap_or_default());
                p
            }
            _ => Vec::new(),
        };
        drop(hdr);
        let req = Request {
            client: ip,
            method: &method,
            path: &path,
        };
        let d = match self.throttler.scope(&req) {
            Scope::Decided(d) => d,
            // With a store the step runs on the shared record, from POST_REMAP.
            Scope::Machine(m) if self.store.is_some() => {
                let st = TxnState {
                    wait: Mutex::new(None),
                    asked: Mutex::new(Some((self.clone(), m))),
                };
                if g.txn.set(txn, st).is_ok() {
                    txn.hook(HookId::PostRemap, &g.hooks);
                    return RemapStatus::NoRemap;
                }
                log::error!("ip_throttle.so is listed twice on one remap rule: only the first instance throttles it");
                return RemapStatus::NoRemap;
            }
            Scope::Machine(m) => self.throttler.step(m, Machine::Local),
        };
        self.report.decision(ip, &d);
        self.apply(g, txn, ip, d);
        RemapStatus::NoRemap
    }
}

struct Hooks;

impl HookHandler for Hooks {
    fn on_txn(&self, hook: Hook<'_>) -> Done {
        match hook.id() {
            HookId::PostRemap => {
                let st = GLOBALS.get().and_then(|g| g.txn.get(hook.txn()));
                if let Some((rule, m)) = st.and_then(|st| st.asked.lock().take()) {
                    return hook.park(move |parked| shared::ask(rule, parked, m));
                }
                let wait = st.and_then(|st| st.wait.lock().take());
                match wait {
                    Some(w) if w.delay > 0 => hook.park(move |parked| delay::hold(parked, w)),
                    _ => hook.resume(),
                }
            }
            HookId::SendResponseHdr => {
                if let Some(mut resp) = hook.txn().client_response() {
                    if resp.status() == 503 {
                        resp.set_reason("Too many connections");
                    }
                }
                hook.resume()
            }
            _ => hook.resume(),
        }
    }
}

ats::remap_plugin!(Rule);
