//! What the plugins start for their rules stops with the last rule using
//! it: 20 config reloads alternating two store URLs, and two replacements
//! of the .so files by other builds (a second and a third copy, with
//! separate statics), leave traffic_server with the threads and sockets it
//! had after the first load (`/proc/PID/task`, `/proc/PID/fd`); removing a
//! `--store` rule closes its connections to the store; a refused reload
//! leaves a `--store-sync` rule syncing to its own store. The plugins'
//! logs stay one file each across the copies (`ats::textlog`'s registry).

mod reload_proc;

use std::fs;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::time::Duration;

use ats_tests::redis::Redis;
use ats_tests::{plugin, wait_until, Origin, TrafficServer};
use reload_proc::{level, plugin_sockets, settle, sockets, steady, total, Level};

const SECRET: &str = "reload-test-secret-0123456789abcdef";

/// A free UDP port on loopback (for the peer exchange).
fn udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.local_addr().expect("address").port()
}

/// The plugins copied into a directory of their own, so the test can
/// replace them (a new file, a new mtime) without touching the build's.
struct Plugins {
    dir: PathBuf,
}

impl Plugins {
    fn new(test: &str) -> Plugins {
        let dir = std::env::temp_dir().join(format!("reload-so-{}-{test}", std::process::id()));
        fs::create_dir_all(&dir).expect("dir");
        let p = Plugins { dir };
        p.replace(0);
        p
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.so"))
    }

    /// Writes fresh copies (`n` minutes ahead, so each replacement has a
    /// new mtime; another build from the first, so the plugins do not
    /// take it for the copy already loaded): to ATS, upgraded plugins.
    fn replace(&self, n: u64) {
        let build = u8::try_from(n).ok().filter(|&b| b > 0);
        for name in ["rate_limit", "ip_throttle"] {
            ats_tests::install(name, &self.path(name), n, build);
        }
    }
}

impl Drop for Plugins {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The refusal log of the `l.test` rule.
const RL_LOG: &str = "rl_reload.log";

/// Hosts of the rules that log (see [`remap`]).
const LOGGING: [&str; 2] = ["j.test", "l.test"];

/// remap.config: rate_limit decided in the store at `store`, ip_throttle
/// keeping its state there, a peered rate_limit rule, and with `logs` two
/// rules that log from local state: ip_throttle's (`ip_throttle.log`) and
/// a rate_limit rule refusing all but the first request (`RL_LOG`).
fn remap(p: &Plugins, origin: &Origin, store: &str, peer: (u16, u16), logs: bool) -> String {
    let (rl, ipt) = (p.path("rate_limit"), p.path("ip_throttle"));
    let o = origin.url();
    let mut config = format!(
        "map http://s.test/ {o} @plugin={rl} @pparam=--rate=10000 @pparam=--store={store}\n\
         map http://i.test/ {o} @plugin={ipt} @pparam=--store={store} @pparam=--instance=reload @pparam=--log-only\n\
         map http://p.test/ {o} @plugin={rl} @pparam=--key=ip @pparam=--rate=10000 \
         @pparam=--group=g @pparam=--peers=127.0.0.1:{} @pparam=--peer-listen=127.0.0.1:{} \
         @pparam=--peer-secret-file=peer.secret\n",
        peer.1,
        peer.0,
        rl = rl.display(),
        ipt = ipt.display(),
    );
    if logs {
        config += &format!(
            "map http://{}/ {o} @plugin={} @pparam=--instance=local @pparam=--log-only\n\
             map http://{}/ {o} @plugin={} @pparam=--rate=0.001 @pparam=--burst=1 \
             @pparam=--queue=0 @pparam=--log={}\n",
            LOGGING[0],
            ipt.display(),
            LOGGING[1],
            rl.display(),
            RL_LOG.trim_end_matches(".log"),
        );
    }
    config
}

/// Requests on every rule (each on a new connection, closed after), so
/// the store clients connect, the wake channels open and the logs get
/// lines: ip_throttle logs the second and third requests as throttled,
/// and `l.test` refuses them (at least).
fn traffic(ts: &TrafficServer, logs: bool) {
    let hosts = ["s.test", "i.test", "p.test"];
    for host in hosts
        .into_iter()
        .chain(LOGGING.into_iter().filter(|_| logs))
    {
        for n in 0..3 {
            let r = ts
                .get(host, "/", &[])
                .unwrap_or_else(|e| panic!("{host}, request {n}: {e}"));
            // l.test's bucket carries over reloads (the first request of a
            // round may find it empty); its later ones are refused.
            let want: &[u16] = match (host, n) {
                ("l.test", 0) => &[200, 429],
                ("l.test", _) => &[429],
                _ => &[200],
            };
            assert!(want.contains(&r.status), "{host}: {}", r.status);
        }
    }
}

/// The plugins' log files `pid` has open (paths under the log directory,
/// with how many descriptors each).
fn open_logs(pid: u32) -> Vec<(String, usize)> {
    level(pid)
        .files
        .into_iter()
        .filter(|(path, _)| path.ends_with(".log"))
        .map(|(path, n)| (path.rsplit('/').next().unwrap_or("").to_owned(), n))
        .collect()
}

/// Lines in the plugin log `name`.
fn lines(ts: &TrafficServer, name: &str) -> usize {
    ts.log(name).lines().count()
}

/// Lines in both logs once ATS has written all it holds: the same counts
/// 6 s apart (ATS flushes a log buffer at the latest
/// `proxy.config.log.max_secs_per_buffer` after its first line: 1 s in the
/// harness, 5 s by default).
fn flushed_lines(ts: &TrafficServer) -> (usize, usize) {
    let count = || (lines(ts, "ip_throttle.log"), lines(ts, RL_LOG));
    let mut last = count();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_secs(6));
        let now = count();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the logs still grow: {last:?} lines");
}

fn server(
    p: &Plugins,
    origin: &Origin,
    store: &str,
    peer: (u16, u16),
    logs: bool,
) -> TrafficServer {
    TrafficServer::builder()
        .config_file("peer.secret", &format!("{SECRET}\n"))
        // No pooled origin connections: the fd count then depends on the
        // plugins only.
        .record("proxy.config.http.keep_alive_enabled_out", "INT 0")
        .remap(remap(p, origin, store, peer, logs))
        .with_manager()
        .start()
        .expect("start traffic_server")
}

/// The plugins' sockets once their requests are done: the store clients'
/// connections (rate_limit's, ip_throttle's), their wake channels (a
/// socket pair each) and the peer exchange's UDP socket.
const STORE_CONNECTIONS: usize = 2;
const WAKE_ENDS: usize = 2 * 2;
const PEER_SOCKETS: usize = 1;
/// What a copy logs (debug) for each net thread's inbox it closes when its
/// last rule goes (`ats::inbox`).
const INBOX_CLOSED: &str = "inbox closed (no rule of this copy is left)";

fn assert_plugin_sockets(pid: u32, store: &Redis, peer_port: u16, l: &Level) {
    assert_eq!(
        plugin_sockets(pid, store.port(), peer_port),
        (STORE_CONNECTIONS, PEER_SOCKETS),
        "store connections and peer socket: {l:?}"
    );
    let unix = l.sockets.get("unix").copied().unwrap_or(0);
    assert!(unix >= WAKE_ENDS, "the wake channels' ends: {l:?}");
}

/// `plugin.rate_limiter.peer_bound` once it reads `want` (metrics reach
/// traffic_ctl up to ~10 s late): the last value read.
fn peer_bound(ts: &TrafficServer, want: i64) -> Option<i64> {
    let mut last = None;
    wait_until(Duration::from_secs(25), || {
        last = ts.metric("plugin.rate_limiter.peer_bound");
        last == Some(want)
    });
    last
}

#[test]
fn reloads_and_replaced_plugins_leave_the_threads_and_sockets_of_the_first_load() {
    let (a, b) = (
        Redis::start().expect("redis-server"),
        Redis::start().expect("redis-server"),
    );
    let origin = Origin::start();
    let plugins = Plugins::new("alternate");
    let peer = (udp_port(), udp_port());
    let ts = server(&plugins, &origin, &a.url(), peer, true);
    let pid = ts.server_pid().expect("pid");
    traffic(&ts, true);
    // ATS opens a log file at its first line, which its logging thread
    // writes a little later: the first level counts them once open.
    let both = vec![("ip_throttle.log".to_owned(), 1), (RL_LOG.to_owned(), 1)];
    assert!(
        wait_until(Duration::from_secs(30), || open_logs(pid) == both),
        "the plugins' logs: {:?}",
        open_logs(pid)
    );
    // Measured: ATS's own threads, sockets and files do not vary across
    // these reloads (but its log files, left out of `Level`).
    let first = steady(pid);
    assert!(
        first.threads.contains_key("rl-store")
            && first.threads.contains_key("ipt-store")
            && first.threads.contains_key("dthrottle-peer"),
        "the plugins' threads run: {first:?}"
    );
    assert_plugin_sockets(pid, &a, peer.0, &first);
    let bound = format!("peer exchange on 127.0.0.1:{}", peer.0);
    let mut before_last_copy = (0, 0);
    for i in 1..=20u64 {
        let replaced = i == 7 || i == 14;
        if replaced {
            // Counted once the older copies' lines are all written, so any
            // line after is the new copy's.
            if i == 14 {
                before_last_copy = flushed_lines(&ts);
            }
            plugins.replace(i);
        }
        let binds = ts.diags().matches(&bound).count();
        let store = if i % 2 == 1 { b.url() } else { a.url() };
        ts.reload_remap(&remap(&plugins, &origin, &store, peer, true))
            .unwrap_or_else(|e| panic!("reload {i}: {e}"));
        traffic(&ts, true);
        if replaced {
            // The new copy's exchange binds the port once the old copy's
            // rules are gone (its retries back off to one every 30 s).
            assert!(
                wait_until(Duration::from_secs(60), || ts
                    .diags()
                    .matches(&bound)
                    .count()
                    > binds),
                "reload {i}: the replaced copy's peer exchange did not bind"
            );
        }
    }
    // The third copy's rules logged to the same files as the first's (each
    // copy's own object would have been ip_throttle_1.log, then _2, left
    // open by the old copy for the life of the process).
    assert!(
        wait_until(Duration::from_secs(30), || {
            lines(&ts, "ip_throttle.log") > before_last_copy.0
                && lines(&ts, RL_LOG) > before_last_copy.1
        }),
        "no lines from the last copy: {before_last_copy:?} lines before it"
    );
    for other in ["ip_throttle_1.log", "ip_throttle_2.log", "rl_reload_1.log"] {
        assert!(!ts.log_path(other).exists(), "{other} was created");
    }
    // The last reload named the first store again: the same rules as the
    // first load, the same threads, sockets and files once the old rules
    // are gone.
    let last = settle(pid, &first);
    let diags = ts.diags();
    assert_eq!(
        last,
        first,
        "threads {} then {}, sockets {} then {}",
        total(&first),
        total(&last),
        sockets(&first),
        sockets(&last)
    );
    assert_plugin_sockets(pid, &a, peer.0, &last);
    assert!(
        wait_until(Duration::from_secs(5), || b.clients() == Ok(0)),
        "the store no rule names has {:?} connections",
        b.clients()
    );
    // Each replaced copy's peer exchange found the port held by the old
    // copy's and bound it once that was gone (the first load's, then two).
    assert_eq!(diags.matches(&bound).count(), 3, "{diags}");
    assert_eq!(peer_bound(&ts, 1), Some(1), "one exchange holds the port");
    // ATS told each old copy its last rule was gone (`TSRemapDone`).
    let done = diags.matches("the last rule of this copy is gone").count();
    assert!(
        done >= 4,
        "TSRemapDone seen {done} times (2 copies of 2 plugins)"
    );
}

#[test]
fn removing_the_store_rule_closes_its_connections() {
    let r = Redis::start().expect("redis-server");
    let origin = Origin::start();
    let plugins = Plugins::new("remove");
    let peer = (udp_port(), udp_port());
    // Without the logging rules: ATS closes a destroyed log object's file
    // 60 s later (LogObjectManager::unmanage_api_object).
    let ts = server(&plugins, &origin, &r.url(), peer, false);
    let pid = ts.server_pid().expect("pid");
    traffic(&ts, false);
    assert!(
        wait_until(Duration::from_secs(5), || r.clients()
            == Ok(STORE_CONNECTIONS)),
        "rate_limit's and ip_throttle's connections: {:?}",
        r.clients()
    );
    let before = steady(pid);
    assert_plugin_sockets(pid, &r, peer.0, &before);
    assert_eq!(peer_bound(&ts, 1), Some(1), "the exchange holds the port");
    let bare = format!(
        "map http://s.test/ {o}\nmap http://i.test/ {o}\n",
        o = origin.url()
    );
    ts.reload_remap(&bare).expect("reload");
    assert!(
        wait_until(Duration::from_secs(10), || r.clients() == Ok(0)),
        "still {:?} connections to the store",
        r.clients()
    );
    // Each plugin closes the inboxes its parked transactions opened, one
    // socket pair per net thread (the harness runs two), and says so.
    steady(pid);
    let inboxes = ts.diags().matches(INBOX_CLOSED).count();
    assert!(
        (2..=4).contains(&inboxes),
        "{inboxes} inboxes closed (each plugin parked on one or two net threads)"
    );
    // The store connections, the wake channels, the inboxes and the UDP
    // socket are gone, and the plugins' threads: nothing else changed.
    let mut want = before;
    for t in ["rl-store", "ipt-store", "dthrottle-peer"] {
        want.threads.remove(t);
    }
    for (kind, n) in [
        ("tcp", STORE_CONNECTIONS),
        ("unix", WAKE_ENDS + 2 * inboxes),
        ("udp", PEER_SOCKETS),
    ] {
        let left = want.sockets.get(kind).copied().unwrap_or(0);
        assert!(left >= n, "{kind} sockets before: {left}");
        want.sockets.insert(kind, left - n);
    }
    want.sockets.retain(|_, n| *n > 0);
    let after = settle(pid, &want);
    assert_eq!(after, want, "after the reload (left), expected (right)");
    assert_eq!(plugin_sockets(pid, r.port(), peer.0), (0, 0));
    assert_eq!(peer_bound(&ts, 0), Some(0), "the port is let go");
}

/// A reload that fails leaves the old rules serving as they were: a
/// `--store-sync` rule whose `--store` the refused configuration changed
/// keeps exchanging its counts through its own store, and the refused
/// store gets none.
#[test]
fn a_failed_reload_keeps_the_old_store_sync() {
    let (a, b) = (
        Redis::start().expect("redis-server"),
        Redis::start().expect("redis-server"),
    );
    let origin = Origin::start();
    let rl = plugin("rate_limit");
    let o = origin.url();
    let rule = |store: &str| {
        format!(
            "map http://y.test/ {o} @plugin={rl} @pparam=--rate=10000 \
             @pparam=--key=header:X-Client @pparam=--group=sy \
             @pparam=--store={store} @pparam=--store-sync=100\n"
        )
    };
    let ts = TrafficServer::builder()
        .remap(rule(&a.url()))
        .with_manager()
        .start()
        .expect("start traffic_server");
    let synced = |r: &Redis| {
        r.command(&["KEYS", "*:sync:*"])
            .is_ok_and(|k| k.contains(":sync:"))
    };
    // Requests for a while: each period's hits go to the store.
    let send_until = |r: &Redis| {
        wait_until(Duration::from_secs(10), || {
            let resp = ts
                .get("y.test", "/", &[("X-Client", "c1")])
                .expect("request");
            assert_eq!(resp.status, 200);
            synced(r)
        })
    };
    assert!(send_until(&a), "the first store gets the counts");
    // The same rule on the other store, and a rule that fails to load.
    let refused = format!(
        "{}map http://bad.test/ {o} @plugin={rl} @pparam=--rate=fast\n",
        rule(&b.url())
    );
    assert!(
        ts.reload_remap(&refused).is_err(),
        "the reload is refused: {}",
        ts.diags()
    );
    a.command(&["FLUSHALL"]).expect("FLUSHALL");
    assert!(send_until(&a), "the old rule keeps syncing to its store");
    // A few more periods: none of it goes to the refused store.
    for _ in 0..10 {
        let resp = ts
            .get("y.test", "/", &[("X-Client", "c1")])
            .expect("request");
        assert_eq!(resp.status, 200);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!synced(&b), "the refused configuration's store got counts");
    // The refused configuration's rules lived until ATS deleted them; on a
    // loaded machine their sync task may have connected to its store in
    // that time (2 connections were seen in a container; none here). What
    // must not happen is that a connection stays.
    assert!(
        wait_until(Duration::from_secs(10), || b.clients() == Ok(0)),
        "{:?} connections to the refused store",
        b.clients()
    );
}
