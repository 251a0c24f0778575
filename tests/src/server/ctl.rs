//! Talking to a running instance through `traffic_ctl`: metrics, plugin
//! messages and their answers, remap reloads.

use std::fs;
use std::process::{Command, Output};
use std::time::Duration;

use super::TrafficServer;
use crate::ats;
use crate::wait_until;

impl TrafficServer {
    /// Runs this version's `traffic_ctl` against this instance (needs
    /// [`TsBuilder::with_manager`]).
    pub fn traffic_ctl(&self, args: &[&str]) -> Output {
        assert!(
            self.ctl,
            "traffic_ctl needs the instance started with_manager()"
        );
        Command::new(ats::bin("traffic_ctl"))
            .args(args)
            .env("TS_RUNROOT", self.dir.path().join("runroot.yaml"))
            .output()
            .expect("cannot run traffic_ctl")
    }

    /// Sends `traffic_ctl plugin msg TARGET "@ID COMMAND"` with a fresh request
    /// id and returns the answer: its lines in `<plugin>_ctl.log` (`plugin`
    /// is the tag up to its first dot) joined into one JSON object (see
    /// [`join_answer`]). Panics if the answer is not whole within 30 s.
    pub fn plugin_msg(&self, tag: &str, command: &str) -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = format!(
            "t{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let plugin = tag.split('.').next().unwrap_or(tag);
        let log = format!("{plugin}_ctl.log");
        let out = self.traffic_ctl(&["plugin", "msg", tag, &format!("@{id} {command}")]);
        assert!(out.status.success(), "traffic_ctl: {out:?}");
        let found = self.wait_for_log(&log, Duration::from_secs(30), |t| {
            join_answer(t, &id).is_some()
        });
        let text = self.log(&log);
        assert!(
            found,
            "no whole answer to {command:?} (request {id}) in {log}: {text}"
        );
        let answer = join_answer(&text, &id).unwrap_or_default();
        assert!(
            answer.contains(&format!(
                "\"command\":{}",
                serde_json::json!(format!("{tag} {command}"))
            )),
            "the answer echoes the command: {answer}"
        );
        answer
    }

    /// Current value of a metric, through `traffic_ctl metric get`: both
    /// 9.2 and 10.x print `NAME VALUE` (nothing on stdout for an unknown
    /// metric).
    pub fn metric(&self, name: &str) -> Option<i64> {
        let out = self.traffic_ctl(&["metric", "get", name]);
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| match l.trim().split_once(char::is_whitespace) {
                Some((n, v)) if n == name => Some(v.trim()),
                _ => None,
            })
            .and_then(|v| v.parse().ok())
    }

    /// Waits until metric `name` reads `expected`. In 9.2 a plugin metric
    /// reaches `traffic_ctl` through two 5 s sync cycles (raw stats, then the
    /// manager), so values lag up to ~10 s; 10.x reads them live. Returns
    /// the last value read.
    pub fn wait_metric(&self, name: &str, expected: i64) -> Result<i64, Option<i64>> {
        let mut last = None;
        if wait_until(Duration::from_secs(25), || {
            last = self.metric(name);
            last == Some(expected)
        }) {
            Ok(expected)
        } else {
            Err(last)
        }
    }

    /// Waits until every `witnesses` metric reads its value, then until every
    /// `expected` one does. For checks that a gauge came back down to 0: in
    /// 9.2 a metric that has not synced yet also reads 0, so a 0 proves
    /// nothing until a later snapshot is known to be visible. A witness is a
    /// counter with a known final value, not 0, that the code bumps after
    /// the gauge's increments (rate_limit bumps `admitted` after `active`,
    /// `queued` after `waiting`): once it reads final, so do those increments,
    /// and a 0 then means they were all undone.
    pub fn wait_metrics_after(
        &self,
        witnesses: &[(&str, i64)],
        expected: &[(&str, i64)],
    ) -> Result<(), String> {
        if witnesses.is_empty() {
            return Err("no witness: a 0 read now could be a metric not synced yet".into());
        }
        for &(name, want) in witnesses {
            if want == 0 {
                return Err(format!(
                    "witness {name} = 0 proves nothing: unsynced metrics read 0"
                ));
            }
            self.wait_metric(name, want)
                .map_err(|last| format!("witness {name}: expected {want}, last read {last:?}"))?;
        }
        for &(name, want) in expected {
            self.wait_metric(name, want).map_err(|last| {
                format!(
                    "{name}: expected {want}, last read {last:?} (witnesses synced: {witnesses:?})"
                )
            })?;
        }
        Ok(())
    }

    /// Writes a new remap.config and reloads it with `traffic_ctl config
    /// reload`. `Ok` once ATS logged it loaded the new file; `Err` with the
    /// diags.log lines of the attempt if ATS refused it (the old rules stay).
    /// 9.2 and 10.1 log the same NOTE / ERROR lines.
    pub fn reload_remap(&self, remap: &str) -> Result<(), String> {
        const DONE: &str = "remap.config finished loading";
        const FAILED: &str = "remap.config failed to load";
        let before = self.diags().len();
        fs::write(self.config_dir().join("remap.config"), remap).map_err(|e| e.to_string())?;
        let out = self.traffic_ctl(&["config", "reload"]);
        if !out.status.success() {
            return Err(format!(
                "traffic_ctl config reload: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut outcome = None;
        wait_until(Duration::from_secs(15), || {
            let text = self.diags();
            let new = text.get(before..).unwrap_or_default();
            if new.contains(FAILED) {
                outcome = Some(Err(new.to_owned()));
            } else if new.contains(DONE) {
                outcome = Some(Ok(()));
            }
            outcome.is_some()
        });
        outcome.unwrap_or_else(|| Err("remap.config was not reloaded within 15 s".into()))
    }
}

/// The answer to request `id` in a `<plugin>_ctl.log` text, its lines
/// joined as docs/rate_limit.md ("Live control") says: by `split` array or
/// by `chunk` (without the `part`, `parts` and `split` fields); `None`
/// until every part is there.
pub fn join_answer(log: &str, id: &str) -> Option<String> {
    use serde_json::Value;
    let mut parts: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["request"].as_str() == Some(id))
        .collect();
    let n = parts.first()?["parts"].as_u64()? as usize;
    parts.sort_by_key(|p| p["part"].as_u64());
    parts.dedup_by_key(|p| p["part"].as_u64());
    if parts.len() != n || (1..=n).any(|i| parts[i - 1]["part"].as_u64() != Some(i as u64)) {
        return None;
    }
    let mut out = if parts[0].get("chunk").is_some() {
        let text: String = parts.iter().filter_map(|p| p["chunk"].as_str()).collect();
        serde_json::from_str(&text).ok()?
    } else {
        let mut out = parts[0].clone();
        if let Some(name) = parts[0]["split"].as_str() {
            let all: Vec<Value> = parts
                .iter()
                .flat_map(|p| p[name].as_array().cloned().unwrap_or_default())
                .collect();
            out[name] = Value::Array(all);
        }
        out
    };
    let o = out.as_object_mut()?;
    for k in ["part", "parts", "split"] {
        o.remove(k);
    }
    Some(out.to_string())
}
