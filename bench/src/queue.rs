//! Queue-resume latency: with `--limit=1` and a queue, how long after the
//! slot holder finished does the next queued transaction reach the origin?
//!
//! Each trial sends one request (the holder, which the origin delays) and,
//! while it is being served, `clients - 1` more that must queue. With one
//! slot the origin sees them strictly one after another; for every request
//! that carries the plugin's queue-delay header (it was queued and resumed),
//! the wait is its origin arrival minus the origin finish of the request
//! before it. Both instants come from the in-process origin, so they are on
//! one clock. The figure includes ATS forwarding the previous response and
//! sending the next request, which a perfect hand-off would still pay.
//!
//! Trials alternate between the plugins, with a random pause, so upstream's
//! periodic sweep is sampled at every phase. A reference without a plugin
//! (see [`QueueVariant::sequential`]) shows the part of the wait that is
//! ATS's own.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ats_tests::{client, Origin, Received};

use crate::report::{time_us, Context};
use crate::stats::{max, percentile};

/// Client request header both plugins set (`--header`) on resumed transactions.
pub const DELAY_HEADER: &str = "X-Queue-Delay";

/// A rule under test: its host, and how its trials send their requests.
#[derive(Clone, Debug)]
pub struct QueueVariant {
    pub label: &'static str,
    pub host: &'static str,
    /// The reference: no plugin, and the client itself sends each next
    /// request on one keep-alive connection the moment it has the previous
    /// response. Its wait is what ATS needs between finishing one
    /// transaction and reaching the origin with the next, without any
    /// queue; a plugin's hand-off cannot do better than that.
    pub sequential: bool,
}

#[derive(Clone, Debug, Default)]
pub struct QueueResult {
    pub label: &'static str,
    /// Wait beyond the previous holder's finish, microseconds, per resumed request.
    pub waits_us: Vec<f64>,
    pub trials: usize,
    /// Requests answered with something other than 200.
    pub failed: usize,
    /// Requests after the first of a trial that reached the origin without
    /// having been queued (would mean overtaking).
    pub unqueued: usize,
    /// Requests that reached the origin before the previous one finished
    /// (would mean the limit of 1 was exceeded).
    pub overlaps: usize,
}

/// Parameters of the measurement.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub trials: usize,
    pub clients: usize,
    pub origin_delay_ms: u64,
}

/// xorshift64: pause lengths only need to be spread, not secure.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0x9E37_79B9_7F4A_7C15, |d| d.as_nanos() as u64);
        Rng(seed | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn path(id: usize, k: usize) -> String {
    format!("/q?t={id}&c={k}")
}

/// Sends the trial's requests: the holder at once, the others 10 ms later
/// (2 ms apart, so their queue order is their index); or, for the
/// sequential reference, one after another on one connection. Returns how
/// many were not answered 200.
fn trial(port: u16, v: &QueueVariant, id: usize, plan: &Plan) -> usize {
    let delay = plan.origin_delay_ms.to_string();
    let headers = [("X-Origin-Delay", delay.as_str())];
    if v.sequential {
        let Ok(mut conn) = client::Conn::open(port) else {
            return plan.clients;
        };
        return (0..plan.clients)
            .map(|k| conn.get(v.host, &path(id, k), &headers))
            .filter(|r| !matches!(r, Ok(r) if r.status == 200))
            .count();
    }
    let start = Instant::now();
    let host = v.host;
    let handles: Vec<_> = (0..plan.clients)
        .map(|k| {
            let delay = delay.clone();
            thread::spawn(move || {
                let at = if k == 0 { 0 } else { 10 + 2 * (k as u64 - 1) };
                if let Some(wait) =
                    (start + Duration::from_millis(at)).checked_duration_since(Instant::now())
                {
                    thread::sleep(wait);
                }
                client::get(port, host, &path(id, k), &[("X-Origin-Delay", &delay)])
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().ok().and_then(|r| r.ok()).map(|r| r.status))
        .filter(|s| *s != Some(200))
        .count()
}

/// The trial's origin records, once all are finished, in arrival order.
fn records(origin: &Origin, id: usize, n: usize) -> Vec<Received> {
    let prefix = format!("/q?t={id}&");
    let mut mine = Vec::new();
    // The origin marks a request finished just after writing the response,
    // which the client may have read already: wait for the bookkeeping.
    ats_tests::wait_until(Duration::from_secs(2), || {
        mine = origin
            .requests()
            .into_iter()
            .filter(|r| r.path.starts_with(&prefix))
            .collect();
        mine.len() >= n && mine.iter().all(|r| r.finished.is_some())
    });
    mine.sort_by_key(|r| r.arrived);
    mine
}

fn account(result: &mut QueueResult, recs: &[Received], queued: bool) {
    for pair in recs.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        if queued && next.header(DELAY_HEADER).is_none() {
            result.unqueued += 1;
            continue;
        }
        let Some(finished) = prev.finished else {
            continue;
        };
        match next.arrived.checked_duration_since(finished) {
            Some(wait) => result.waits_us.push(wait.as_secs_f64() * 1e6),
            None => result.overlaps += 1,
        }
    }
}

pub fn run(
    ts_port: u16,
    origin: &Origin,
    variants: &[QueueVariant],
    plan: Plan,
) -> Vec<QueueResult> {
    let mut results: Vec<QueueResult> = variants
        .iter()
        .map(|v| QueueResult {
            label: v.label,
            ..Default::default()
        })
        .collect();
    let mut rng = Rng::new();
    let mut id = 0;
    for t in 0..plan.trials {
        // Alternate which plugin goes first, so neither always follows the other.
        let order: Vec<usize> = if t % 2 == 0 {
            (0..variants.len()).collect()
        } else {
            (0..variants.len()).rev().collect()
        };
        for i in order {
            id += 1;
            let failed = trial(ts_port, &variants[i], id, &plan);
            let recs = records(origin, id, plan.clients);
            let r = &mut results[i];
            r.trials += 1;
            r.failed += failed + plan.clients.saturating_sub(recs.len());
            account(r, &recs, !variants[i].sequential);
            thread::sleep(Duration::from_millis(rng.below(50)));
        }
        if (t + 1) % 10 == 0 || t + 1 == plan.trials {
            eprintln!("queue-resume: {}/{} trials", t + 1, plan.trials);
        }
    }
    results
}

pub fn queue_section(ctx: &Context, plan: &Plan, options: &str, results: &[QueueResult]) -> String {
    let mut s = String::from("## Queue-resume latency\n\n");
    s += &ctx.provenance();
    let _ = writeln!(
        s,
        "Both plugins on their own rule with `{options}`, in the same traffic_server, to the \
         harness's in-process origin, which delays every response {} ms and stamps arrival and \
         finish. A trial sends one request (it takes the slot) and {} more 10–{} ms later (they \
         queue); trials alternate between the rules with a random 0–50 ms pause, {} per rule. \
         **Wait** = origin arrival of a resumed request (one carrying the plugin's delay header) \
         − origin finish of the request before it. It includes ATS delivering the previous \
         response, closing that transaction and sending the next request, which an instant \
         hand-off would still pay: the reference row measures that part alone, on a rule \
         without a plugin where one client sends the next request on the same connection as \
         soon as it has the previous response.\n",
        plan.origin_delay_ms,
        plan.clients - 1,
        10 + 2 * (plan.clients.saturating_sub(2)),
        plan.trials
    );
    s += "| rule | requests measured | p50 | p90 | p99 | max | mean |\n|---|--:|--:|--:|--:|--:|--:|\n";
    let mut notes = Vec::new();
    for r in results {
        let w = &r.waits_us;
        let mean = w.iter().sum::<f64>() / w.len().max(1) as f64;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            w.len(),
            time_us(percentile(w, 50.0)),
            time_us(percentile(w, 90.0)),
            time_us(percentile(w, 99.0)),
            time_us(max(w)),
            time_us(mean)
        );
        if r.failed + r.unqueued + r.overlaps > 0 {
            notes.push(format!(
                "{}: {} requests not answered 200, {} reached the origin without having been \
                 queued (overtaking), {} overlapped the previous one (limit exceeded)",
                r.label, r.failed, r.unqueued, r.overlaps
            ));
        }
    }
    if notes.is_empty() {
        s += "\nEvery request was answered 200; every request after a trial's first was queued \
              and resumed in turn, never overlapping the one before.\n";
    } else {
        let _ = writeln!(s, "\n**Anomalies:** {}.", notes.join("; "));
    }
    s + "\n"
}
