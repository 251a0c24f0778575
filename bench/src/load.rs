//! The load bench: one traffic_server, one remap rule per configuration
//! (differing only in the plugin), wrk on loopback, configurations
//! interleaved in rounds so drift of the shared machine hits all alike.

use std::time::{Duration, Instant};

use ats_tests::client;

use crate::nginx::{Nginx, BODY};
use crate::sys;
use crate::wrk::{self, Load, WrkResult};

/// A configuration: a remap rule that differs from the others only in its plugin.
#[derive(Clone, Debug)]
pub struct Variant {
    /// Short name for progress lines.
    pub key: &'static str,
    pub label: &'static str,
    /// The rule's from-host; wrk sends it as `Host:`.
    pub host: &'static str,
    /// `@plugin=... @pparam=...`, empty for no plugin.
    pub plugin: String,
}

impl Variant {
    pub fn remap_line(&self, to: &str) -> String {
        format!("map http://{}/ {to}/ {}\n", self.host, self.plugin)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Fresh cache hits: the origin is not contacted.
    Hit,
    /// Every request proxied to nginx. The URL has a query string and ATS
    /// runs with `cache_urls_that_look_dynamic = 0`, so there is no cache
    /// lookup or write for it at all (and nginx says `no-store` anyway).
    Proxied,
}

pub const WORKLOADS: [Workload; 2] = [Workload::Hit, Workload::Proxied];

impl Workload {
    pub fn path(self) -> &'static str {
        match self {
            Workload::Hit => "/hit",
            Workload::Proxied => "/miss?v=1",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Workload::Hit => "hit",
            Workload::Proxied => "proxied",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Workload::Hit => "Fresh cache hits",
            Workload::Proxied => "Proxied to nginx, not cached",
        }
    }

    /// Origin requests expected per client request.
    fn origin_share(self) -> u64 {
        match self {
            Workload::Hit => 0,
            Workload::Proxied => 1,
        }
    }
}

/// One wrk run against one configuration, with traffic_server's CPU time
/// and nginx's request count around it.
#[derive(Clone, Debug)]
pub struct Run {
    pub wrk: WrkResult,
    /// traffic_server user+system CPU seconds during the run.
    pub cpu_s: f64,
    /// Requests nginx served during the run.
    pub origin_requests: u64,
    /// nginx CPU seconds during the run.
    pub nginx_s: f64,
    /// CPU seconds the rest of the machine used during the run: everything
    /// but traffic_server, nginx, wrk and this bench. Non-zero means other
    /// work (e.g. a build) competed for the 2 CPUs.
    pub other_s: f64,
    /// Wall-clock seconds from before wrk started to after it ended.
    pub wall_s: f64,
}

impl Run {
    pub fn cpu_per_100k(&self) -> f64 {
        self.cpu_s / self.wrk.requests as f64 * 1e5
    }

    /// Cores traffic_server kept busy on average.
    pub fn ats_cores(&self) -> f64 {
        self.cpu_s / self.wall_s
    }

    pub fn nginx_cores(&self) -> f64 {
        self.nginx_s / self.wall_s
    }

    /// Cores used by other processes on average.
    pub fn other_cores(&self) -> f64 {
        self.other_s / self.wall_s
    }
}

pub struct LoadResults {
    pub load: Load,
    pub warmup: Duration,
    pub rounds: usize,
    /// nginx measured directly, per workload path.
    pub origin: Vec<(Workload, WrkResult)>,
    /// `runs[workload][variant][round]`, warm-up excluded.
    pub runs: Vec<Vec<Vec<Run>>>,
}

/// Checks the setup before measuring anything: every configuration answers
/// 200 with nginx's body, `/hit` is served from cache without touching
/// nginx, each `/miss?v=1` reaches nginx exactly once, and throttle.so's
/// counter sees the proxied requests.
pub fn verify(ts_port: u16, nginx: &Nginx, variants: &[Variant]) -> Result<(), String> {
    let get = |host: &str, path: &str| -> Result<(), String> {
        let r = client::get(ts_port, host, path, &[])
            .map_err(|e| format!("GET {path} Host: {host}: {e}"))?;
        if r.status != 200 || r.body_text() != BODY {
            return Err(format!(
                "GET {path} Host: {host}: HTTP {} {:?} instead of nginx's body",
                r.status,
                r.body_text()
            ));
        }
        Ok(())
    };
    for v in variants {
        // Fill the cache; the write completes shortly after the response.
        get(v.host, Workload::Hit.path())?;
        std::thread::sleep(Duration::from_millis(300));
        for w in WORKLOADS {
            const N: u64 = 5;
            let before = nginx.requests()?;
            for _ in 0..N {
                get(v.host, w.path())?;
            }
            // The second status request counts itself.
            let seen = nginx.requests()? - before - 1;
            let want = N * w.origin_share();
            if seen != want {
                return Err(format!(
                    "{} via {}: {N} requests reached nginx {seen} times instead of {want}: \
                     the cache is not doing what the {} workload needs",
                    w.path(),
                    v.host,
                    w.key()
                ));
            }
        }
    }
    // throttle.so counts uncached requests at CACHE_LOOKUP_COMPLETE; a rule
    // with max:0 refusing the proxied URL proves that hook runs for it even
    // though the cache lookup is skipped, so the bench measures its counter path.
    let r = client::get(ts_port, THROTTLE_CHECK_HOST, Workload::Proxied.path(), &[])
        .map_err(|e| format!("GET via {THROTTLE_CHECK_HOST}: {e}"))?;
    if r.status != 503 {
        return Err(format!(
            "throttle.so with max:0 answered {} instead of 503 for {}: its counter path \
             would not be measured by the proxied workload",
            r.status,
            Workload::Proxied.path()
        ));
    }
    Ok(())
}

/// A rule with throttle.so `max:0`, used only by [`verify`].
pub const THROTTLE_CHECK_HOST: &str = "throttle-check.bench";

/// nginx alone, straight from wrk, so the report shows it is not the bottleneck.
pub fn origin_capacity(nginx: &Nginx, load: &Load) -> Result<Vec<(Workload, WrkResult)>, String> {
    WORKLOADS
        .iter()
        .map(|&w| {
            let r = wrk::run(load, None, &format!("{}{}", nginx.url(), w.path()))?;
            eprintln!(
                "origin alone {:>7}: {:>9.0} req/s  p50 {:>7.0} us  p99 {:>7.0} us",
                w.key(),
                r.rps,
                r.p50_us,
                r.p99_us
            );
            Ok((w, r))
        })
        .collect()
}

fn measure(
    ts_port: u16,
    ts_pid: u32,
    nginx: &Nginx,
    v: &Variant,
    w: Workload,
    load: &Load,
) -> Result<Run, String> {
    let url = format!("http://127.0.0.1:{ts_port}{}", w.path());
    let n0 = nginx.requests()?;
    let cpu = || -> Result<[f64; 4], String> {
        Ok([
            sys::cpu_seconds(ts_pid)?,
            sys::cpu_seconds(nginx.pid())?,
            sys::own_and_children_cpu_seconds()?,
            sys::machine_busy_seconds()?,
        ])
    };
    let before = cpu()?;
    let t0 = Instant::now();
    let r = wrk::run(load, Some(v.host), &url)?;
    let wall_s = t0.elapsed().as_secs_f64();
    let after = cpu()?;
    let n1 = nginx.requests()?;
    let d: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    Ok(Run {
        wrk: r,
        cpu_s: d[0],
        origin_requests: n1.saturating_sub(n0 + 1),
        nginx_s: d[1],
        // Tick rounding of four counters can make this slightly negative.
        other_s: (d[3] - d[0] - d[1] - d[2]).max(0.0),
        wall_s,
    })
}

/// Per workload: a warm-up round (discarded), then `rounds` rounds; each
/// round runs every configuration, the order rotating by one per round.
pub fn run(
    ts_port: u16,
    ts_pid: u32,
    nginx: &Nginx,
    variants: &[Variant],
    load: Load,
    warmup: Duration,
    rounds: usize,
) -> Result<LoadResults, String> {
    let mut runs: Vec<Vec<Vec<Run>>> = WORKLOADS
        .iter()
        .map(|_| variants.iter().map(|_| Vec::new()).collect())
        .collect();
    let warm = Load {
        duration: warmup,
        ..load
    };
    // Round 0 is the warm-up, if there is one.
    let first = if warmup.is_zero() { 1 } else { 0 };
    // One workload after the other: switching workloads inside a round made
    // the first run after each switch slower (nginx idle, caches cold), a
    // position effect the warm-up round of each workload now absorbs.
    for (wi, &w) in WORKLOADS.iter().enumerate() {
        for round in first..=rounds {
            let (this, name) = if round == 0 {
                (&warm, "warm-up".to_owned())
            } else {
                (&load, format!("round {round}/{rounds}"))
            };
            // Rotate the order each round (A B C D, B C D A, ...) so that no
            // configuration always runs first or after the same neighbour.
            let shift = round.saturating_sub(1) % variants.len();
            for vi in (0..variants.len()).map(|i| (i + shift) % variants.len()) {
                let v = &variants[vi];
                let run = measure(ts_port, ts_pid, nginx, v, w, this)?;
                eprintln!(
                    "{name:>11} {:>7} {:>9}: {:>8.0} req/s  p50 {:>6.0} us  p99 {:>6.0} us  \
                     ATS {:>5.2} CPU-s/100k ({:.2} cores)  origin {:>7}  other {:.2} cores{}",
                    w.key(),
                    v.key,
                    run.wrk.rps,
                    run.wrk.p50_us,
                    run.wrk.p99_us,
                    run.cpu_per_100k(),
                    run.ats_cores(),
                    run.origin_requests,
                    run.other_cores(),
                    if run.wrk.non_2xx + run.wrk.socket_errors > 0 {
                        format!(
                            "  !! {} non-2xx, {} socket errors",
                            run.wrk.non_2xx, run.wrk.socket_errors
                        )
                    } else {
                        String::new()
                    }
                );
                if round > 0 {
                    runs[wi][vi].push(run);
                }
                // Let closed connections settle before the next configuration.
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
    Ok(LoadResults {
        load,
        warmup,
        rounds,
        origin: Vec::new(),
        runs,
    })
}
