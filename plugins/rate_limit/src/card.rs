//! What `traffic_ctl plugin msg rate_limit` shows of each rule: its card,
//! held by the rule and listed weakly for `show` and `top` (ctl.rs).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ats::msg::Roster;
use parking_lot::Mutex;
use rate_limit_core::key::KeySpec;
use rate_limit_core::Options;

use crate::metrics::Metrics;

/// What `show` and `top` tell about one rule. Held by the rule; listed
/// weakly here, so a rule gone with a reload drops out.
pub(crate) struct Card {
    pub(crate) from: String,
    pub(crate) metrics_name: String,
    pub(crate) metrics: Metrics,
    /// Its limiter's (`Limiter::id`), which `show` lists it under.
    pub(crate) limiter_id: u64,
    key: Option<KeySpec>,
    /// Readable names of keys seen waiting or refused, for `top` (the key
    /// table keeps only hashes). Bounded; filled only when uncontended.
    names: Mutex<Names>,
    /// The rule's dry run: `--dry-run`, then `set … dry_run=on|off`.
    pub(crate) dry_run: std::sync::atomic::AtomicBool,
    /// The share of clients refused for real: `--enforce`, then `set …
    /// enforce=N`.
    pub(crate) enforce: std::sync::atomic::AtomicU8,
}

/// Every live rule's card (weakly: a rule gone with a reload drops out).
pub(crate) static CARDS: Roster<Card> = Roster::new();

/// Most key names a rule remembers for `top`.
const NAMES: usize = 1024;

#[derive(Default)]
struct Names {
    by_key: HashMap<u64, String>,
    order: VecDeque<u64>,
}

impl Card {
    pub(crate) fn new(from: &str, o: &Options, limiter_id: u64, metrics: Metrics) -> Arc<Card> {
        let card = Arc::new(Card {
            from: from.to_owned(),
            metrics_name: format!("{}.remap.{}", o.prefix, o.metric_tag),
            metrics,
            limiter_id,
            key: o.key.clone(),
            names: Mutex::new(Names::default()),
            dry_run: std::sync::atomic::AtomicBool::new(o.dry_run),
            enforce: std::sync::atomic::AtomicU8::new(o.enforce),
        });
        CARDS.enlist(&card);
        card
    }

    /// Remembers how to show `key` (written as `bytes` by `--key`). Called
    /// for waiting and refused requests only, and skipped under contention.
    pub(crate) fn note_name(&self, key: u64, bytes: &[u8]) {
        self.note(key, |spec| spec.display(bytes));
    }

    /// [`Card::note_name`] for a peered rule, whose table is keyed by the
    /// peer tag (`tag`): shown as its key would be.
    pub(crate) fn note_tag_name(&self, key: u64, tag: &[u8]) {
        self.note(key, |spec| rate_limit_core::peering::tag_name(spec, tag));
    }

    fn note(&self, key: u64, name: impl FnOnce(&rate_limit_core::key::KeySpec) -> String) {
        let Some(spec) = &self.key else { return };
        let Some(mut n) = self.names.try_lock() else {
            return;
        };
        if n.by_key.contains_key(&key) {
            return;
        }
        if n.order.len() >= NAMES {
            if let Some(old) = n.order.pop_front() {
                n.by_key.remove(&old);
            }
        }
        n.order.push_back(key);
        n.by_key.insert(key, name(spec));
    }

    pub(crate) fn name(&self, key: u64) -> Option<String> {
        self.names.lock().by_key.get(&key).cloned()
    }

    /// Named `name`: by from-URL, metric name or metric tag.
    pub(crate) fn named(&self, name: &str) -> bool {
        self.from == name
            || self.metrics_name == name
            || self
                .metrics_name
                .strip_suffix(name)
                .is_some_and(|s| s.ends_with(".remap."))
    }
}
