//! The pure logic of throttle.so, independent of Traffic Server so it can be
//! tested with plain `cargo test`:
//!
//! - [`params`]: the `@pparam` parser, including `file:` includes;
//! - [`stale`]: how stale a cached response is and whether it may be served;
//! - [`ctl`]: the `traffic_ctl plugin msg throttle` commands;
//! - [`gate`]: lock-free admission counting and the per-interval statistics;
//! - [`log_line`]: the text of a `throttle.log` line.

#![forbid(unsafe_code)]

pub mod ctl;
pub mod gate;
pub mod httpdate;
pub mod params;
pub mod stale;

pub use gate::{Entry, Gate, Interval, Ticket};
pub use params::Params;

/// One `throttle.log` line (ATS prefixes the date):
/// `tpid=<id> tph=<high-water> tpu=<503s> tps=<stale>`.
pub fn log_line(id: &str, iv: &Interval) -> String {
    format!(
        "tpid={id} tph={} tpu={} tps={}",
        iv.high_water, iv.unavailable, iv.stale
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_line_format() {
        let iv = Interval {
            high_water: 3,
            unavailable: 1,
            stale: 2,
        };
        assert_eq!(
            log_line("example-01", &iv),
            "tpid=example-01 tph=3 tpu=1 tps=2"
        );
    }
}
