//! The limit finds the capacity, follows it, and holds under overload.

use adaptive::Config;

use adaptive_sim::{ms, secs, settle, trace, Sim};

const CAPACITIES: [u32; 3] = [8, 32, 100];
/// The origin's no-load latency, in ms.
const LATENCIES: [u64; 2] = [10, 50];

/// The band the limit must settle in: [0.7C, 1.5C].
fn band(c: u32) -> (f64, f64) {
    (0.7 * f64::from(c), 1.5 * f64::from(c))
}

fn starts() -> [(&'static str, Config); 3] {
    let d = Config::default();
    [
        (
            "1",
            Config {
                min: 1,
                initial: 1,
                ..d
            },
        ),
        ("20", d),
        (
            "1000",
            Config {
                initial: d.max,
                ..d
            },
        ),
    ]
}

fn show(t: Option<u64>) -> String {
    t.map_or("never".into(), |t| format!("{:.1} s", t as f64 / 1e9))
}

#[test]
fn converges_from_any_start_within_30_s() {
    for c in CAPACITIES {
        for l0 in LATENCIES {
            for (start, cfg) in starts() {
                let mut sim = Sim::new(cfg, c, ms(l0));
                sim.set_clients(4 * c as usize);
                let (lo, hi) = band(c);
                let (since, (low, high)) = settle(&mut sim, lo, hi, secs(45));
                eprintln!(
                    "C={c} L0={l0}ms start={start}: in [{lo}, {hi}] from {}, last 10 s {low}..={high}",
                    show(since)
                );
                assert!(
                    since.is_some_and(|t| t <= secs(30)),
                    "C={c} L0={l0}ms start={start}: {:?}",
                    sim.state()
                );
            }
        }
    }
}

#[test]
fn follows_a_capacity_drop_to_half_and_the_rise_back_within_10_s() {
    for c in CAPACITIES {
        for l0 in LATENCIES {
            let mut sim = Sim::new(Config::default(), c, ms(l0));
            sim.set_clients(4 * c as usize);
            sim.run_to(secs(30));
            sim.set_capacity(c / 2);
            let (lo, hi) = band(c / 2);
            let (down, (dlow, dhigh)) = settle(&mut sim, lo, hi, secs(50));
            sim.set_capacity(c);
            let (lo, hi) = band(c);
            let (up, (ulow, uhigh)) = settle(&mut sim, lo, hi, secs(70));
            let after = |t: Option<u64>, from| show(t.map(|t| t - from));
            eprintln!(
                "C={c} L0={l0}ms: down to C/2 in {} (last 10 s {dlow}..={dhigh}), back up in {} ({ulow}..={uhigh})",
                after(down, secs(30)),
                after(up, secs(50)),
            );
            assert!(down.is_some_and(|t| t <= secs(40)), "C={c} L0={l0}ms down");
            assert!(up.is_some_and(|t| t <= secs(60)), "C={c} L0={l0}ms up");
        }
    }
}

#[test]
fn a_sudden_overload_of_10c_clients_never_puts_more_than_2c_at_the_origin() {
    for c in CAPACITIES {
        for l0 in LATENCIES {
            // From a converged limit (2C clients), and from low traffic (C/2).
            for before in [2 * c, c / 2] {
                let mut sim = Sim::new(Config::default(), c, ms(l0));
                sim.set_clients(before as usize);
                sim.run_to(secs(30));
                let limit = sim.state().limit;
                sim.take_peak();
                sim.set_clients(10 * c as usize);
                sim.run_to(secs(60));
                let peak = sim.take_peak();
                eprintln!(
                    "C={c} L0={l0}ms {before} clients then {}: limit {limit} before, origin peak {peak}, limit {} after",
                    10 * c,
                    sim.state().limit
                );
                assert!(
                    peak <= 2 * c as usize,
                    "C={c} L0={l0}ms from {before}: peak {peak}"
                );
            }
        }
    }
}

/// Each request's work uniform in L0·(1 ± jitter): samples no longer end
/// in order, and a window's average is noisy. For 90 s, past the first
/// periodic probe.
#[test]
fn converges_with_a_jittered_latency_too() {
    for c in CAPACITIES {
        for jitter in [0.2, 0.5, 0.9] {
            let mut sim = Sim::new(Config::default(), c, ms(20));
            sim.set_jitter(jitter);
            sim.set_clients(4 * c as usize);
            let (lo, hi) = band(c);
            let (since, (low, high)) = settle(&mut sim, lo, hi, secs(90));
            let baseline = sim.state().baseline.unwrap_or(0) as f64 / 1e6;
            eprintln!(
                "C={c} L0=20ms ±{jitter}: in [{lo}, {hi}] from {}, last 10 s {low}..={high}, \
                 baseline {baseline:.1} ms",
                show(since)
            );
            assert!(since.is_some_and(|t| t <= secs(30)), "C={c} ±{jitter}");
        }
    }
}

/// A probe drops the limit to the minimum on purpose; once it ends the
/// limit goes back, and the slots ramp up to it. The ramp must not pass
/// for a quiet origin (the windows while the slots ramp up are not
/// application-limited): in the 10 s after the probe, the limit stays
/// within 5 % of what it was (and a slot, for small limits' rounding).
#[test]
fn the_limit_comes_back_whole_after_a_probe() {
    for c in CAPACITIES {
        for l0 in LATENCIES {
            let mut sim = Sim::new(Config::default(), c, ms(l0));
            sim.set_clients(4 * c as usize);
            sim.run_to(secs(30));
            let samples = trace(&mut sim, secs(100));
            let Some(start) = samples.iter().position(|s| s.probing) else {
                panic!("C={c} L0={l0}ms: no probe by 100 s");
            };
            let before = samples[start.saturating_sub(1)].limit;
            let end = start + samples[start..].iter().take_while(|s| s.probing).count();
            let after = samples[end..]
                .iter()
                .take_while(|s| s.t <= samples[end].t + secs(10))
                .map(|s| s.limit)
                .min()
                .unwrap_or(0);
            eprintln!(
                "C={c} L0={l0}ms: {before} before the probe, at least {after} in the 10 s after it"
            );
            assert!(
                f64::from(after) >= 0.95 * f64::from(before) - 1.0,
                "C={c} L0={l0}ms: {before} before the probe, {after} after"
            );
        }
    }
}
