//! Gauges read from one shared source (a learned limit's controller),
//! published once per source and metric name however many owners ask: the rules of a
//! group sharing a tag, or a reload's new rule beside the old one while
//! both live. Gauges are published as deltas ([`publish_deltas`]), so two
//! publishers of one source under one name would add up.

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{publish_deltas, Stat};
use crate::sched::Periodic;

/// A gauge: its full metric name and how to read it from the source
/// (`None`: nothing to publish now).
pub type Gauge<S> = (String, Box<dyn Fn(&S) -> Option<i64> + Send + Sync>);

/// The publishing tasks of one source's gauges; they stop with the last
/// owner's handle.
pub struct SharedGauges {
    _tasks: Vec<Periodic>,
}

/// A live set: its source (weakly: a source freed and another allocated
/// at its address must not match) and the first gauge's name.
struct Entry {
    source: Weak<dyn Any + Send + Sync>,
    name: String,
    gauges: Weak<SharedGauges>,
}

static LIVE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Publishes `gauges` of `source` every `every`, unless they are published
/// already for this source under the same first name: then that set's
/// handle. A gauge whose metric cannot be created is logged and left out.
pub fn shared_gauges<S: Send + Sync + 'static>(
    source: &Arc<S>,
    gauges: Vec<Gauge<S>>,
    every: Duration,
) -> Arc<SharedGauges> {
    let name = gauges.first().map(|g| g.0.clone()).unwrap_or_default();
    let any: Arc<dyn Any + Send + Sync> = source.clone();
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|e| e.gauges.strong_count() > 0);
    // Compared weakly: the Weak keeps the allocation, so no other source
    // can have its address, and no source's drop runs under the lock.
    let weak = Arc::downgrade(&any);
    let same = |e: &&Entry| e.name == name && Weak::ptr_eq(&e.source, &weak);
    if let Some(g) = live.iter().find(same).and_then(|e| e.gauges.upgrade()) {
        return g;
    }
    let tasks = gauges
        .into_iter()
        .filter_map(|(name, value)| {
            let stat = Stat::find_or_create(&name)
                .map_err(|e| crate::log::error(&e))
                .ok()?;
            let s = Arc::downgrade(source);
            let read = move || value(&*s.upgrade()?).map(|v| (v, 0));
            publish_deltas(every, Some(stat), None, read)
                .map_err(|e| crate::log::error(&format!("cannot start the metric {name}: {e}")))
                .ok()
        })
        .collect();
    let g = Arc::new(SharedGauges { _tasks: tasks });
    live.push(Entry {
        source: weak,
        name,
        gauges: Arc::downgrade(&g),
    });
    g
}
