//! A rule's making and its reloads: its options parsed, its limiter joined
//! in the registry (its group's, or carried over a reload, or new), its
//! metrics tasks; and the registry's commit when remap.config has loaded.
//! Runs on ATS's configuration thread, never on a request's path.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};

use ats::{ReloadStatus, RemapArgs};
use limits::MonotonicClock;
use rate_limit_core::peering::exchange::Member;
use rate_limit_core::registry::{Change, Registry};
use rate_limit_core::{Limiter, Limits, Options};

use crate::central::rule_store::RuleStore;
use crate::metrics::Metrics;
use crate::queue::Queued;
use crate::rule::{Rule, REGISTRY};
use crate::{central, exchange, metrics, refusals};

impl Rule {
    pub(crate) fn new(args: &RemapArgs<'_>) -> Result<Rule, String> {
        let mut opts = Options::parse(args.from_url, args.options()).map_err(|e| e.to_string())?;
        if let Some(f) = opts.fair.as_mut() {
            rate_limit_core::fair::load_weights(f, &ats::config_dir())
                .map_err(|e| e.to_string())?;
        }
        let (from, to) = (args.from_url, args.to_url);
        let (limiter, chained, followed, policy) = {
            let mut reg = REGISTRY.lock();
            let place = reg.place(from, to);
            let followed = reg.followed(from, to);
            let id = Registry::<Limiter<Queued>>::identity(&opts, from, to, place);
            let limiter = reg.join(&id, &opts, from, new_limiter)?;
            // Under the registry lock: no live `set` between the two reads.
            let policy = opts
                .ratelimit_headers
                .then(|| {
                    rate_limit_core::headers::Policy::new(&Limits::of(&opts), limiter.changes())
                })
                .flatten();
            (limiter, place > 1, followed, policy)
        };
        let peers = exchange::join(&opts, &limiter)?;
        let m = Metrics::new(&opts);
        let member: Weak<dyn Member> = Arc::downgrade(&limiter) as Weak<Limiter<Queued>>;
        let store = RuleStore::new(&opts, member)?;
        let live = Arc::new(metrics::Live::new(&m));
        let refusals = refusals::Refusals::new(&opts)?;
        Ok(Rule {
            refusals,
            store,
            live,
            _key_metrics: metrics::keys(&limiter, &m),
            _fair_metrics: metrics::fair(&limiter, &m),
            card: crate::card::Card::new(from, &opts, limiter.id(), m),
            metrics: m,
            shaped: limiter.shaped(),
            chained,
            followed,
            policy,
            opts,
            watching: AtomicBool::new(false),
            _peers: peers,
        })
    }
}

/// remap.config finished loading: on success the registry commits (live
/// limiters take the new values, or start anew where state cannot follow);
/// on failure the old configuration keeps serving.
pub(crate) fn commit(status: ReloadStatus) {
    let mut reg = REGISTRY.lock();
    if status == ReloadStatus::Failed {
        reg.abort();
        return;
    }
    // Raising a limit admits waiters here: their resumption is scheduled
    // on their own threads, so holding the registry lock is brief.
    let changes = reg.commit(|limiter, o| {
        if let Err(option) = limiter.reconfigure(Limits::of(o)) {
            log::error!("cannot change {option} of a live limiter; restart to apply it");
        }
        if let Some(f) = &o.fair {
            limiter.set_fair(f);
        }
    });
    for c in changes {
        match c {
            Change::Created {
                id,
                restarted: Some(option),
            } => log::warn!(
                "{id}: --{option} changed, which live state cannot follow: its slots, \
                 waiters and buckets start anew (the old rules keep theirs until they end)"
            ),
            Change::Created { .. } => {}
            Change::Changed {
                id,
                values,
                overrode_live,
            } => {
                let list: Vec<String> = values
                    .iter()
                    .map(|(name, old, new)| format!("--{name} {old} -> {new}"))
                    .collect();
                let why = if overrode_live {
                    " (remap.config overrides the values set live by traffic_ctl plugin msg)"
                } else {
                    ""
                };
                log::info!("{id}: applied live: {}{why}", list.join(", "));
            }
        }
    }
}

/// Builds the limiter a rule's options describe (the registry calls it when
/// no live one fits).
pub(crate) fn new_limiter(o: &Options) -> Arc<Limiter<Queued>> {
    let limiter = build_limiter(o);
    if o.count_status.is_some() {
        limiter.set_charge_on_response();
    }
    limiter
}

fn build_limiter(o: &Options) -> Arc<Limiter<Queued>> {
    let limits = Limits::of(o);
    if let Some(f) = &o.fair {
        return Limiter::fair(limits, f, MonotonicClock);
    }
    match o.key {
        // --store-sync exchanges counts as peers do (central/sync.rs).
        Some(_) if o.peer.is_some() || o.store.as_ref().is_some_and(|s| s.sync_ms.is_some()) => {
            let report_tags = o
                .peer
                .as_ref()
                .map_or(central::sync::MAX_KEYS_PER_SYNC, |p| p.max_tags);
            Limiter::peered(limits, o.keys, report_tags, MonotonicClock)
        }
        Some(_) => Limiter::keyed(limits, o.keys, MonotonicClock),
        None => Limiter::new(limits, MonotonicClock),
    }
}
