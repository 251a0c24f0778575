//! `ci/demo.sh`: runs traffic_server on 127.0.0.1 with both plugins on
//! example rules in front of a demo origin, and prints what to try.
//!
//! Usage: ats-demo [--port N] [--dir DIR]   (plugins from $ATS_PLUGIN_DIR)
//!
//! SIGINT, SIGTERM and SIGHUP (Ctrl-C, `timeout`, `docker stop`, a closed
//! terminal) stop it, and traffic_manager and traffic_server with it.

#![forbid(unsafe_code)]

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ats_tests::{plugin, Origin, TrafficServer};

fn main() {
    let mut port: u16 = 8080;
    let mut dir = String::from("target/demo");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--port", Some(v)) => {
                port = v
                    .parse()
                    .unwrap_or_else(|_| die(&format!("bad --port {v}")))
            }
            ("--dir", Some(v)) => dir = v,
            _ => die("usage: ats-demo [--port N] [--dir DIR]"),
        }
    }
    // Before anything starts: a signal during startup must not kill this
    // process alone and leave traffic_server behind (and as PID 1 in a
    // container, a signal without a handler is ignored).
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::SeqCst))
        .unwrap_or_else(|e| die(&format!("signal handler: {e}")));
    let origin = Origin::start();
    let rate = plugin("rate_limit");
    let throttle = plugin("throttle");
    let ipt = plugin("ip_throttle");
    let o = origin.url();
    // A global rule when a Redis answers on its default port (issue 14).
    let redis_up = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], 6379)),
        Duration::from_millis(200),
    )
    .is_ok();
    let global = if redis_up {
        format!(
            "# Fleet-wide on the local Redis: 5 requests/s and 2 at once, shared by every proxy using it.\n\
             map http://global.demo/ {} @plugin={rate} @pparam=--rate=5 @pparam=--limit=2 @pparam=--queue=0 \
             @pparam=--group=demo-global @pparam=--store=redis://127.0.0.1:6379 @pparam=--store-failure=local\n",
            origin.url()
        )
    } else {
        String::new()
    };
    let remap = format!(
        "# Two slots, four queue places (3 s max), 429 with Retry-After beyond that.\n\
         map http://rate.demo/ {o} @plugin={rate} @pparam=--limit=2 @pparam=--queue=4 @pparam=--maxage=3000 \
         @pparam=--retry=1 @pparam=--header=X-Queue-Delay @pparam=--ratelimit-headers @pparam=--tag=demo\n\
         # 5 requests per second, bursts of 5; over that: 429 at once.\n\
         map http://rps.demo/ {o} @plugin={rate} @pparam=--rate=5 @pparam=--queue=0 @pparam=--tag=rps\n\
         # Two uncached requests at a time; over that, stale copies up to 60 s old, else 503.\n\
         map http://throttle.demo/ {o} @plugin={throttle} @pparam=id:demo @pparam=max:2 @pparam=stale:60 @pparam=statfreq:5000\n\
         # Perlbal-style per-IP throttling: 1 s delay doubling to 4 s, banned (403) for 10 s after 3 violations.\n\
         map http://ip.demo/ {o} @plugin={ipt} @pparam=--initial-delay=1 @pparam=--max-delay=4 @pparam=--threshold=2 \
         @pparam=--ban-threshold=3 @pparam=--ban-expiration=10\n{global}"
    );
    let ts = TrafficServer::builder()
        .root(&dir)
        .port(port)
        .remap(remap)
        .with_manager()
        .start()
        .unwrap_or_else(|e| die(&format!("traffic_server did not start: {e:?}")));
    let root = ts.root().display().to_string();
    let u = format!("http://127.0.0.1:{port}");
    let ctl = ats_tests::ats::bin("traffic_ctl").display().to_string();
    let lag = if ats_tests::ats::has_manager() {
        "\n         (values reach traffic_ctl up to ~10 s late in ATS 9.2)"
    } else {
        ""
    };
    println!(
        r#"
Traffic Server is running on {u} (runroot {root}), origin {o}.
Rules (remap.config: {root}/etc/remap.config):
  rate.demo      rate_limit.so --limit=2 --queue=4 --maxage=3000 --retry=1 --header=X-Queue-Delay --ratelimit-headers
  rps.demo       rate_limit.so --rate=5 --queue=0
  throttle.demo  throttle.so id:demo max:2 stale:60 statfreq:5000
  ip.demo        ip_throttle.so --initial-delay=1 --max-delay=4 --threshold=2 --ban-threshold=3 --ban-expiration=10
The demo origin obeys request headers: X-Origin-Delay: <ms>, X-Origin-Status, X-Origin-CC: <Cache-Control>.

Try:
  curl -si -H 'Host: rate.demo' {u}/
  # 8 slow requests at once: 2 run, 4 queue (see X-Queue-Delay at the origin), 2 get 429
  for i in $(seq 8); do curl -s -o /dev/null -w '%{{http_code}} %{{time_total}}s\n' -H 'Host: rate.demo' -H 'X-Origin-Delay: 1000' {u}/$i & done; wait
  # 10 quick requests against 5/s: 5 pass, the rest get 429
  for i in $(seq 10); do curl -s -o /dev/null -w '%{{http_code}}\n' -H 'Host: rps.demo' {u}/; done
  # Cache a page that is stale at once, then overload the rule: the stale copy is served with a Warning
  curl -s -o /dev/null -H 'Host: throttle.demo' -H 'X-Origin-CC: max-age=0' {u}/page
  for i in 1 2; do curl -s -o /dev/null -H 'Host: throttle.demo' -H 'X-Origin-Delay: 3000' {u}/slow$i & done; sleep 0.3
  curl -si -H 'Host: throttle.demo' {u}/page | grep -E 'HTTP|Warning'
  curl -si -H 'Host: throttle.demo' {u}/other | head -1    # 503: full and nothing stale
  # Per-IP: one after another, delayed 0, 1, 2, 4, 4 s, then 403 (banned for 10 s)
  for i in $(seq 7); do curl -s -o /dev/null -w '%{{http_code}} %{{time_total}}s\n' -H 'Host: ip.demo' {u}/; done

Logs:    {root}/log/throttle.log (a line every 5 s), {root}/log/ip_throttle.log (events), {root}/log/diags.log
Metrics: TS_RUNROOT={root}/runroot.yaml {ctl} metric match 'rate_limiter|throttle'{lag}
Press Ctrl-C to stop."#
    );
    if redis_up {
        println!(
            "A Redis answers on 127.0.0.1:6379, so there is also a fleet-wide rule:\n  \
             global.demo    rate_limit.so --rate=5 --limit=2 --queue=0 --group=demo-global \
             --store=redis://127.0.0.1:6379 --store-failure=local\n  \
             for i in $(seq 10); do curl -s -o /dev/null -w '%{{http_code}}\\n' -H 'Host: global.demo' {u}/; done\n  \
             redis-cli --scan --pattern 'rl:{{demo-global}}*'"
        );
    }
    let mut ts = ts;
    let mut failed = false;
    while !stop.load(Ordering::SeqCst) {
        if !ts.is_running() {
            let _ = writeln!(
                std::io::stderr(),
                "ats-demo: traffic_server stopped; see {root}/log/diags.log"
            );
            failed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Not println!: after SIGHUP the terminal may be gone; a failed write must not panic.
    let _ = writeln!(std::io::stdout(), "stopping");
    // Kills traffic_manager and traffic_server (their process group) and
    // waits until none is left; exit() below would skip it.
    drop(ts);
    drop(origin);
    std::process::exit(i32::from(failed));
}

fn die(msg: &str) -> ! {
    eprintln!("ats-demo: {msg}");
    std::process::exit(1);
}
