//! Runs `wrk` and reads its report.

use std::process::Command;
use std::time::Duration;

/// One wrk run, as wrk reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct WrkResult {
    /// Completed requests.
    pub requests: u64,
    /// Measured duration in seconds.
    pub seconds: f64,
    pub rps: f64,
    /// Latency percentiles, microseconds (wrk's `--latency` distribution).
    pub p50_us: f64,
    pub p99_us: f64,
    /// Responses that were not 2xx/3xx.
    pub non_2xx: u64,
    /// connect + read + write + timeout errors.
    pub socket_errors: u64,
}

/// Load parameters shared by every run.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub threads: u32,
    pub connections: u32,
    pub duration: Duration,
    /// Run wrk on this CPU only (`taskset -c`), away from traffic_server.
    pub cpu: Option<usize>,
}

impl Load {
    /// The wrk arguments these parameters stand for (also for the report).
    pub fn args(&self) -> Vec<String> {
        vec![
            format!("-t{}", self.threads),
            format!("-c{}", self.connections),
            // wrk takes whole seconds.
            format!("-d{}s", self.duration.as_secs().max(1)),
            "--latency".into(),
        ]
    }
}

/// `wrk <load> [-H 'Host: host'] url`. Fails if wrk cannot run or its
/// report cannot be read; errors *in* the run are returned in the result.
pub fn run(load: &Load, host: Option<&str>, url: &str) -> Result<WrkResult, String> {
    let mut cmd = match load.cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string(), "wrk"]);
            c
        }
        None => Command::new("wrk"),
    };
    cmd.args(load.args());
    if let Some(h) = host {
        cmd.arg("-H").arg(format!("Host: {h}"));
    }
    cmd.arg(url);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run wrk: {e} (install it: apt-get install wrk)"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "wrk failed ({}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    parse(&text).map_err(|e| format!("{e} in wrk's output:\n{text}"))
}

/// "290.00us", "1.23ms", "1.00s", "2.00m" -> microseconds.
fn duration_us(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        _ => return None,
    };
    Some(v * scale)
}

fn seconds(s: &str) -> Option<f64> {
    duration_us(s).map(|us| us / 1e6)
}

pub fn parse(text: &str) -> Result<WrkResult, String> {
    let mut r = WrkResult {
        requests: 0,
        seconds: 0.0,
        rps: f64::NAN,
        p50_us: f64::NAN,
        p99_us: f64::NAN,
        non_2xx: 0,
        socket_errors: 0,
    };
    let mut saw_requests = false;
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["50%", v] => r.p50_us = duration_us(v).ok_or("bad 50% latency")?,
            ["99%", v] => r.p99_us = duration_us(v).ok_or("bad 99% latency")?,
            // "123456 requests in 5.00s, 12.34MB read"
            [n, "requests", "in", d, ..] => {
                r.requests = n.parse().map_err(|_| "bad request count")?;
                r.seconds = seconds(d.trim_end_matches(',')).ok_or("bad duration")?;
                saw_requests = true;
            }
            ["Requests/sec:", v] => r.rps = v.parse().map_err(|_| "bad Requests/sec")?,
            ["Non-2xx", "or", "3xx", "responses:", n] => {
                r.non_2xx = n.parse().map_err(|_| "bad Non-2xx count")?
            }
            // "Socket errors: connect 0, read 0, write 0, timeout 0"
            ["Socket", "errors:", rest @ ..] => {
                r.socket_errors = rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum();
            }
            _ => {}
        }
    }
    if !saw_requests || r.rps.is_nan() || r.p50_us.is_nan() || r.p99_us.is_nan() {
        return Err("missing requests, Requests/sec or latency distribution".into());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Running 5s test @ http://127.0.0.1:8080/hit
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   301.15us  100.00us   5.00ms   90.00%
    Req/Sec    25.00k     1.00k   27.00k    80.00%
  Latency Distribution
     50%  290.00us
     75%  320.00us
     90%  400.00us
     99%    1.23ms
  123456 requests in 5.00s, 12.34MB read
  Non-2xx or 3xx responses: 5
  Socket errors: connect 0, read 2, write 1, timeout 0
Requests/sec:  24691.20
Transfer/sec:      2.47MB
";

    #[test]
    fn parses_a_report() {
        let r = parse(SAMPLE).expect("parses");
        assert_eq!(r.requests, 123_456);
        assert_eq!(r.seconds, 5.0);
        assert_eq!(r.rps, 24691.20);
        assert_eq!(r.p50_us, 290.0);
        assert!((r.p99_us - 1230.0).abs() < 1e-9);
        assert_eq!((r.non_2xx, r.socket_errors), (5, 3));
    }

    #[test]
    fn units_and_missing_parts() {
        assert_eq!(duration_us("1.50s"), Some(1.5e6));
        assert_eq!(duration_us("2.00m"), Some(120e6));
        assert_eq!(duration_us("12"), None);
        assert!(parse("Running 5s test\n").is_err());
    }
}
