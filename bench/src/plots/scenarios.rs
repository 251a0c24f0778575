//! The scenarios plotted (issue 34's): runs of crates/adaptive's model
//! origin (crates/adaptive-sim, the simulation tests' own) with events at given
//! seconds, each with the bound the issue sets, judged on the run's trace
//! as the simulation tests judge theirs.

use adaptive::Config;
use adaptive_sim::{ms, secs, settled, trace, Mode, Sample, Sim};

use super::chart::{BOUND, MUTED};

/// The origin: capacity C, no-load latency L0 (as issue 34's real-ATS comparison).
pub const C: u32 = 32;
pub const L0_MS: u64 = 50;

pub enum Event {
    Capacity(u32),
    Clients(usize),
    /// Every request fails after 2 ms from now on.
    FailFast,
}

pub enum Bound {
    /// The limit is in the band [0.7C, 1.5C] of the capacity in force
    /// within `within` s of the start and of each capacity change, and
    /// stays there until the next (probe samples skipped).
    Settles { within: u64 },
    /// From `after` s, the origin never has `max` or more in flight.
    PeakBelow { after: u64, max: usize },
    /// From `after` s, the limit never rises above what it was then, and
    /// ends at the minimum.
    BacksOff { after: u64 },
}

pub struct Scenario {
    /// The PNG's file stem.
    pub name: &'static str,
    /// The line on the image.
    pub title: String,
    /// The section's heading above it.
    pub heading: &'static str,
    /// What to see, for the caption.
    pub what: &'static str,
    pub config: Config,
    pub clients: usize,
    /// (seconds, event), in order.
    pub events: Vec<(u64, Event)>,
    /// Seconds simulated.
    pub end: u64,
    pub bound: Bound,
    /// The top of the plot; a higher value is drawn at the top.
    pub y_max: f64,
    /// Reference levels besides the band and C: (value, label, colour).
    pub levels: Vec<(f64, &'static str, u8)>,
}

pub fn all() -> Vec<Scenario> {
    let d = Config::default();
    let c = C as usize;
    let title = |what: &str| format!("{what}: C={C}, L0={L0_MS} MS");
    let settles = |name, heading, head, what, config, end, within, y_max| Scenario {
        name,
        title: title(&format!("{head}, {} CLIENTS", 4 * c)),
        heading,
        what,
        config,
        clients: 4 * c,
        events: Vec::new(),
        end,
        bound: Bound::Settles { within },
        y_max,
        levels: Vec::new(),
    };
    vec![
        settles(
            "converge-low",
            "Convergence from a low start",
            "FROM LIMIT 1",
            "From a limit of 1 (the minimum set to 1), the limit grows while the windows \
             show no queueing, then settles where the origin holds a small queue of its own \
             (L = C + √L: 38).",
            Config {
                min: 1,
                initial: 1,
                ..d
            },
            45,
            30,
            80.0,
        ),
        settles(
            "converge-high",
            "Convergence from a high start",
            "FROM LIMIT 1000",
            "From the maximum (1000, drawn at the top): every client reaches the origin. \
             The first window finds no no-load latency measured yet, so a probe measures \
             it (the limit at the minimum for a moment). Back at 1000, the next window \
             applies the gradient to what was in use (128: a limit above it protects \
             nothing), and each window lowers the limit by about a tenth at most (the \
             gradient's floor of 0.5, smoothed by 0.2), into the band.",
            Config {
                initial: d.max,
                ..d
            },
            45,
            30,
            150.0,
        ),
        Scenario {
            events: vec![(30, Event::Capacity(C / 2)), (50, Event::Capacity(C))],
            ..settles(
                "capacity",
                "Capacity halved, then back",
                "C HALVED AT 30 S, BACK AT 50 S",
                "The capacity halves at 30 s and comes back at 50 s; the limit follows \
                 both ways. The dip just after 60 s is the periodic probe: no unloaded \
                 sample for 60 s, so one short stretch at the minimum re-measures the \
                 no-load latency.",
                d,
                70,
                10,
                80.0,
            )
        },
        Scenario {
            name: "overload",
            heading: "A sudden overload of 10C clients",
            title: title(&format!("{} CLIENTS, {} FROM 30 S", c / 2, 10 * c)),
            what: "C/2 clients for 30 s: the demand is below the limit, which stays at \
                   twice it (32). Then 10C clients at once: the origin never has more in \
                   flight than the limit, which grows to the 38 of the other plots; the red \
                   line is the bound, 2C.",
            config: d,
            clients: c / 2,
            events: vec![(30, Event::Clients(10 * c))],
            end: 60,
            bound: Bound::PeakBelow {
                after: 30,
                max: 2 * c,
            },
            y_max: 80.0,
            levels: vec![(2.0 * f64::from(C), "2C", BOUND)],
        },
        Scenario {
            name: "failing",
            heading: "An origin that starts failing fast",
            title: title(&format!("{} CLIENTS, ALL FAIL IN 2 MS FROM 20 S", 4 * c)),
            what: "At 20 s every request starts failing in 2 ms (the band is drawn while \
                   the origin is healthy). A failure is never a latency sample, so a fast \
                   failure cannot look like spare capacity; each window with 10 % failures \
                   or more multiplies the limit by 0.8, down to the minimum (grey).",
            config: d,
            clients: 4 * c,
            events: vec![(20, Event::FailFast)],
            end: 30,
            bound: Bound::BacksOff { after: 20 },
            y_max: 80.0,
            levels: vec![(f64::from(d.min), "MIN", MUTED)],
        },
    ]
}

/// One [`Sample`] and what was in force during it.
pub struct Point {
    pub sample: Sample,
    pub capacity: u32,
    pub failing: bool,
}

pub fn run(s: &Scenario) -> Vec<Point> {
    let mut sim = Sim::new(s.config, C, ms(L0_MS));
    sim.set_clients(s.clients);
    let (mut capacity, mut failing) = (C, false);
    let mut points = Vec::new();
    let stops = s.events.iter().map(|(t, e)| (*t, Some(e)));
    for (t, event) in stops.chain([(s.end, None)]) {
        points.extend(trace(&mut sim, secs(t)).into_iter().map(|sample| Point {
            sample,
            capacity,
            failing,
        }));
        match event {
            Some(Event::Capacity(c)) => {
                capacity = *c;
                sim.set_capacity(*c);
            }
            Some(Event::Clients(n)) => sim.set_clients(*n),
            Some(Event::FailFast) => {
                failing = true;
                sim.set_mode(Mode::FailFast);
            }
            None => {}
        }
    }
    points
}

/// What a run showed against its bound: notes for the caption, problems.
#[derive(Debug, Default)]
pub struct Verdict {
    pub notes: Vec<String>,
    pub problems: Vec<String>,
}

fn s(t: u64) -> String {
    format!("{:.1} s", t as f64 / 1e9)
}

pub fn judge(sc: &Scenario, points: &[Point]) -> Verdict {
    let mut v = Verdict::default();
    let after = |from: u64| points.iter().filter(move |p| p.sample.t > secs(from));
    match sc.bound {
        Bound::Settles { within } => {
            let mut starts = vec![(0, C)];
            starts.extend(sc.events.iter().filter_map(|(t, e)| match e {
                Event::Capacity(c) => Some((*t, *c)),
                _ => None,
            }));
            for (i, &(from, c)) in starts.iter().enumerate() {
                let to = starts.get(i + 1).map_or(sc.end, |n| n.0);
                let phase: Vec<Sample> = after(from)
                    .filter(|p| p.sample.t <= secs(to))
                    .map(|p| p.sample)
                    .collect();
                let (lo, hi) = (0.7 * f64::from(c), 1.5 * f64::from(c));
                let since = settled(&phase, lo, hi);
                let steady = phase
                    .iter()
                    .filter(|p| !p.probing && p.t + secs(10) > secs(to));
                let low = steady.clone().map(|p| p.limit).min().unwrap_or(0);
                let high = steady.map(|p| p.limit).max().unwrap_or(0);
                let head = if from == 0 {
                    format!("C = {c}")
                } else {
                    format!("C = {c} from {from} s")
                };
                match since {
                    Some(t) if t <= secs(from + within) => v.notes.push(format!(
                        "{head}: in the band [{lo}, {hi}] {} after {}, to {to} s; {low}–{high} in its last 10 s",
                        s(t - secs(from)),
                        if from == 0 { "the start" } else { "the change" },
                    )),
                    _ => v.problems.push(format!(
                        "{head}: not in the band [{lo}, {hi}] within {within} s to {to} s (from {})",
                        since.map_or("never".into(), s)
                    )),
                }
            }
        }
        Bound::PeakBelow { after: from, max } => {
            let peak = after(from).map(|p| p.sample.inflight).max().unwrap_or(0);
            let before = points.iter().rev().find(|p| p.sample.t <= secs(from));
            let limit = before.map_or(sc.config.initial, |p| p.sample.limit);
            let last = points.last().map_or(0, |p| p.sample.limit);
            let note = format!(
                "limit {limit} at {from} s; from then the origin had at most {peak} in flight \
                 (the bound: below {max}); limit {last} at the end"
            );
            if peak < max {
                v.notes.push(note);
            } else {
                v.problems.push(note);
            }
        }
        Bound::BacksOff { after: from } => {
            let at = points.iter().rev().find(|p| p.sample.t <= secs(from));
            let limit = at.map_or(sc.config.initial, |p| p.sample.limit);
            let high = after(from).map(|p| p.sample.limit).max().unwrap_or(0);
            let min = sc.config.min;
            let floor = after(from)
                .find(|p| p.sample.limit == min)
                .map(|p| p.sample.t);
            let last = points.last().map_or(0, |p| p.sample.limit);
            let note = format!(
                "limit {limit} at {from} s, never above it after; at the minimum ({min}) {} later",
                floor.map_or("never".into(), |t| s(t - secs(from)))
            );
            if high <= limit && last == min {
                v.notes.push(note);
            } else {
                v.problems.push(format!("{note}; {last} at the end"));
            }
        }
    }
    v
}
