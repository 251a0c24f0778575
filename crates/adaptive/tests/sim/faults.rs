//! Origins that fail, traffic too low to teach, and a no-load latency that
//! changes under the controller.

use adaptive::Config;

use adaptive_sim::{ms, secs, settle, Mode, Sim};

/// Runs to `end` in 100 ms steps; the highest limit seen.
fn highest(sim: &mut Sim, end: u64) -> u32 {
    let mut high = sim.state().limit;
    while sim.elapsed() < end {
        sim.run_to(sim.elapsed() + ms(100));
        high = high.max(sim.state().limit);
    }
    high
}

#[test]
fn an_origin_failing_in_2_ms_never_raises_the_limit() {
    let d = Config::default();
    for initial in [d.min, d.initial, d.max] {
        let mut sim = Sim::new(Config { initial, ..d }, 32, ms(10));
        sim.set_mode(Mode::FailFast);
        sim.set_clients(128);
        let high = highest(&mut sim, secs(30));
        let s = sim.state();
        eprintln!("failing from {initial}: highest {high}, then {s:?}");
        assert_eq!(high, initial);
        assert_eq!(s.limit, d.min);
    }
}

#[test]
fn an_origin_that_starts_failing_backs_the_limit_off_to_the_minimum() {
    let mut sim = Sim::new(Config::default(), 32, ms(10));
    sim.set_clients(128);
    sim.run_to(secs(20));
    let before = sim.state().limit;
    sim.set_mode(Mode::FailFast);
    let high = highest(&mut sim, secs(30));
    let after = sim.state().limit;
    eprintln!("C=32 failing from {before}: highest {high}, after 10 s {after}");
    assert!(high <= before);
    assert_eq!(after, Config::default().min);
}

#[test]
fn an_origin_shedding_beyond_its_capacity_keeps_the_limit_near_it() {
    for c in [8, 32, 100] {
        let mut sim = Sim::new(Config::default(), c, ms(10));
        sim.set_mode(Mode::Shedding);
        sim.set_clients(4 * c as usize);
        let (lo, hi) = (0.7 * f64::from(c), 1.5 * f64::from(c));
        let (since, (low, high)) = settle(&mut sim, lo, hi, secs(45));
        eprintln!(
            "C={c} shedding: in [{lo}, {hi}] from {:?} ms, last 10 s {low}..={high}",
            since.map(|t| t / ms(1))
        );
        assert!(since.is_some_and(|t| t <= secs(30)), "C={c}");
    }
}

#[test]
fn low_traffic_does_not_raise_the_limit_without_bound() {
    let d = Config::default();
    // C = 100: the origin never queues; only the demand bounds the limit.
    for clients in [1u32, 5, 8, 15, 40] {
        for initial in [d.initial, d.max] {
            let mut sim = Sim::new(Config { initial, ..d }, 100, ms(10));
            sim.set_clients(clients as usize);
            sim.run_to(secs(10));
            let high = highest(&mut sim, secs(60));
            let s = sim.state();
            eprintln!("{clients} clients from {initial}: highest {high} after 10 s, {s:?}");
            assert!(
                high <= (2 * clients + 2).max(d.min),
                "{clients} clients: {high}"
            );
            assert!(!s.probing && s.baseline == Some(ms(10)));
        }
    }
}

/// A slower origin drives the limit to the minimum, where every sample is
/// unloaded and measures the new latency. A faster one pulls the baseline
/// down to the loaded windows' RTT at once (the limit settles a little
/// high); each periodic probe then halves what is left.
#[test]
fn a_slower_origin_is_relearned_at_once_and_a_faster_one_by_the_probes() {
    let interval = Config::default().probe_interval;
    for (from, to) in [(10, 30), (50, 10)] {
        let mut sim = Sim::new(Config::default(), 32, ms(from));
        sim.set_clients(128);
        sim.run_to(secs(20));
        sim.set_latency(ms(to));
        let (since, (low, high)) = settle(&mut sim, 0.7 * 32.0, 1.5 * 32.0, secs(40));
        let before = sim.state().baseline;
        let end = secs(40) + 2 * interval;
        let (stayed, (plow, phigh)) = settle(&mut sim, 0.7 * 32.0, 1.5 * 32.0, end);
        let after = sim.state().baseline;
        eprintln!(
            "L0 {from} -> {to} ms: back in [22.4, 48] after {:?} ms, last 10 s {low}..={high}, \
             baseline {before:?}; two probe intervals later {plow}..={phigh}, baseline {after:?}",
            since.map(|t| (t - secs(20)) / ms(1)),
        );
        assert!(since.is_some_and(|t| t <= secs(30)), "{from} -> {to}");
        assert_eq!(
            stayed,
            Some(secs(40) + ms(100)),
            "{from} -> {to}: left the band"
        );
        let error = after.map_or(1.0, |b| (b as f64 / ms(to) as f64 - 1.0).abs());
        assert!(error < 0.1, "{from} -> {to}: baseline {after:?}");
    }
}
