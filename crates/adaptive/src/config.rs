//! The controller's settings and their defaults. The plugins expose the
//! bounds (`--limit-min`, `--limit-max`); the rest are the algorithm's
//! constants, settable here so tests can shape them.

use std::fmt;

use limits::{Nanos, NANOS_PER_MS, NANOS_PER_SEC};

/// The settings of a [`Controller`](crate::Controller).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// The lowest limit (default 4). Also the concurrency the controller
    /// probes the origin's no-load latency at, and below which a sample counts
    /// as unloaded: set it to what the origin always serves without queueing.
    pub min: u32,
    /// The highest limit (default 1000): a ceiling, should latency never rise.
    pub max: u32,
    /// The limit before anything is measured (default 20, Gradient2's).
    pub initial: u32,
    /// The shortest window (default 100 ms). A window lasts twice the
    /// recent RTT, within `min_window..=max_window`.
    pub min_window: Nanos,
    /// The longest window (default 1 s), unless it lacks samples.
    pub max_window: Nanos,
    /// Outcomes a window needs before it closes (default 10): a window with
    /// fewer goes on until it has them, so a quiet origin updates rarely.
    /// Half as many unloaded samples measure the baseline, twice as many a
    /// probe.
    pub min_samples: u32,
    /// How far one window moves the limit toward the gradient's target
    /// (default 0.2, Gradient2's): 1 jumps, lower smooths outliers.
    pub smoothing: f64,
    /// The share of a window's outcomes that must have failed (in percent,
    /// default 10) to back off.
    pub failure_percent: u32,
    /// What a failing window multiplies the limit by (default 0.8).
    pub backoff: f64,
    /// The longest the no-load latency goes unmeasured before a probe
    /// (default 60 s, Envoy's min-RTT interval); 0: only at start.
    pub probe_interval: Nanos,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min: 4,
            max: 1000,
            initial: 20,
            min_window: 100 * NANOS_PER_MS,
            max_window: NANOS_PER_SEC,
            min_samples: 10,
            smoothing: 0.2,
            failure_percent: 10,
            backoff: 0.8,
            probe_interval: 60 * NANOS_PER_SEC,
        }
    }
}

/// The bounds of a learned limit, as an operator gives them
/// (rate_limit.so's `--limit-min`/`--limit-max`, throttle.so's
/// `max-min`/`max-max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub min: u32,
    pub max: u32,
}

impl Bounds {
    /// The highest bound an operator may give.
    pub const HIGHEST: u32 = 1_000_000;

    /// Either bound may be left out: the default of the one missing
    /// (4 and 1000), moved so as not to contradict the one given (`max`
    /// 2 alone gives 2..=2; `min` 2000 alone 2000..=2000). The caller
    /// refuses `min > max` in its own option names.
    pub fn given(min: Option<u32>, max: Option<u32>) -> Bounds {
        let d = Config::default();
        Bounds {
            min: min.unwrap_or(d.min.min(max.unwrap_or(u32::MAX))),
            max: max.unwrap_or(d.max.max(min.unwrap_or(0))),
        }
    }

    /// The controller's settings for these bounds; `None` if they make
    /// none (0, or `min > max`: refused when parsed).
    pub fn config(&self) -> Option<Config> {
        Config::with_bounds(self.min, self.max).ok()
    }
}

/// What [`Config::check`] refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `min` is 0.
    ZeroMin,
    /// `min` is above `max`.
    MinAboveMax,
    /// `initial` is outside `min..=max`.
    InitialOutOfBounds,
    /// `min_window` is 0 or above `max_window`.
    Windows,
    /// `min_samples` is 0.
    ZeroSamples,
    /// `smoothing` is not in (0, 1], `backoff` not in (0, 1), or
    /// `failure_percent` not in 1..=100.
    Factor,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::ZeroMin => "the smallest limit must be at least 1",
            ConfigError::MinAboveMax => "the smallest limit is above the largest",
            ConfigError::InitialOutOfBounds => "the initial limit is outside the bounds",
            ConfigError::Windows => "the shortest window must be positive and at most the longest",
            ConfigError::ZeroSamples => "a window needs at least one sample",
            ConfigError::Factor => {
                "smoothing must be in (0, 1], backoff in (0, 1), the failure share in 1..=100 %"
            }
        })
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// The default settings with these bounds; `initial` is the default
    /// clamped into them.
    pub fn with_bounds(min: u32, max: u32) -> Result<Config, ConfigError> {
        let d = Config::default();
        let c = Config {
            min,
            max,
            // Not `clamp`, which panics on min > max (refused just below).
            initial: d.initial.max(min).min(max),
            ..d
        };
        c.check().map(|()| c)
    }

    /// Whether the settings make sense; the plugins check before building.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.min == 0 {
            return Err(ConfigError::ZeroMin);
        }
        if self.min > self.max {
            return Err(ConfigError::MinAboveMax);
        }
        if !(self.min..=self.max).contains(&self.initial) {
            return Err(ConfigError::InitialOutOfBounds);
        }
        if self.min_window == 0 || self.min_window > self.max_window {
            return Err(ConfigError::Windows);
        }
        if self.min_samples == 0 {
            return Err(ConfigError::ZeroSamples);
        }
        let factors = self.smoothing > 0.0
            && self.smoothing <= 1.0
            && self.backoff > 0.0
            && self.backoff < 1.0
            && (1..=100).contains(&self.failure_percent);
        if !factors {
            return Err(ConfigError::Factor);
        }
        Ok(())
    }

    /// The settings made usable whatever they were (the controller never
    /// panics on a bad one): each out-of-range value replaced or clamped.
    pub(crate) fn normalized(self) -> Config {
        let d = Config::default();
        let min = self.min.max(1);
        let max = self.max.max(min);
        let min_window = if self.min_window == 0 {
            d.min_window
        } else {
            self.min_window
        };
        Config {
            min,
            max,
            initial: self.initial.clamp(min, max),
            min_window,
            max_window: self.max_window.max(min_window),
            min_samples: self.min_samples.max(1),
            smoothing: if self.smoothing > 0.0 && self.smoothing <= 1.0 {
                self.smoothing
            } else {
                d.smoothing
            },
            failure_percent: self.failure_percent.clamp(1, 100),
            backoff: if self.backoff > 0.0 && self.backoff < 1.0 {
                self.backoff
            } else {
                d.backoff
            },
            probe_interval: self.probe_interval,
        }
    }

    /// Unloaded samples a window needs to measure the no-load latency.
    pub(crate) fn unloaded_samples(&self) -> u32 {
        (self.min_samples / 2).max(1)
    }

    /// Unloaded samples a probe gathers (after its drain) to measure it.
    pub(crate) fn probe_samples(&self) -> u32 {
        self.min_samples.saturating_mul(2)
    }
}

#[cfg(test)]
mod tests;
