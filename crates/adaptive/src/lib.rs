//! An adaptive concurrency limit, in pure Rust: the limit an origin can take
//! learned from its measured latency (issue 34: rate_limit.so's
//! `--limit=auto`, throttle.so's `max:auto`).
//!
//! Nothing here touches the TS API: time is injected ([`limits::Clock`]),
//! and the limit learned is a number the plugin applies to its own slots
//! (`limits::Slots::set_limit`). Tests drive it with a manual clock and a
//! model origin (crates/adaptive-sim: `tests/sim/`, and the convergence
//! plots of `ats-bench plots`).
//!
//! - [`Controller`]: records samples, closes windows, holds the limit.
//! - [`Config`]: bounds and constants, with documented defaults.
//! - [`Outcome`]: what one origin transaction taught.
//!
//! # The algorithm
//!
//! Netflix's Gradient2 ([concurrency-limits]) drives the limit; the no-load
//! latency it compares with is measured the way Envoy's
//! [adaptive_concurrency] does, at low concurrency, but only when needed.
//!
//! Samples are gathered in windows of twice the recent RTT (100 ms to 1 s,
//! and at least `min_samples` = 10 outcomes). At each window's close, with
//! `b` the baseline (no-load) RTT, `r` the window's average RTT, `L` the
//! limit, `s` the smoothing (0.2):
//!
//! - **Queueing** (`r > b`): `g = max(0.5, b / r)`, and
//!   `L ← (1 − s)·L + s·(g·L + q(L))`, Gradient2's smoothed gradient with a
//!   queue allowance `q(L) = min(√L, L/4)`. `L` there is first lowered to
//!   the most in flight the window saw: a limit above what is used protects
//!   nothing. The limit settles where the origin holds `q(L)` queued:
//!   `L = C + q(L)` for an origin of capacity `C` (at most 4/3·C).
//! - **No queueing** (`r ≤ b`): the limit grows by `max(1, s·√L)`.
//! - **Application-limited** (the window's most in flight below `L/2`): no
//!   growth, and the limit drifts toward twice the demand (the idea of TCP's
//!   cwnd validation, RFC 7661).
//! - **Failing** (at least 10 % of the window's outcomes failed): `L ← 0.8·L`
//!   (`L` lowered to the most in flight first, as above), once per window,
//!   and nothing else that window.
//! - Always within `[min, max]` (default 4 and 1000, starting at 20), unless
//!   pinned ([`Controller::pin`]).
//!
//! **The baseline** is measured from *unloaded* samples: at most `min`
//! requests in flight when sent and when answered, the origin's no-load
//! latency if it can take `min` at once. A window with at least 5 of them
//! sets it (the first time) or moves it halfway to their average (a few
//! samples are noisy). It is never above a loaded window's average (the
//! origin got faster). A **probe** measures it when there is none (the
//! start) and when none came for `probe_interval` (60 s): the limit drops
//! to `min`; after one window for the drain (its unloaded samples are the
//! short ones that ended first), it gathers 20 unloaded samples (at most 5
//! windows in all), and the limit goes back to what it was. During a
//! probe, an answer counts as unloaded only if its request was sent after
//! the probe started (now − RTT): the slowest of the crowd it drains end
//! with few in flight, but were sent into the load.
//!
//! # Why Gradient2, and why not its baseline
//!
//! Envoy's controller re-measures the minimum RTT every minute by dropping
//! every host to a handful of requests, whatever the traffic: a throughput
//! dip and a queue at every interval, on every healthy origin; and it
//! compares a minimum with a percentile, which needs a buffer to tune.
//! Gradient2 learns continuously from averages (less biased than a minimum
//! by a lucky fast request), and its smoothing and gradient floor damp
//! outliers.
//!
//! But Gradient2's baseline, an exponential average of the RTT itself,
//! learns loaded latency as normal. Under a sustained overload it drifts up
//! toward the recent RTT, the gradient returns to 1 and the queue allowance
//! makes the limit climb (the discussion of [concurrency-limits#134],
//! [failsafe-go#127]); an RTT that is always the client's timeout looks
//! like a steady origin, and the limit grows to its maximum
//! ([concurrency-limits#137]). And a controller that starts saturated (at
//! its maximum, or with more clients than the origin takes) never sees the
//! no-load latency at all, so nothing ever tells it to come down.
//!
//! A latency measured at low concurrency cannot drift, and is free whenever
//! traffic is light; the probe (which Netflix's first Gradient limiter had,
//! and Envoy keeps) is kept for when nothing else measures it, so a busy
//! origin pays one short dip a minute at most and a quiet one none.
//! Timeouts are failures here, never RTTs.
//!
//! # What it does under
//!
//! - **An origin that fails fast** (a 5xx in 2 ms): a failure is never an
//!   RTT sample, so it cannot look like spare capacity; a window with 10 %
//!   failures or more backs the limit off by 0.8, down to `min`. An origin
//!   shedding load beyond its capacity keeps the limit near that capacity.
//! - **Cache hits**: never sampled. The API is that only transactions that
//!   reached the origin call [`Controller::record`]; the plugin does not call
//!   it for a hit (nor for a refusal or a queued request that gave up).
//! - **Low traffic**: a window needs 10 outcomes, so a quiet origin updates
//!   rarely; while the demand is below half the limit the limit does not grow
//!   (it drifts toward twice the demand), so an idle origin cannot let it run
//!   away, and its unloaded samples keep the baseline fresh without probes.
//! - **A slow client**: the RTT ends at the origin's first response byte, so
//!   a slow reader does not inflate it. If the plugin holds its slot until
//!   the transaction closes, a slow reader holds a slot without loading the
//!   origin: the windows see no queueing and enough in flight, so the limit
//!   grows past those slots until the origin's latency rises (up to `max`).
//!   The limit then counts slots, the origin sees fewer.
//!
//! # In a plugin
//!
//! One controller per limiter (a rule, or a `--group`'s rules): the
//! capacity is the origin's (rate_limit.so refuses `--limit=auto` with
//! `--key`). Its slots start at [`Controller::limit`]. Then:
//!
//! - when the transaction closes, if [`Controller::wants_sample`] (asked of
//!   every transaction, before finding out whether it went to the origin:
//!   after a busy window, one in four) and it went to the origin (the milestones
//!   `SERVER_BEGIN_WRITE` to `SERVER_FIRST_READ`, or a failure):
//!   [`Controller::observe`]: the sample is recorded with the places in
//!   use ([`Governed`]: the larger of that count when it entered and when
//!   it closed, before the place goes back; throttle.so keeps the first,
//!   rate_limit.so, whose common path stores nothing per request, passes
//!   the second only), then the limit in force applied to them;
//! - `set TAG limit=N` and `limit=auto`: [`Controller::pin_into`];
//! - metrics and `show`: [`Controller::state`].
//!
//! # Cost
//!
//! [`Controller::record`]: three relaxed atomic adds (two for a failure,
//! five for an unloaded sample) and a load, no lock, and a clock read on
//! one sample in four once the window has its samples; once per
//! window, one sample takes a `try_lock` and runs the law (a few float
//! operations). [`Controller::limit`]: one atomic load.
//! [`Controller::wants_sample`]: a load (and an atomic add after a busy
//! window). The window's
//! atomics are shared by every thread of the rule, so on a busy rule
//! their cache lines move between cores; the lock is never waited for.
//!
//! [concurrency-limits]: https://github.com/Netflix/concurrency-limits
//! [adaptive_concurrency]: https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/adaptive_concurrency_filter
//! [concurrency-limits#134]: https://github.com/Netflix/concurrency-limits/pull/134
//! [concurrency-limits#137]: https://github.com/Netflix/concurrency-limits/issues/137
//! [failsafe-go#127]: https://github.com/failsafe-go/failsafe-go/issues/127

#![forbid(unsafe_code)]

pub mod config;
pub mod controller;
mod governed;
mod law;
mod window;

pub use config::{Bounds, Config, ConfigError};
pub use controller::{Controller, State};
pub use governed::{Governed, RAISE_STEP};
pub use window::Outcome;
