//! rate_limit.so's peer exchange (`--peers`, DThrottle) against real
//! traffic_servers on loopback: three peered servers against three alone
//! under one client spraying one key, a server peering with `dthrottled`,
//! forged, garbage and replayed datagrams, a dead peer, and a socket that
//! cannot be opened.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::Conn;
use ats_tests::{wait_until, Origin, TrafficServer};

const SECRET: &str = "integration-test-secret-0123456789";
const HOST: &str = "p.test";

fn udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("udp bind");
    s.local_addr().expect("addr").port()
}

fn peers_list(ports: &[u16]) -> String {
    let v: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    v.join(",")
}

/// A traffic_server whose rule limits each `X-Client` to `limits`; peered
/// with `peers` (listening on `listen`) unless `peers` is empty.
fn server(
    origin: &Origin,
    limits: &str,
    listen: u16,
    peers: &[u16],
    manager: bool,
) -> TrafficServer {
    let mut params = format!("--key=header:X-Client --queue=0 {limits}");
    if !peers.is_empty() {
        params += &format!(
            " --group=g --peers={} --peer-listen=127.0.0.1:{listen} --peer-secret-file=peer.secret",
            peers_list(peers)
        );
    }
    let mut b = TrafficServer::builder()
        .config_file("peer.secret", &format!("{SECRET}\n"))
        .remap(ats_tests::rule("rate_limit", HOST, origin, &params));
    if manager {
        b = b.with_manager();
    }
    b.start().expect("start traffic_server")
}

fn status(c: &mut Conn, client: &str) -> u16 {
    c.get(HOST, "/", &[("X-Client", client)])
        .map(|r| r.status)
        .unwrap_or(0)
}

/// Sprays `client` round-robin over `ports`, one request every `gap`, for
/// `run`; returns the seconds (since the start) of each admitted request,
/// and the number sent.
fn spray(ports: &[u16], client: &str, gap: Duration, run: Duration) -> (Vec<f64>, usize) {
    let mut conns: Vec<Conn> = ports
        .iter()
        .map(|p| Conn::open(*p).expect("connect"))
        .collect();
    let start = Instant::now();
    let mut admitted = Vec::new();
    let mut sent = 0;
    while start.elapsed() < run {
        let c = &mut conns[sent % ports.len()];
        let at = start.elapsed().as_secs_f64();
        match status(c, client) {
            200 => admitted.push(at),
            429 => {}
            s => panic!("unexpected status {s}"),
        }
        sent += 1;
        let next = gap * sent as u32;
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            thread::sleep(wait);
        }
    }
    (admitted, sent)
}

/// DThrottle's bound: b + 1 + rT + (N−1)(b + 1 + r(P+d)).
fn bound(n: f64, b: f64, r: f64, t: f64, p: f64, d: f64) -> f64 {
    b + 1.0 + r * t + (n - 1.0) * (b + 1.0 + r * (p + d))
}

/// The largest excess of admitted requests over the bound in any window.
fn worst_window(admitted: &[f64], limit: impl Fn(f64) -> f64) -> Option<(usize, f64)> {
    for i in 0..admitted.len() {
        for j in i..admitted.len() {
            let count = j - i + 1;
            if count as f64 > limit(admitted[j] - admitted[i]) {
                return Some((count, admitted[j] - admitted[i]));
            }
        }
    }
    None
}

fn timeline(label: &str, admitted: &[f64], run: f64) {
    let mut line = format!("{label}: admitted by t=");
    let mut t = 0.5;
    while t <= run + 1e-9 {
        let n = admitted.iter().filter(|&&a| a < t).count();
        line += &format!(" {t:.1}s:{n}");
        t += 0.5;
    }
    eprintln!("{line}");
}

const RATE: f64 = 2.0;
const BURST: f64 = 4.0;
const PERIOD_S: f64 = 0.2;
/// Network delay, the transport's poll and the plugin's tick, with room for
/// the client's own timing.
const DELAY_S: f64 = 0.1;

fn limits() -> String {
    format!(
        "--rate={RATE} --burst={BURST} --peer-period={}",
        (PERIOD_S * 1000.0) as u64
    )
}

#[test]
fn three_peered_servers_hold_one_client_near_its_rate_and_three_alone_do_not() {
    let origin = Origin::start();
    let udp: Vec<u16> = (0..3).map(|_| udp_port()).collect();
    let peered: Vec<TrafficServer> = (0..3)
        .map(|i| {
            let others: Vec<u16> = (0..3).filter(|&j| j != i).map(|j| udp[j]).collect();
            server(&origin, &limits(), udp[i], &others, false)
        })
        .collect();
    let alone: Vec<TrafficServer> = (0..3)
        .map(|_| {
            server(
                &origin,
                &format!("--rate={RATE} --burst={BURST}"),
                0,
                &[],
                false,
            )
        })
        .collect();
    let run = Duration::from_secs(6);
    let gap = Duration::from_millis(25);
    let ports = |v: &[TrafficServer]| v.iter().map(|t| t.port()).collect::<Vec<_>>();
    let (pp, ap) = (ports(&peered), ports(&alone));
    let other = thread::spawn(move || spray(&ap, "c1", gap, run));
    let (with, sent) = spray(&pp, "c1", gap, run);
    let (without, _) = other.join().expect("sprayer");
    let t = run.as_secs_f64();
    timeline("with exchange", &with, t);
    timeline("without exchange", &without, t);
    let limit = |w: f64| bound(3.0, BURST, RATE, w, PERIOD_S, DELAY_S);
    eprintln!(
        "sent {sent} per set; admitted with exchange {}, without {}; bound over {t} s {:.1}; 3·(b + rT) = {}",
        with.len(),
        without.len(),
        limit(t),
        3.0 * (BURST + RATE * t)
    );
    assert_eq!(worst_window(&with, limit), None, "with exchange: {with:?}");
    assert!(with.len() as f64 >= BURST + RATE * t * 0.8, "{with:?}");
    // Alone, each server gives the client its own bucket: about 3·(b + rT),
    // which at 25 ms spacing is 45, one above 0.9 of it; 0.8, as `with`
    // above, lets one sprayer stall pass. Over limit(t) is what tells the two
    // sets apart.
    assert!(
        without.len() as f64 > limit(t) && without.len() as f64 >= 0.8 * 3.0 * (BURST + RATE * t),
        "without exchange: {}",
        without.len()
    );
}

#[test]
fn a_peer_that_dies_leaves_the_others_limiting_and_exchanging() {
    let origin = Origin::start();
    let udp: Vec<u16> = (0..3).map(|_| udp_port()).collect();
    let mut servers: Vec<TrafficServer> = (0..3)
        .map(|i| {
            let others: Vec<u16> = (0..3).filter(|&j| j != i).map(|j| udp[j]).collect();
            server(&origin, &limits(), udp[i], &others, false)
        })
        .collect();
    drop(servers.pop());
    let ports: Vec<u16> = servers.iter().map(|t| t.port()).collect();
    let run = Duration::from_secs(4);
    let (admitted, sent) = spray(&ports, "c1", Duration::from_millis(25), run);
    let t = run.as_secs_f64();
    timeline("two alive", &admitted, t);
    let limit = |w: f64| bound(2.0, BURST, RATE, w, PERIOD_S, DELAY_S);
    assert_eq!(worst_window(&admitted, limit), None, "{admitted:?}");
    // Still serving at about the rate: no failing closed.
    assert!(
        admitted.len() as f64 >= BURST + RATE * t * 0.8,
        "{admitted:?} of {sent}"
    );
    for ts in &servers {
        assert!(
            ts.diags().contains("peer exchange on 127.0.0.1:"),
            "{}",
            ts.diags()
        );
    }
}

#[test]
fn forged_garbage_and_replayed_datagrams_have_no_effect_and_are_counted() {
    let origin = Origin::start();
    let me = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let my_port = me.local_addr().expect("addr").port();
    let listen = udp_port();
    // A token comes back every 1/rate = 1000 s, far beyond what the waits
    // below may take (three metric waits of at most 25 s each), so no refill
    // can hide a peer's hit. At 0.1/s, 9.2's metrics (up to 10 s late) let
    // c6 regain a token before its requests: [200, 200, 429].
    let ts = server(&origin, "--rate=0.001 --burst=3", listen, &[my_port], true);
    let to: SocketAddr = ([127, 0, 0, 1], listen).into();
    let now = peer::unix_ms();
    let entries = |tag: &str, hits: u32| vec![(Box::from(tag.as_bytes()), hits)];
    // Another secret: a forgery that would drain c1.
    let wrong = peer::Key::new(b"not-the-secret-at-all-0123").expect("key");
    let mut seq = 0;
    for dg in peer::wire::encode(&wrong, 7, &mut seq, now, b"g", &entries("c1", 1000)) {
        for _ in 0..5 {
            me.send_to(&dg, to).expect("send");
        }
    }
    me.send_to(
        b"DT\x01garbage that is long enough to be looked at, and more bytes",
        to,
    )
    .expect("send");
    me.send_to(&[0u8; 2000], to).expect("send");
    me.send_to(b"DT", to).expect("send");
    // With the right secret: c5's 100 hits count once; c6's 2 hits, sent
    // twice, count once (the second copy is a replay).
    let right = peer::Key::new(SECRET.as_bytes()).expect("key");
    let mut seq = 0;
    for dg in peer::wire::encode(&right, 42, &mut seq, now, b"g", &entries("c5", 100)) {
        me.send_to(&dg, to).expect("send");
    }
    let c6 = peer::wire::encode(&right, 42, &mut seq, now, b"g", &entries("c6", 2));
    for _ in 0..2 {
        me.send_to(&c6[0], to).expect("send");
    }
    // The reports are applied by a task every 10 ms; the metrics move after
    // that, so once they show every datagram was handled the buckets are
    // final (no fixed sleep: a loaded machine may take longer).
    // 5 bad MACs, 3 malformed (garbage, oversized, truncated), 1 replay.
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_rejected", 9),
        Ok(9)
    );
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_reports_received", 2),
        Ok(2)
    );
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_hits_applied", 102),
        Ok(102)
    );
    let mut c = Conn::open(ts.port()).expect("connect");
    let c1: Vec<u16> = (0..4).map(|_| status(&mut c, "c1")).collect();
    assert_eq!(c1, [200, 200, 200, 429], "the forgery drained nothing");
    assert_eq!(status(&mut c, "c5"), 429, "a genuine report drains its tag");
    let c6: Vec<u16> = (0..3).map(|_| status(&mut c, "c6")).collect();
    assert_eq!(c6, [200, 429, 429], "2 of 3 tokens taken by peers, not 4");
    // Its own reports reach its peer (here, this test): c1's 3 hits, in one
    // report or spread over two if a period ended between the requests.
    me.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    let mut c1_hits = 0;
    let mut seen = Vec::new();
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while c1_hits < 3 && std::time::Instant::now() < end {
        let (n, _) = me
            .recv_from(&mut buf)
            .expect("a report from traffic_server");
        let dg = peer::wire::open(&right, &buf[..n]).expect("authentic");
        assert_eq!(&*dg.group, b"g");
        c1_hits += dg
            .entries
            .iter()
            .filter(|(t, _)| &**t == b"c1")
            .map(|(_, h)| *h)
            .sum::<u32>();
        seen.push(dg);
    }
    assert_eq!(c1_hits, 3, "{seen:?}");
    // Metrics reach traffic_ctl up to 10 s late in 9.2.
    assert!(wait_until(Duration::from_secs(15), || {
        ts.metric("plugin.rate_limiter.peer_reports_sent")
            .unwrap_or(0)
            >= 1
    }));
}

/// Issue 21: 2x `--keys` distinct client-chosen keys (header values) within
/// one `--peer-period` do not lock a new client out, and the flood's hits,
/// of keys evicted before the report, still reach the peer (this test).
#[test]
fn a_flood_of_one_off_keys_locks_no_new_client_out_and_its_hits_reach_peers() {
    let origin = Origin::start();
    let me = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let my_port = me.local_addr().expect("addr").port();
    let listen = udp_port();
    // One period of 3 s: the flood (100 requests on one connection) fits in
    // it, or is split by one report at most, which the old code (keys with
    // unreported hits never evicted) could not make up for.
    let limits = "--rate=0.01 --burst=1 --keys=50 --peer-period=3000";
    let ts = server(&origin, limits, listen, &[my_port], false);
    let mut c = Conn::open(ts.port()).expect("connect");
    for i in 0..100 {
        assert_eq!(status(&mut c, &format!("flood-{i}")), 200, "flood key {i}");
    }
    assert_eq!(
        status(&mut c, "honest"),
        200,
        "a new client after the flood"
    );
    assert_eq!(status(&mut c, "honest"), 429, "and limited as usual");
    let right = peer::Key::new(SECRET.as_bytes()).expect("key");
    me.set_read_timeout(Some(Duration::from_secs(4)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    let mut hits = 0u32;
    let end = Instant::now() + Duration::from_secs(15);
    while hits < 101 && Instant::now() < end {
        let Ok((n, _)) = me.recv_from(&mut buf) else {
            continue;
        };
        let dg = peer::wire::open(&right, &buf[..n]).expect("authentic");
        hits += dg.entries.iter().map(|(_, h)| *h).sum::<u32>();
    }
    assert_eq!(hits, 101, "every admitted request reported");
}

#[test]
fn a_socket_that_cannot_be_opened_leaves_the_rule_limiting_locally() {
    let origin = Origin::start();
    let taken = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let port = taken.local_addr().expect("addr").port();
    let ts = server(&origin, "--rate=0.1 --burst=2", port, &[udp_port()], false);
    // A port in use is tried again (an older copy of the plugin may hold
    // it until its rules are gone); meanwhile the rule limits locally.
    assert!(
        ts.diags()
            .contains("peer exchange not started, limiting locally"),
        "{}",
        ts.diags()
    );
    let mut c = Conn::open(ts.port()).expect("connect");
    let s: Vec<u16> = (0..3).map(|_| status(&mut c, "c1")).collect();
    assert_eq!(s, [200, 200, 429]);
}

#[test]
fn bad_peer_options_fail_the_rule_naming_option_value_and_allowed() {
    let origin = Origin::start();
    let err = TrafficServer::builder()
        .remap(ats_tests::rule(
            "rate_limit",
            HOST,
            &origin,
            "--key=ip --rate=1 --group=g --peers=127.0.0.1:9 --peer-period=5 --peer-secret-file=s",
        ))
        .start()
        .err()
        .expect("the rule must fail");
    assert!(
        err.diags.contains(
            "--peer-period has an invalid value '5': allowed an integer from 10 to 60000"
        ),
        "{}",
        err.diags
    );
}

/// The `dthrottled` binary of this build profile (built on first use).
fn dthrottled() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    let mut dir = exe.parent().expect("dir").to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(p) => p.to_owned(),
        None => panic!("unexpected target layout"),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("ws");
    let ok = Command::new(cargo)
        .current_dir(workspace)
        .args([
            "build",
            "--quiet",
            "-p",
            "dthrottled",
            "--profile",
            &profile,
        ])
        .arg("--target-dir")
        .arg(dir.parent().expect("target"))
        .status()
        .expect("cargo")
        .success();
    assert!(ok, "building dthrottled failed");
    dir.join("dthrottled")
}

struct Daemon {
    child: Child,
    tcp: SocketAddr,
    /// Every line the daemon wrote on stderr (its stats lines).
    lines: Arc<Mutex<Vec<String>>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// The last `name=value` of the daemon's stats lines (`stats_interval_s`).
    fn stat(&self, name: &str) -> Option<u64> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let want = format!("{name}=");
        lines
            .iter()
            .rev()
            .filter(|l| l.starts_with("dthrottled: stats "))
            .find_map(|l| {
                l.split(' ')
                    .find_map(|w| w.strip_prefix(want.as_str()))
                    .and_then(|v| v.parse().ok())
            })
    }
}

fn start_daemon(config: &str) -> Daemon {
    let dir = tempfile_dir();
    let secret = dir.join("secret");
    std::fs::write(&secret, SECRET).expect("secret");
    let file = dir.join("dthrottled.conf");
    std::fs::write(
        &file,
        format!(
            "listen_tcp = 127.0.0.1:0\npeer_secret_file = {}\n{config}",
            secret.display()
        ),
    )
    .expect("config");
    let mut child = Command::new(dthrottled())
        .arg("--config")
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dthrottled");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut tcp = None;
    let mut peering = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while (tcp.is_none() || !peering) && Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(a) = line.strip_prefix("dthrottled: listening on tcp ") {
            tcp = a.parse().ok();
        }
        peering |= line.starts_with("dthrottled: peer socket");
    }
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            k.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    Daemon {
        child,
        tcp: tcp.expect("dthrottled did not start"),
        lines: kept,
    }
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "peers-test-{}-{}",
        std::process::id(),
        peer::unix_ms()
    ));
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn ask(conn: &mut TcpStream, tag: &str, n: usize) -> Vec<String> {
    conn.write_all(format!("{tag}\n").repeat(n).as_bytes())
        .expect("write");
    let mut buf = vec![0u8; 3 * n];
    conn.read_exact(&mut buf).expect("answers");
    buf.chunks(3)
        .map(|a| String::from_utf8_lossy(&a[..2]).into_owned())
        .collect()
}

/// Each side spends a client's burst while the other sends nothing for
/// it; only once the other side shows it applied the hits (a metric, a
/// stats line) is it asked once, and it must refuse. Alone, its own fresh
/// burst would serve that request: this passes only if reports cross in
/// both directions. The rate is so slow (one token per 20 s) that nothing
/// refills while the metrics sync.
#[test]
fn a_traffic_server_and_dthrottled_peer_with_each_other() {
    let origin = Origin::start();
    let (ts_udp, d_udp) = (udp_port(), udp_port());
    let daemon = start_daemon(&format!(
        "burst = 5\nrate = 0.05\nperiod_ms = 200\npeers = 127.0.0.1:{ts_udp}\n\
         peer_listen = 127.0.0.1:{d_udp}\npeer_name = g\nstats_interval_s = 1\n"
    ));
    let ts = server(
        &origin,
        "--rate=0.05 --burst=5 --peer-period=200",
        ts_udp,
        &[d_udp],
        true,
    );
    let mut d = TcpStream::connect(daemon.tcp).expect("connect dthrottled");
    d.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut c = Conn::open(ts.port()).expect("connect");
    // c1 spends its burst at the daemon; traffic_server sees none of it.
    assert_eq!(ask(&mut d, "c1", 5), ["OK"; 5]);
    assert_eq!(
        ts.wait_metric("plugin.rate_limiter.peer_hits_applied", 5),
        Ok(5),
        "traffic_server never applied c1's 5 hits at dthrottled"
    );
    assert_eq!(
        status(&mut c, "c1"),
        429,
        "c1's first request at traffic_server: its burst was spent at dthrottled"
    );
    assert_eq!(status(&mut c, "c2"), 200, "other clients are unaffected");
    // c3 spends its burst at traffic_server; the daemon sees none of it.
    let s: Vec<u16> = (0..5).map(|_| status(&mut c, "c3")).collect();
    assert_eq!(s, [200; 5]);
    assert!(
        wait_until(Duration::from_secs(15), || daemon
            .stat("peer_hits_applied")
            .is_some_and(|n| n >= 6)),
        "dthrottled never applied c2's hit and c3's 5 at traffic_server (peer_hits_applied {:?})",
        daemon.stat("peer_hits_applied")
    );
    assert_eq!(
        ask(&mut d, "c3", 1),
        ["NO"],
        "c3's first request at dthrottled: its burst was spent at traffic_server"
    );
    assert_eq!(ask(&mut d, "c4", 1), ["OK"]);
}
