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
use rate_limit_core::{Limiter, Limits, Options, Shaped};

use crate::central::rule_store::RuleStore;
use crate::metrics::Metrics;
use crate::queue::Queued;
use crate::rule::{Rule, REGISTRY};
use crate::state::SlotRelease;
use crate::{exchange, metrics, refusals};

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
            let limiter = reg.join(&id, &opts, from, |o| {
                Limiter::for_options(o, MonotonicClock)
            })?;
            // Under the registry lock: no live `set` between the two reads.
            let policy = opts
                .ratelimit_headers
                .then(|| {
                    rate_limit_core::headers::Policy::new(&Limits::of(&opts), limiter.changes())
                })
                .flatten();
            (limiter, place > 1, followed, policy)
        };
        // What the peer exchange and the store's syncer see of the limiter.
        let member: Weak<dyn Member> = Arc::downgrade(&limiter) as Weak<Limiter<Queued>>;
        let peers = exchange::join(&opts, member.clone())?;
        let m = Metrics::new(&opts);
        let store = RuleStore::new(&opts, limiter.id(), member)?;
        let live = Arc::new(metrics::Live::new(&m));
        let refusals = refusals::Refusals::new(&opts)?;
        // Used where an admitted request keeps only its rule-wide slot
        // (lib.rs): not with `--fair` (a flow's slot), Redis deciding
        // (`--store` without `--store-sync`), `--conntrack` (the session
        // keeps it) or a response to see.
        let exact_store = opts.store.as_ref().is_some_and(|s| s.sync_ms.is_none());
        let release = match limiter.slots() {
            Some(slots)
                if matches!(limiter.shaped(), Shaped::Rule(_))
                    && !exact_store
                    && !opts.conntrack
                    && !opts.ratelimit_headers
                    && opts.count_status.is_none() =>
            {
                Some(ats::CloseHook::new(SlotRelease::new(
                    slots.clone(),
                    live.clone(),
                    limiter.is_auto().then(|| limiter.clone()),
                ))?)
            }
            _ => None,
        };
        // `--limit=auto`: requests whose slot is kept in their state are
        // sampled by a hook of their own (the others by `release`).
        let sampler = match limiter.is_auto() {
            true => Some(ats::CloseHook::new(crate::state::Sampler::new(
                limiter.clone(),
            ))?),
            false => None,
        };
        let auto_metrics = crate::auto::publish(&opts, &limiter);
        let bare = release.is_some()
            && matches!(limiter.shaped(), Shaped::Rule(_))
            && opts.rate.is_none()
            && opts.exempt.is_none()
            && opts.store.is_none()
            && !chained;
        Ok(Rule {
            release,
            sampler,
            _auto_metrics: auto_metrics,
            bare,
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
    for (level, msg) in changes.iter().filter_map(Change::message) {
        log::log!(level, "{msg}");
    }
}
