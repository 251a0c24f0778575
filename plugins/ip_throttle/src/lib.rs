//! ip_throttle.so: Perlbal::Plugin::Throttle for Traffic Server. Per client
//! IP: delays that double while it keeps coming too fast, bans, at most
//! `--max-concurrent` delayed requests, allow and deny lists.
//!
//! One transaction, top to bottom:
//! 1. `do_remap`: the client (the connection's, or the PROXY protocol
//!    source; behind `--trusted-proxies`, the address they forward for),
//!    then the decision ([`Throttler::decide`]: lists, ban, scope,
//!    the IP's state machine), its events to `ip_throttle.log` and its
//!    metrics. Pass: nothing more. Forbid (403) / TooMany (503): the status
//!    is set in remap, so ATS answers with its error page and never
//!    contacts the origin. Delay: the wait is stored with the transaction
//!    and POST_REMAP is hooked.
//! 2. POST_REMAP: park the transaction on a timer on its own thread
//!    ([`delay::hold`]); no thread blocks. When it fires: if the client left,
//!    the request ends there (never reaching the origin); otherwise it goes
//!    on. Either way it stops counting against `--max-concurrent`.
//! 3. SEND_RESPONSE_HDR (503 only): the reason phrase `Too many connections`.
//! 4. TXN_CLOSE: the transaction's state is dropped; a request still
//!    counted as delayed (it never reached POST_REMAP, or `--log-only`)
//!    stops counting.
//!
//! Management commands (`traffic_ctl plugin msg ip_throttle`): [`ctl`].
#![forbid(unsafe_code)]

mod ctl;
mod delay;
mod report;
mod shared;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use ats::sched::Periodic;
use ats::{
    Done, HomeTxn, Hook, HookCont, HookHandler, HookId, ReloadStatus, RemapArgs, RemapPlugin,
    RemapRequest, RemapStatus, Txn, TxnData,
};
use ip_throttle_core::{
    Action, Client, ListName, Machine, Options, Request, Scope, Snapshot, Throttler, ToStep, View,
};
use limits::MonotonicClock;
use optspec::files::FsFiles;
use parking_lot::Mutex;

use crate::delay::Delay;
use crate::report::{Metrics, Reporter};
use crate::shared::Store;

/// Process-wide objects, created once in `init`.
struct Globals {
    hooks: HookCont,
    txn: TxnData<TxnState>,
}

static GLOBALS: OnceLock<Globals> = OnceLock::new();

/// One remap rule.
pub struct Rule {
    throttler: Arc<Throttler<MonotonicClock>>,
    report: Reporter,
    /// The rule's from-URL (a name for the management commands).
    from: String,
    /// The rule's `@pparam`s and ATS's config dir, to build a new
    /// configuration on a reload.
    args: Vec<String>,
    config_dir: PathBuf,
    /// With `--store`: where the IP's state machine runs.
    store: Option<Arc<Store>>,
    /// Publishes the keys gauge and evicted counter every second.
    _table_metrics: Option<Periodic>,
}

/// Per-transaction state, dropped at TXN_CLOSE.
struct TxnState {
    /// Set in remap for a delayed request; taken at POST_REMAP. If never
    /// taken, dropping it stops counting the request as delayed.
    wait: Mutex<Option<Delay>>,
    /// With `--store`: the step to run on the shared record, set in remap
    /// and taken at POST_REMAP.
    asked: Mutex<Option<(Arc<Rule>, ToStep)>>,
}

impl TxnState {
    fn waiting(w: Delay) -> TxnState {
        TxnState {
            wait: Mutex::new(Some(w)),
            asked: Mutex::new(None),
        }
    }
}

/// The transaction's state, on its own thread while it is parked.
pub(crate) fn state<'h>(h: &'h HomeTxn<'_>) -> Option<&'h TxnState> {
    GLOBALS.get()?.txn.get(h.txn())
}

/// A 503 for `--max-concurrent` gets the reason phrase `Too many connections`.
pub(crate) fn too_many(txn: Txn<'_>) {
    if let Some(g) = GLOBALS.get() {
        txn.hook(HookId::SendResponseHdr, &g.hooks);
    }
}

impl Rule {
    fn new(args: &RemapArgs<'_>) -> Result<Rule, String> {
        let config_dir = ats::config_dir();
        let opts = Options::parse(args.options(), &config_dir, &FsFiles)?;
        let snapshot = Snapshot::load(opts, &FsFiles)?;
        let tag = metric_tag::from_url(args.from_url).unwrap_or_else(|| "rule".into());
        let metrics = Metrics::new(&tag, snapshot.opts.store.is_some());
        let report = Reporter::new(tag, metrics)?;
        log::info!(
            "{}: {}; allow list {} prefixes, deny list {} prefixes",
            args.from_url,
            snapshot.opts.describe(),
            snapshot.lists.allow.len(),
            snapshot.lists.deny.len()
        );
        let store = Store::for_rule(&snapshot.opts)?;
        let throttler = Arc::new(Throttler::new(snapshot, MonotonicClock));
        Ok(Rule {
            store,
            _table_metrics: report::table_metrics(&throttler, &metrics),
            throttler,
            args: args.options().iter().map(|s| s.to_string()).collect(),
            from: args.from_url.to_owned(),
            config_dir,
            report,
        })
    }

    /// Its tag (`http.example.com`: ip_throttle.log's `rule=`, metric names).
    pub(crate) fn tag(&self) -> &str {
        self.report.tag()
    }

    /// Whether `name` names this rule: its tag, from-URL or `--instance`.
    pub(crate) fn named(&self, name: &str) -> bool {
        self.tag() == name || self.from == name || self.throttler.snapshot().opts.instance == name
    }

    /// Whether the rule has that list file configured.
    pub(crate) fn has_list(&self, which: ListName) -> bool {
        let o = &self.throttler.snapshot().opts;
        match which {
            ListName::Allow => o.allow_file.is_some(),
            ListName::Deny => o.deny_file.is_some(),
        }
    }

    /// Re-reads the rule's options (and `--config` file) and both lists,
    /// and swaps them in; per-IP state is kept. Blocking file I/O: call it
    /// on a task thread (the `reload config` management command).
    pub(crate) fn reload_config(&self) -> Result<(), String> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let opts = Options::parse(&args, &self.config_dir, &FsFiles)?;
        if !Store::same(&self.store, &opts) {
            return Err(
                "--store and --store-timeout cannot change on a reload; reload remap.config instead"
                    .into(),
            );
        }
        self.throttler.reload(opts, &FsFiles)
    }

    /// Re-reads one list file and swaps it in (`reload allow|deny`); the
    /// number of prefixes. Blocking file I/O: on a task thread.
    pub(crate) fn reload_list(&self, which: ListName) -> Result<usize, String> {
        self.throttler.reload_list(which, &FsFiles)
    }

    /// Lifts a ban now (`unban IP`), logging the `unban` event.
    pub(crate) fn unban(self: &Arc<Self>, ip: Client) -> bool {
        shared::unban(self, ip);
        match self.throttler.unban(ip) {
            Some(e) => {
                let log = self.throttler.snapshot();
                self.report
                    .event(ip, &e, log.opts.log_events, log.opts.log_only);
                self.report.unbanned();
                true
            }
            None => false,
        }
    }

    /// The IP's state (`show IP`); `None`: not tracked, i.e. allowed.
    pub(crate) fn show(&self, ip: Client) -> Option<View> {
        self.throttler.show(ip)
    }

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
