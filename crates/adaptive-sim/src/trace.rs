//! A run of the model as a time series: what `ats-bench plots` draws and
//! what the simulation tests judge ([`settle`]).

use limits::Nanos;

use crate::{secs, Sim};

/// The trace's resolution: the simulation tests have always looked at the
/// limit every 100 ms.
pub const STEP: Nanos = 100 * limits::NANOS_PER_MS;

/// The state at the end of one [`STEP`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Simulated time since the start.
    pub t: Nanos,
    /// The learned limit.
    pub limit: u32,
    /// The most requests in flight at the origin during the step.
    pub inflight: usize,
    /// Measuring the no-load latency: the limit is the minimum on purpose.
    pub probing: bool,
}

/// Runs `sim` to `end` in [`STEP`]s, a sample at the end of each. Takes the
/// origin's peak each step ([`Sim::take_peak`]).
pub fn trace(sim: &mut Sim, end: Nanos) -> Vec<Sample> {
    let mut out = Vec::new();
    while sim.elapsed() < end {
        let t = sim.elapsed() + STEP;
        sim.run_to(t);
        let s = sim.state();
        out.push(Sample {
            t,
            limit: s.limit,
            inflight: sim.take_peak(),
            probing: s.probing,
        });
    }
    out
}

/// The first time from which the limit stayed within `lo..=hi` to the end
/// of `samples`, probe samples (the minimum on purpose) skipped; `None` if
/// the last one is outside.
pub fn settled(samples: &[Sample], lo: f64, hi: f64) -> Option<Nanos> {
    let mut since = None;
    for s in samples.iter().filter(|s| !s.probing) {
        match ((lo..=hi).contains(&f64::from(s.limit)), since) {
            (true, None) => since = Some(s.t),
            (false, _) => since = None,
            _ => {}
        }
    }
    since
}

/// Runs `sim` to `end` and returns when the limit settled within `lo..=hi`
/// ([`settled`]) and the range it took in the last 10 s (its steady state;
/// probe samples skipped).
pub fn settle(sim: &mut Sim, lo: f64, hi: f64, end: Nanos) -> (Option<Nanos>, (u32, u32)) {
    let samples = trace(sim, end);
    let last = samples
        .iter()
        .filter(|s| !s.probing && s.t + secs(10) > end)
        .fold((u32::MAX, 0), |(low, high), s| {
            (low.min(s.limit), high.max(s.limit))
        });
    (settled(&samples, lo, hi), last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ms;
    use adaptive::Config;

    #[test]
    fn a_trace_has_a_sample_per_step_and_settle_reads_it() {
        let mut sim = Sim::new(Config::default(), 8, ms(10));
        sim.set_clients(32);
        let samples = trace(&mut sim, secs(2));
        assert_eq!(samples.len(), 20);
        assert_eq!(samples.last().map(|s| s.t), Some(secs(2)));
        let at = |t, limit| Sample {
            t,
            limit,
            inflight: 0,
            probing: false,
        };
        let probe = Sample {
            probing: true,
            ..at(300, 4)
        };
        let run = [at(100, 5), at(200, 20), probe, at(400, 12), at(500, 10)];
        assert_eq!(settled(&run, 10.0, 15.0), Some(400));
        assert_eq!(settled(&run[..2], 10.0, 15.0), None);
    }
}
