//! A simulated fleet exchanging reports: admitted requests stay within the
//! bound over every window, converge to r, and degrade towards N·r when
//! reports are lost.

use super::*;

/// A fleet of instances on one manual clock, reports sent every `period`
/// (each instance at its own phase) and delivered `delay` later, or lost.
struct Sim {
    clock: Arc<ManualClock>,
    nodes: Vec<Buckets<Arc<ManualClock>>>,
    period: Nanos,
    delay: Nanos,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A delivery of `hits` to node `to` (ordered first at equal times).
    Deliver { to: usize, hits: u32 },
    /// Node `node` reports; `n` counts its reports (for the loss pattern).
    Tick { node: usize, n: usize },
    /// The client's request `i` reaches node `node`.
    Request { node: usize, i: usize },
}

impl Sim {
    fn new(n: usize, burst: u32, rate: f64, period: Nanos, delay: Nanos) -> Sim {
        let clock = Arc::new(ManualClock::new(T0));
        let nodes = (0..n).map(|_| node(&clock, config(burst, rate))).collect();
        Sim {
            clock,
            nodes,
            period,
            delay,
        }
    }

    /// Runs `requests` (time offset, node), losing the reports for which
    /// `lost(node, n, to)` is true; returns the times of admitted requests.
    fn run(
        &self,
        requests: &[(Nanos, usize)],
        phases: &[Nanos],
        lost: impl Fn(usize, usize, usize) -> bool,
    ) -> Vec<Nanos> {
        let n = self.nodes.len();
        let end = requests.iter().map(|r| r.0).max().unwrap_or(0);
        let mut q = BinaryHeap::new();
        for (i, &(t, node)) in requests.iter().enumerate() {
            q.push(Reverse((T0 + t, Ev::Request { node, i })));
        }
        for (node, &ph) in phases.iter().enumerate().take(n) {
            q.push(Reverse((T0 + ph % self.period, Ev::Tick { node, n: 0 })));
        }
        let mut admitted = Vec::new();
        while let Some(Reverse((t, ev))) = q.pop() {
            self.clock.set(t);
            match ev {
                Ev::Request { node, .. } => {
                    if self.nodes[node].decide(b"C") == Decision::Ok {
                        admitted.push(t - T0);
                    }
                }
                Ev::Tick { node, n: k } => {
                    let hits = hits_of(&self.nodes[node].report(), b"C");
                    for to in (0..n).filter(|&to| to != node) {
                        if hits > 0 && !lost(node, k, to) {
                            q.push(Reverse((t + self.delay, Ev::Deliver { to, hits })));
                        }
                    }
                    if t - T0 <= end + self.period {
                        q.push(Reverse((t + self.period, Ev::Tick { node, n: k + 1 })));
                    }
                }
                Ev::Deliver { to, hits } => {
                    self.nodes[to].apply_peer(b"C", hits);
                }
            }
        }
        admitted
    }

    /// `b + 1 + rT + (N−1)(b + 1 + r(P+d))` for a window of `t` ns.
    fn bound(&self, burst: u32, rate: f64, t: Nanos) -> f64 {
        let (b, n) = (f64::from(burst), self.nodes.len() as f64);
        let secs = |x: Nanos| x as f64 / NANOS_PER_SEC as f64;
        b + 1.0 + rate * secs(t) + (n - 1.0) * (b + 1.0 + rate * secs(self.period + self.delay))
    }
}

/// Checks every window from one admission to another against the bound.
fn check_windows(
    sim: &Sim,
    burst: u32,
    rate: f64,
    admitted: &[Nanos],
) -> Result<(), TestCaseError> {
    for i in 0..admitted.len() {
        for j in i..admitted.len() {
            let count = (j - i + 1) as f64;
            let bound = sim.bound(burst, rate, admitted[j] - admitted[i]);
            prop_assert!(
                count <= bound + 1e-9,
                "{} admitted in [{}, {}] ms, bound {}",
                count,
                admitted[i] / NANOS_PER_MS,
                admitted[j] / NANOS_PER_MS,
                bound
            );
        }
    }
    Ok(())
}

/// Requests from `gaps` (ms) sprayed over the nodes by `targets`.
fn spray(gaps: &[u64], targets: &[usize], n: usize) -> Vec<(Nanos, usize)> {
    let mut t = 0;
    gaps.iter()
        .zip(targets.iter().cycle())
        .map(|(g, node)| {
            t += g * NANOS_PER_MS;
            (t, node % n)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Over any window, whatever the traffic and phases, admitted requests
    /// stay within b + 1 + rT + (N−1)(b + 1 + r(P+d)).
    #[test]
    fn admitted_stay_within_the_bound_over_every_window(
        n in 1usize..5,
        burst in 1u32..15,
        interval_ms in 20u64..2_000,
        period_ms in 50u64..5_000,
        delay_ms in 0u64..1_000,
        phases in proptest::collection::vec(0u64..5_000, 4),
        gaps in proptest::collection::vec(0u64..300, 1..400),
        targets in proptest::collection::vec(0usize..4, 1..20),
    ) {
        let rate = 1_000.0 / interval_ms as f64;
        let sim = Sim::new(n, burst, rate, period_ms * NANOS_PER_MS, delay_ms * NANOS_PER_MS);
        let phases: Vec<Nanos> = phases.iter().map(|p| p * NANOS_PER_MS).collect();
        let admitted = sim.run(&spray(&gaps, &targets, n), &phases, |_, _, _| false);
        check_windows(&sim, burst, rate, &admitted)?;
    }

    /// A client offering far more than r, spread over the fleet, gets r in
    /// the long run: at least rT less what discrete arrivals waste (a token
    /// waits for the next request, at most one per-node gap g per
    /// admission), at most the bound, whose overshoot does not grow with T.
    #[test]
    fn long_run_rate_converges_to_r(
        n in 1usize..5,
        burst in 1u32..10,
        rate in 1u32..6,
        period_ms in 100u64..2_000,
        delay_ms in 0u64..300,
        targets in proptest::collection::vec(0usize..4, 1..10),
    ) {
        let rate = f64::from(rate);
        let sim = Sim::new(n, burst, rate, period_ms * NANOS_PER_MS, delay_ms * NANOS_PER_MS);
        let (requests, node_gap) = dense(rate, n, 120, &targets);
        let admitted = sim.run(&requests, &[0, 37, 211, 503], |_, _, _| false);
        let t = 120.0;
        let got = admitted.len() as f64;
        let floor = rate * t * (1.0 - rate * node_gap) - 2.0;
        prop_assert!(got >= floor, "{} admitted in {} s at r={}, floor {}", got, t, rate, floor);
        prop_assert!(got <= sim.bound(burst, rate, 120 * NANOS_PER_SEC) + 1e-9);
        // The second minute alone: r·60 within one node-overshoot per node.
        let late = admitted.iter().filter(|&&a| a >= 60 * NANOS_PER_SEC).count() as f64;
        let slack = (n as f64) * (f64::from(burst) + 1.0 + rate * (period_ms + delay_ms) as f64 / 1e3);
        prop_assert!((late - rate * 60.0).abs() <= slack + rate * 60.0 * rate * node_gap + 2.0,
            "{} in the last 60 s at r={}", late, rate);
    }

    /// Losing reports only forgets debt: never below rT (less the waste of
    /// discrete arrivals), so never failing closed; never more than N
    /// independent buckets allow; with every report lost the fleet admits
    /// about N·r.
    #[test]
    fn lost_reports_degrade_towards_n_r_and_never_fail_closed(
        n in 2usize..5,
        burst in 1u32..10,
        rate in 1u32..6,
        period_ms in 100u64..2_000,
        loss in proptest::collection::vec(any::<bool>(), 1..64),
        all_lost in any::<bool>(),
    ) {
        let rate = f64::from(rate);
        let sim = Sim::new(n, burst, rate, period_ms * NANOS_PER_MS, 10 * NANOS_PER_MS);
        let targets: Vec<usize> = (0..n).collect();
        let (requests, node_gap) = dense(rate, n, 60, &targets);
        let admitted = sim.run(&requests, &[0, 37, 211, 503], |node, k, to| {
            all_lost || loss[(node * 7 + k * 3 + to) % loss.len()]
        });
        let t = 60.0;
        let got = admitted.len() as f64;
        let nf = n as f64;
        let waste = 1.0 - rate * node_gap;
        prop_assert!(got >= rate * t * waste - 2.0, "failed closed: {} in {} s", got, t);
        prop_assert!(got <= nf * (f64::from(burst) + rate * t) + 1e-9);
        if all_lost {
            prop_assert!(got >= nf * (f64::from(burst) + rate * t * waste - 2.0), "{} with every report lost", got);
        }
    }
}

/// Requests for `secs` seconds, 50 per interval per node, sprayed by
/// `targets`; also returns the largest gap between two requests to one
/// node, in seconds.
fn dense(rate: f64, n: usize, secs: u64, targets: &[usize]) -> (Vec<(Nanos, usize)>, f64) {
    let gap = (NANOS_PER_SEC as f64 / rate / 50.0 / n as f64) as Nanos;
    let count = secs * NANOS_PER_SEC / gap;
    let mut last = vec![0; n];
    let mut worst = 0;
    let requests: Vec<(Nanos, usize)> = (1..=count)
        .zip(targets.iter().cycle())
        .map(|(i, node)| {
            let (t, node) = (i * gap, node % n);
            worst = worst.max(t - last[node]);
            last[node] = t;
            (t, node)
        })
        .collect();
    (requests, worst as f64 / NANOS_PER_SEC as f64)
}
