//! One scenario's run as a [`Chart`]: the band where the origin is
//! healthy, the origin's in-flight area, C and the scenario's levels, the
//! limit's line.

use adaptive_sim::STEP;

use super::chart::{Chart, Swatch, AREA, BAND, CAPACITY, LIMIT};
use super::scenarios::{Point, Scenario};

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The scenario's PNG.
pub fn png(sc: &Scenario, points: &[Point]) -> Result<Vec<u8>, String> {
    let end = sc.end as f64;
    let mut chart = Chart::new(end, sc.y_max);
    // Each sample covers the step that ends at its time.
    let span = |p: &Point| (secs(p.sample.t) - secs(STEP), secs(p.sample.t));
    for p in points.iter().filter(|p| !p.failing) {
        let c = f64::from(p.capacity);
        chart.band(span(p), 0.7 * c, 1.5 * c);
    }
    for p in points {
        chart.area(span(p), p.sample.inflight as f64);
    }
    chart.axes();
    for p in points.iter().filter(|p| !p.failing) {
        chart.level(span(p), f64::from(p.capacity), CAPACITY);
    }
    if let Some(p) = points.iter().rev().find(|p| !p.failing) {
        chart.label(f64::from(p.capacity), "C", CAPACITY);
    }
    for &(v, label, colour) in &sc.levels {
        chart.level((0.0, end), v, colour);
        chart.label(v, label, colour);
    }
    let limit: Vec<(f64, f64)> = std::iter::once((0.0, f64::from(sc.config.initial)))
        .chain(
            points
                .iter()
                .map(|p| (secs(p.sample.t), f64::from(p.sample.limit))),
        )
        .collect();
    chart.polyline(&limit, LIMIT, 2);
    chart.title(&sc.title);
    chart.legend(&[
        (Swatch::Line(LIMIT), "LIMIT"),
        (Swatch::Box(AREA), "ORIGIN IN FLIGHT"),
        (Swatch::Box(BAND), "0.7C-1.5C"),
        (Swatch::Dashes(CAPACITY), "C"),
    ]);
    chart.png()
}
