//! `ats-bench tls`'s command line.

use std::path::PathBuf;

pub const USAGE: &str = "\
usage: ats-bench tls [--smoke] [--out FILE] [options]

  --smoke            5 connections per window, 1 repetition, a 2.5 s flood; FILE is not written
  --out FILE         update the generated tls section of FILE (e.g. BENCHMARKS.md)
  --connections N    TLS connections per callgrind window (default 100)
  --reps N           callgrind windows per configuration; the median is reported (default 3)
  --flood-rate N     the flooder's connections per second (default 2000)
  --light N          the light client's handshakes, 50 ms apart (default 200: 10 s)
  --dumps DIR        keep callgrind's dump files there (default: a temp dir, removed)
  --no-icount, --no-flood
                     skip a part
";

#[derive(Clone, Debug)]
pub struct Args {
    pub smoke: bool,
    pub out: Option<PathBuf>,
    pub connections: u64,
    pub warmup: u64,
    pub reps: usize,
    pub flood_rate: f64,
    pub light: u64,
    pub dumps: Option<PathBuf>,
    pub icount: bool,
    pub flood: bool,
}

pub(super) fn parse_args(argv: &[String]) -> Result<Args, String> {
    let smoke = argv.iter().any(|a| a == "--smoke");
    let mut a = Args {
        smoke,
        out: None,
        connections: if smoke { 5 } else { 100 },
        warmup: if smoke { 2 } else { 10 },
        reps: if smoke { 1 } else { 3 },
        flood_rate: 2000.0,
        light: if smoke { 20 } else { 200 },
        dumps: None,
        icount: true,
        flood: true,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        let num = |v: String| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{arg}: '{v}' is not a valid number"))
        };
        match arg.as_str() {
            "--smoke" => {}
            "--out" => a.out = Some(PathBuf::from(value()?)),
            "--connections" => a.connections = num(value()?)?,
            "--reps" => a.reps = num(value()?)? as usize,
            "--flood-rate" => a.flood_rate = num(value()?)? as f64,
            "--light" => a.light = num(value()?)?,
            "--dumps" => a.dumps = Some(PathBuf::from(value()?)),
            "--no-icount" => a.icount = false,
            "--no-flood" => a.flood = false,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.smoke && a.out.is_some() {
        return Err("--smoke numbers are meaningless: not writing them to --out".into());
    }
    if a.connections == 0 || a.reps == 0 || a.flood_rate < 1.0 || a.light == 0 {
        return Err("--connections, --reps, --flood-rate and --light must be > 0".into());
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Args, String> {
        parse_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn options() {
        let a = args(&[]).expect("defaults");
        assert_eq!((a.connections, a.reps, a.light), (100, 3, 200));
        let s = args(&["--smoke", "--no-flood"]).expect("valid");
        assert_eq!((s.connections, s.reps), (5, 1));
        assert!(!s.flood && s.icount);
        assert!(args(&["--smoke", "--out", "B.md"]).is_err());
        assert!(args(&["--reps", "0"]).is_err());
        assert!(args(&["--bogus"]).is_err());
    }
}
