//! A rule of ip_throttle.so as loaded (`Rule`: its throttler, reporter,
//! options for a reload and, with `--store`, its store), what the
//! management commands do to it, the process-wide objects (`Globals`,
//! created once in `init`) and the per-transaction state they hold. A
//! transaction's path through it is `lib.rs`.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use ats::sched::Periodic;
use ats::{HomeTxn, HookCont, HookId, RemapArgs, Txn, TxnData};
use ip_throttle_core::{Client, ListName, Options, Snapshot, Throttler, ToStep, View};
use limits::MonotonicClock;
use optspec::files::FsFiles;
use parking_lot::Mutex;

use crate::delay::Delay;
use crate::report::{self, Metrics, Reporter};
use crate::shared::{self, Store};

/// Process-wide objects, created once in `init`.
pub(crate) struct Globals {
    pub(crate) hooks: HookCont,
    pub(crate) txn: TxnData<TxnState>,
}

pub(crate) static GLOBALS: OnceLock<Globals> = OnceLock::new();

/// One remap rule.
pub struct Rule {
    pub(crate) throttler: Arc<Throttler<MonotonicClock>>,
    pub(crate) report: Reporter,
    /// The rule's from-URL (a name for the management commands).
    pub(crate) from: String,
    /// The rule's `@pparam`s and ATS's config dir, to build a new
    /// configuration on a reload.
    args: Vec<String>,
    config_dir: PathBuf,
    /// With `--store`: where the IP's state machine runs.
    pub(crate) store: Option<Arc<Store>>,
    /// Publishes the keys gauge and evicted counter every second.
    _table_metrics: Option<Periodic>,
}

/// Per-transaction state, dropped at TXN_CLOSE.
pub(crate) struct TxnState {
    /// Set in remap for a delayed request; taken at POST_REMAP. If never
    /// taken, dropping it stops counting the request as delayed.
    pub(crate) wait: Mutex<Option<Delay>>,
    /// With `--store`: the step to run on the shared record, set in remap
    /// and taken at POST_REMAP.
    pub(crate) asked: Mutex<Option<(Arc<Rule>, ToStep)>>,
}

impl TxnState {
    pub(crate) fn waiting(w: Delay) -> TxnState {
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
    pub(crate) fn new(args: &RemapArgs<'_>) -> Result<Rule, String> {
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
}
