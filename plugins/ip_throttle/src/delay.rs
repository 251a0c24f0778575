//! Delays and ban ends: a delayed transaction is parked on a timer on its
//! own thread (no thread blocks), and each ban arms a timer that logs its
//! `unban` when it expires.

use std::sync::{Arc, Weak};
use std::time::Duration;

use ats::sched::{Pool, Timer};
use ats::{Done, HomeTxn, Parked};
use ip_throttle_core::{Client, Delayed};
use limits::{Nanos, NANOS_PER_MS};
use parking_lot::Mutex;

use crate::rule::Rule;

/// A delay decided in remap.
pub(crate) struct Delay {
    pub(crate) rule: Arc<Rule>,
    pub(crate) delay: Nanos,
    /// Counts the request against `--max-concurrent` while held.
    pub(crate) counted: Delayed,
}

/// Holds a parked transaction for its delay, then lets it go on, unless
/// its client left meanwhile: then it ends there and never reaches the
/// origin. The IP's delay is not changed either way.
pub(crate) fn hold(parked: Parked, w: Delay) {
    let home = parked.home();
    let after = Duration::from_nanos(w.delay);
    // The timer owns the transaction; if it cannot be armed it comes back.
    let cell = Arc::new(Mutex::new(Some((parked, w))));
    let in_timer = cell.clone();
    let armed = Timer::after(after, home, move || {
        if let Some((parked, w)) = in_timer.lock().take() {
            parked.on_home(move |h| release(h, w));
        }
    });
    if let Err(e) = armed {
        log::error!("cannot arm the delay timer ({e}): the request goes on undelayed");
        if let Some((parked, w)) = cell.lock().take() {
            parked.on_home(move |h| release(h, w));
        }
    }
}

/// The delay is over (on the transaction's thread).
fn release(h: HomeTxn<'_>, w: Delay) -> Done {
    let Delay { rule, counted, .. } = w;
    // From here it is no longer delayed: it goes to the origin, or away.
    drop(counted);
    if h.client_gone() {
        rule.report.abandoned();
        // Nobody reads this answer; it ends the transaction without the origin.
        h.txn()
            .set_error_body("Client left during its delay.\n", "text/plain");
        return h.fail(503);
    }
    rule.report.resumed();
    h.resume()
}

/// Logs the `unban` of a ban that ends at `until`, if it still ends then
/// (a request may have seen it end first, or `unban` lifted it). On a net
/// thread (a request arms it: not ET_TASK, see `ats::sched::Pool::Task`);
/// holds the rule weakly, so a reloaded-away rule lets it go.
///
/// ATS runs a timer off its thread's cached clock, which can lag the real
/// one: measured here, a timer fired about 0.5 ms before its time, and one
/// re-armed from inside a timer ran at once, again and again. So a timer
/// within `EARLY` of the ban's end ends it as due; one further off (which
/// ATS should never do) is armed again, a bounded number of times.
pub(crate) fn unban_at(rule: &Arc<Rule>, key: u64, ip: Client, until: Nanos) {
    arm_unban(
        Arc::downgrade(rule),
        rule.throttler.now(),
        key,
        ip,
        until,
        0,
    );
}

const EARLY: Nanos = 20 * NANOS_PER_MS;
const UNBAN_TRIES: u32 = 10;

fn arm_unban(weak: Weak<Rule>, now: Nanos, key: u64, ip: Client, until: Nanos, tries: u32) {
    // ATS schedules in whole milliseconds, cut down: round up and add one.
    let left = until.saturating_sub(now);
    let after = Duration::from_millis(left.div_ceil(NANOS_PER_MS) + 1);
    let again = weak.clone();
    let armed = Timer::after(after, Pool::Net, move || {
        let Some(rule) = weak.upgrade() else { return };
        let now = rule.throttler.now();
        if until.saturating_sub(now) > EARLY {
            // Too early to call it due: wait again, a bounded number of
            // times; past that, the IP's next request ends the ban and logs it.
            if tries < UNBAN_TRIES {
                arm_unban(again, now, key, ip, until, tries + 1);
            }
            return;
        }
        if let Some(e) = rule.throttler.expire_by(key, until) {
            let snap = rule.throttler.snapshot();
            rule.report
                .event(ip, &e, snap.opts.log_events, snap.opts.log_only);
            rule.report.unbanned();
        }
    });
    if let Err(e) = armed {
        log::error!(
            "cannot arm the unban timer ({e}): the unban is logged at the IP's next request"
        );
    }
}
