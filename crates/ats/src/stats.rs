//! Plugin metrics (`TSStat*`), visible in `traffic_ctl metric match <prefix>`.
//!
//! ATS keeps per-thread sums for these, so increments are cheap and
//! lock-free. A gauge (current value) is kept as a SUM of +1/-1 steps rather
//! than with `TSStatIntSet`, whose value a later per-thread sync overwrites.
//!
//! Update metrics only on ATS threads (hooks, timers, `Periodic`): in 9.2 an
//! increment writes to the calling EThread's slot and crashes on a thread
//! ATS did not create. A plugin-owned thread (a UDP listener, say) hands
//! its counts to a `Periodic` instead.

mod shared;

pub use shared::{shared_gauges, Gauge, SharedGauges};

use std::ffi::c_int;

use crate::{log::to_cstring, sys};

/// How many metrics the version's table holds, for the error when it is full.
#[cfg(ats_9)]
const TABLE: &str =
    "ATS 9.2 holds about 1400 plugin metrics; traffic_server --maxRecords raises it";
#[cfg(ats_10)]
const TABLE: &str = "ATS 10 holds 8 388 608 metrics in all, its own included";

/// A registered integer metric.
#[derive(Clone, Copy, Debug)]
pub struct Stat(c_int);

impl Stat {
    /// Finds the metric `name` or creates it (non-persistent, summed over threads).
    /// Several rules may share a name; they then share the metric.
    pub fn find_or_create(name: &str) -> Result<Stat, String> {
        let cname = to_cstring(name);
        let mut id: c_int = -1;
        // SAFETY: valid C string and out pointer.
        if unsafe { sys::TSStatFindName(cname.as_ptr(), &mut id) } == sys::TSReturnCode::TS_SUCCESS
            && id >= 0
        {
            return Ok(Stat(id));
        }
        // SAFETY: valid C string; enum values from the headers.
        let id = unsafe {
            sys::TSStatCreate(
                cname.as_ptr(),
                sys::TSRecordDataType::TS_RECORDDATATYPE_INT,
                sys::TSStatPersistence::TS_STAT_NON_PERSISTENT,
                sys::TSStatSync::TS_STAT_SYNC_SUM,
            )
        };
        if id < 0 {
            Err(format!(
                "cannot create metric {name}: the plugin metric table is full ({TABLE})"
            ))
        } else {
            Ok(Stat(id))
        }
    }

    pub fn add(self, n: i64) {
        // SAFETY: id from TSStatCreate/TSStatFindName.
        unsafe { sys::TSStatIntIncrement(self.0, n) }
    }

    pub fn sub(self, n: i64) {
        // SAFETY: id from TSStatCreate/TSStatFindName.
        unsafe { sys::TSStatIntDecrement(self.0, n) }
    }

    pub fn inc(self) {
        self.add(1)
    }

    pub fn dec(self) {
        self.sub(1)
    }

    /// Current value (sum over threads as of the last sync).
    pub fn get(self) -> i64 {
        // SAFETY: id from TSStatCreate/TSStatFindName.
        unsafe { sys::TSStatIntGet(self.0) }
    }
}

/// Publishes what `read` returns, a level and a running count, into a
/// gauge and a counter every `every`, on a task thread. As deltas: rules may
/// share a metric name, so each adds only what changed since its last look.
/// `read` returns `None` once its source is gone (e.g. a reloaded-away
/// rule's table, held weakly). Dropping the returned task stops it; the
/// publisher then adds what the count gained since its last look and takes
/// its share back out of the gauge.
pub fn publish_deltas<F>(
    every: std::time::Duration,
    gauge: Option<Stat>,
    counter: Option<Stat>,
    read: F,
) -> Result<crate::sched::Periodic, String>
where
    F: Fn() -> Option<(i64, u64)> + Send + Sync + 'static,
{
    let p = Publisher {
        gauge,
        counter,
        read,
        last: std::sync::Mutex::new((0, 0)),
    };
    crate::sched::Periodic::start(every, crate::sched::Pool::Task, move || p.tick())
}

/// A publisher's share of a gauge and a counter. Owned by its periodic
/// task's closure, so it is dropped on a task thread, under the guard.
struct Publisher<F: Fn() -> Option<(i64, u64)>> {
    gauge: Option<Stat>,
    counter: Option<Stat>,
    read: F,
    last: std::sync::Mutex<(i64, u64)>,
}

impl<F: Fn() -> Option<(i64, u64)>> Publisher<F> {
    fn tick(&self) {
        let Some((level, count)) = (self.read)() else {
            return;
        };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        // An idle source costs no TS call.
        if let Some(g) = self.gauge.filter(|_| level != last.0) {
            g.add(level - last.0);
        }
        if let Some(c) = self.counter.filter(|_| count != last.1) {
            c.add(count.saturating_sub(last.1) as i64);
        }
        *last = (level, count);
    }
}

impl<F: Fn() -> Option<(i64, u64)>> Drop for Publisher<F> {
    fn drop(&mut self) {
        // Dropped by its task on a task thread; if the task never started,
        // possibly elsewhere: 9.2's stats must not be changed off ATS threads.
        if crate::EventThread::current().is_none() {
            return;
        }
        self.tick();
        if let Some(g) = self.gauge {
            let last = self.last.get_mut().unwrap_or_else(|e| e.into_inner());
            if last.0 != 0 {
                g.add(-last.0);
            }
        }
    }
}
