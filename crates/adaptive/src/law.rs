//! The control law: what one closed window does to the limit. Pure state,
//! no atomics and no clock (the controller passes `now`), so each rule of
//! the crate doc is a unit test here.

use limits::Nanos;

use crate::config::Config;
use crate::window::Stats;

/// Gradient2's floor on the gradient: one window's target is at least half
/// the limit, so an outlier window cannot collapse it.
const MIN_GRADIENT: f64 = 0.5;

/// Windows a probe lasts at most without its unloaded samples (then it
/// gives up and keeps what it has); the first one is its drain.
const PROBE_WINDOWS: u32 = 5;

/// The queue the origin may hold at the limit's equilibrium: Gradient2's
/// square root of the limit, at most a quarter of it, so a small origin's
/// queue stays short (its latency there at most 4/3 of the no-load one).
pub(crate) fn queue_allowance(limit: f64) -> f64 {
    limit.sqrt().min(limit / 4.0)
}

/// The limit held at the origin's minimum concurrency while its no-load
/// latency is measured.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Probe {
    /// The limit to go back to.
    restore: f64,
    windows: u32,
    /// The unloaded samples after its drain.
    sum: u64,
    count: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Law {
    /// The learned limit, fractional so small steps add up.
    estimate: f64,
    /// The long-term (no-load) RTT, measured from unloaded samples and
    /// lowered by faster loaded windows (see `measure`). `None` until
    /// measured.
    baseline: Option<Nanos>,
    /// The last window's average RTT.
    recent: Option<Nanos>,
    /// Set by the operator (`set TAG limit=N`); learning pauses.
    pinned: Option<u32>,
    probe: Option<Probe>,
    /// When the baseline was last measured unloaded (or the start).
    measured_at: Nanos,
    windows: u64,
}

impl Law {
    pub fn new(cfg: &Config, now: Nanos) -> Law {
        Law {
            estimate: f64::from(cfg.initial),
            baseline: None,
            recent: None,
            pinned: None,
            probe: None,
            measured_at: now,
            windows: 0,
        }
    }

    /// The limit in force: the pinned one, the minimum while probing, else
    /// the estimate rounded down.
    pub fn limit(&self, cfg: &Config) -> u32 {
        match (self.pinned, self.probe) {
            (Some(pinned), _) => pinned,
            (None, Some(_)) => cfg.min,
            (None, None) => floor(self.estimate, cfg),
        }
    }

    /// The next window's length: twice the recent RTT (so most of its
    /// samples were sent under the limit it judges), within the bounds.
    pub fn window(&self, cfg: &Config) -> Nanos {
        self.recent
            .map_or(cfg.min_window, |r| r.saturating_mul(2))
            .clamp(cfg.min_window, cfg.max_window)
    }

    pub fn baseline(&self) -> Option<Nanos> {
        self.baseline
    }

    pub fn recent(&self) -> Option<Nanos> {
        self.recent
    }

    pub fn probing(&self) -> bool {
        self.probe.is_some()
    }

    pub fn pinned(&self) -> Option<u32> {
        self.pinned
    }

    pub fn windows(&self) -> u64 {
        self.windows
    }

    /// Pins the limit at `Some(n)` (at least 1, outside the bounds if the
    /// operator says so), or releases it (`None`): learning resumes from
    /// the pinned value, clamped into the bounds.
    pub fn pin(&mut self, limit: Option<u32>, cfg: &Config) {
        match limit {
            Some(n) => {
                self.pinned = Some(n.max(1));
                self.probe = None;
            }
            None => {
                if let Some(n) = self.pinned.take() {
                    self.set(f64::from(n), cfg);
                }
            }
        }
    }

    /// One window's update, from its samples.
    pub fn close(&mut self, cfg: &Config, w: &Stats, now: Nanos) {
        self.windows += 1;
        let mean = w.mean();
        if mean.is_some() {
            self.recent = mean;
        }
        if let Some(probe) = &mut self.probe {
            // Its first window holds the drain: the unloaded samples that
            // ended in it are the short ones, not a fair measure.
            if probe.windows > 0 {
                probe.sum = probe.sum.saturating_add(w.unloaded_sum);
                probe.count = probe.count.saturating_add(w.unloaded);
            }
            probe.windows += 1;
            if probe.count >= cfg.probe_samples() || probe.windows >= PROBE_WINDOWS {
                // Measured, or given up with what there is (this window's
                // RTT if nothing); no new probe for an interval.
                let measured = (probe.count > 0).then(|| probe.sum / u64::from(probe.count));
                self.baseline = match (self.baseline, measured) {
                    (Some(b), Some(u)) => Some(halfway(b, u)),
                    (b, u) => u.or(b).or(mean),
                };
                self.measured_at = now;
                self.estimate = probe.restore;
                self.probe = None;
            }
            return;
        }
        let unloaded = if w.unloaded >= cfg.unloaded_samples() {
            w.unloaded_mean()
        } else {
            None
        };
        self.measure(unloaded, mean, now);
        if self.pinned.is_some() {
            return;
        }
        if w.failing(cfg.failure_percent) {
            // At most once per window, from the concurrency in use.
            let used = self.estimate.min(f64::from(w.max_inflight.max(cfg.min)));
            self.set(used * cfg.backoff, cfg);
            return;
        }
        let (Some(m), Some(b)) = (mean, self.baseline) else {
            // No baseline yet (this window was loaded): measure it first.
            self.start_probe();
            return;
        };
        if cfg.probe_interval > 0 && now.saturating_sub(self.measured_at) >= cfg.probe_interval {
            self.start_probe();
            return;
        }
        self.step(cfg, b, m, w.max_inflight, w.enforced);
    }

    /// The baseline outside probes: the first unloaded measurement, then
    /// halfway to each new one (a window's few samples are noisy, so are a
    /// probe's); else a loaded window's RTT when that is lower: the origin
    /// got faster, and an origin is never faster loaded than idle. (Moving
    /// only part way there would let the limit grow and the loaded RTT
    /// rise to meet a baseline still too high.)
    fn measure(&mut self, unloaded: Option<Nanos>, mean: Option<Nanos>, now: Nanos) {
        match (unloaded, self.baseline, mean) {
            (Some(u), b, _) => {
                self.baseline = Some(b.map_or(u, |b| halfway(b, u)));
                self.measured_at = now;
            }
            (None, Some(b), Some(m)) if m < b => self.baseline = Some(m),
            _ => {}
        }
    }

    /// Gradient2's update, given the baseline, the window's RTT, the most
    /// in flight it saw and the lowest limit the places enforced.
    fn step(
        &mut self,
        cfg: &Config,
        baseline: Nanos,
        rtt: Nanos,
        max_inflight: u32,
        enforced: Option<u32>,
    ) {
        // Precision: RTTs up to MAX_RTT (6e11 ns) are exact in an f64.
        let gradient = (baseline as f64 / rtt as f64).clamp(MIN_GRADIENT, 1.0);
        let limit = self.estimate;
        let used = f64::from(max_inflight);
        let s = cfg.smoothing;
        // Application-limited: the demand, not the limit, set the latency.
        // Against the limit the places enforced: while a raise ramps up
        // (after a probe), the ramp, not the demand, held the use down.
        let enforced = enforced.map_or(limit, |e| limit.min(f64::from(e)));
        let app_limited = used < enforced / 2.0;
        let next = if gradient < 1.0 {
            // Queueing. A limit above what was in use protects nothing, so
            // the gradient applies to the concurrency used (give or take
            // the fraction the slots rounded down).
            let base = limit.min((used + 1.0).max(f64::from(cfg.min)));
            base * (1.0 - s) + (base * gradient + queue_allowance(base)) * s
        } else if app_limited {
            // Idle: drift down toward twice the demand, so a burst after a
            // quiet spell does not meet a limit nothing ever tested.
            limit - s * (limit - 2.0 * used)
        } else {
            // No queueing at the limit: grow, at least one a window.
            limit + (s * limit.sqrt()).max(1.0)
        };
        self.set(if app_limited { next.min(limit) } else { next }, cfg);
    }

    fn start_probe(&mut self) {
        self.probe = Some(Probe {
            restore: self.estimate,
            windows: 0,
            sum: 0,
            count: 0,
        });
    }

    fn set(&mut self, estimate: f64, cfg: &Config) {
        self.estimate = estimate.clamp(f64::from(cfg.min), f64::from(cfg.max));
    }
}

/// Halfway from the baseline `b` to a new measurement `u`.
fn halfway(b: Nanos, u: Nanos) -> Nanos {
    (b / 2 + u / 2).max(1)
}

/// The estimate as a limit: rounded down, within the bounds.
fn floor(estimate: f64, cfg: &Config) -> u32 {
    // `as` saturates (NaN to 0), and the clamp keeps the bounds.
    (estimate.floor() as u32).clamp(cfg.min, cfg.max)
}

#[cfg(test)]
mod tests;
