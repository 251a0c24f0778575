use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Exchange, Member};
use crate::peering::PeerOptions;

/// A member that reports `hits` on "k" once and records what it is given.
struct Fake {
    id: u64,
    report: Mutex<Vec<(Box<[u8]>, u32)>>,
    /// Reported as left out of each report.
    dropped_tags: u64,
    applied: Mutex<Vec<(Vec<u8>, u32)>>,
    /// Blocks to report once, and the peers' blocks it was given.
    blocks: Mutex<Vec<(Box<[u8]>, u32)>>,
    applied_blocks: Mutex<Vec<(Vec<u8>, u32)>>,
}

impl Fake {
    fn new(id: u64, report: &[(&str, u32)]) -> Arc<Fake> {
        Arc::new(Fake {
            id,
            report: Mutex::new(
                report
                    .iter()
                    .map(|(t, h)| (t.as_bytes().into(), *h))
                    .collect(),
            ),
            dropped_tags: 5,
            applied: Mutex::default(),
            blocks: Mutex::default(),
            applied_blocks: Mutex::default(),
        })
    }
}

impl Member for Fake {
    fn id(&self) -> u64 {
        self.id
    }
    fn apply(&self, tag: &[u8], hits: u32) -> bool {
        self.applied.lock().push((tag.to_vec(), hits));
        true
    }
    fn report(&self, _max_tags: usize) -> dthrottle::Report {
        dthrottle::Report {
            entries: std::mem::take(&mut *self.report.lock()),
            dropped_tags: self.dropped_tags,
            ..Default::default()
        }
    }
    fn blocks(&self) -> (Vec<peer::Entry>, u64) {
        (std::mem::take(&mut *self.blocks.lock()), 0)
    }
    fn apply_block(&self, tag: &[u8], ms: u32) -> bool {
        self.applied_blocks.lock().push((tag.to_vec(), ms));
        true
    }
}

/// Written once: the tests run in parallel.
fn secret() -> PathBuf {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("exchange-secret-{}", std::process::id()));
        std::fs::write(&p, "a shared secret of the tests\n").unwrap();
        p
    })
    .clone()
}

fn opts(listen: SocketAddr, peers: Vec<SocketAddr>) -> PeerOptions {
    PeerOptions {
        peers,
        group: None,
        interface: std::net::Ipv4Addr::UNSPECIFIED,
        listen,
        period_ms: 100,
        secret_file: "secret".into(),
        max_tags: 100,
        allow: Vec::new(),
        max_senders: 16,
    }
}

fn member(m: &Arc<Fake>) -> Weak<dyn Member> {
    let w: Weak<Fake> = Arc::downgrade(m);
    w
}

#[test]
fn a_report_reaches_the_member_of_the_same_group_only() {
    let t0 = Instant::now();
    let any = "127.0.0.1:0".parse().unwrap();
    // A takes datagrams from loopback (--peer-allow), B sends to A.
    let mut a_opts = opts(any, vec![]);
    a_opts.allow = vec!["127.0.0.1/32".parse().unwrap()];
    let a = Exchange::start(&a_opts, &secret(), t0).unwrap();
    let b_opts = opts(any, vec![a.local_addr().expect("bound")]);
    let b = Exchange::start(&b_opts, &secret(), t0).unwrap();
    let (in_group, other) = (Fake::new(1, &[]), Fake::new(2, &[]));
    a.join(&a_opts, "g", member(&in_group), t0);
    a.join(&a_opts, "h", member(&other), t0);
    let sender = Fake::new(3, &[("k", 3)]);
    b.join(&b_opts, "g", member(&sender), t0);

    // Not due yet: nothing sent.
    assert_eq!(b.tick(t0).reports_sent, 0);
    let due = t0 + Duration::from_millis(100);
    let mut sent = 0;
    let mut got = super::Tick::default();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.received == 0 && Instant::now() < deadline {
        sent += b.tick(due).reports_sent;
        std::thread::sleep(Duration::from_millis(5));
        let t = a.tick(due);
        got.received += t.received;
        got.applied += t.applied;
        assert!(t.bound);
    }
    // The transport counts a report once its thread has sent it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while sent == 0 && Instant::now() < deadline {
        sent += b.tick(due).reports_sent;
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!((got.received, got.applied, sent), (1, 3, 1));
    assert_eq!(*in_group.applied.lock(), vec![(b"k".to_vec(), 3)]);
    assert!(other.applied.lock().is_empty());
}

#[test]
fn joining_twice_keeps_one_entry_and_a_dropped_member_is_skipped() {
    let t0 = Instant::now();
    let o = opts("127.0.0.1:0".parse().unwrap(), vec![]);
    let e = Exchange::start(&o, &secret(), t0).unwrap();
    let m = Fake::new(7, &[]);
    e.join(&o, "g", member(&m), t0);
    e.join(&o, "g", member(&m), t0);
    assert_eq!(e.members.lock().len(), 1);
    // Reported when due (its left-out tags counted), skipped once dropped.
    assert_eq!(e.tick(t0 + Duration::from_secs(1)).tags_dropped, 5);
    drop(m);
    assert_eq!(e.tick(t0 + Duration::from_secs(2)).tags_dropped, 0);
    // Forgotten at the next join.
    let n = Fake::new(8, &[]);
    e.join(&o, "g", member(&n), t0);
    assert_eq!(e.members.lock().len(), 1);
}

#[test]
fn the_counts_keep_their_metric_names() {
    let names: Vec<&str> = super::Tick::default()
        .counts()
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        names,
        [
            "peer_reports_sent",
            "peer_reports_received",
            "peer_hits_applied",
            "peer_blocks_applied",
            "peer_rejected",
            "peer_tags_dropped",
            "peer_inbound_dropped",
            "peer_outbound_dropped",
            "peer_send_errors",
            "peer_senders_dropped",
        ]
    );
    assert_eq!(super::BOUND, "peer_bound");
}

#[test]
fn a_second_socket_setting_is_refused_naming_the_option() {
    let t0 = Instant::now();
    let o = opts("127.0.0.1:0".parse().unwrap(), vec![]);
    let e = Exchange::start(&o, &secret(), t0).unwrap();
    assert_eq!(e.agrees(&o), Ok(()));
    let mut other = o.clone();
    other.listen = "127.0.0.1:1".parse().unwrap();
    let err = e.agrees(&other).unwrap_err();
    assert!(
        err.starts_with("--peer-listen=127.0.0.1:1 differs from --peer-listen=127.0.0.1:0"),
        "{err}"
    );
}

#[test]
fn a_port_in_use_limits_locally_and_binds_once_it_is_free() {
    let t0 = Instant::now();
    let first =
        Exchange::start(&opts("127.0.0.1:0".parse().unwrap(), vec![]), &secret(), t0).unwrap();
    let addr = first.local_addr().unwrap();
    let o = opts(addr, vec![]);
    let second = Exchange::start(&o, &secret(), t0).unwrap();
    assert_eq!(second.local_addr(), None);
    assert!(!second.tick(t0).bound);
    // Still in use when it is due: still local.
    assert!(!second.tick(t0 + peer::rebind::FIRST_DELAY).bound);
    drop(first);
    // Bound at the next try after the backoff.
    let later = t0 + peer::rebind::MAX_DELAY * 2;
    assert!(second.tick(later).bound);
    assert_eq!(second.local_addr(), Some(addr));
}

#[test]
fn an_unreadable_secret_is_the_only_error() {
    let o = opts("127.0.0.1:0".parse().unwrap(), vec![]);
    let err = Exchange::start(&o, &PathBuf::from("/nonexistent/secret"), Instant::now())
        .err()
        .unwrap();
    assert!(
        err.starts_with("--peer-secret-file: peer secret file /nonexistent/secret"),
        "{err}"
    );
}

/// A block started on one member reaches the member of the same group on
/// the other exchange as a block (a report of its own), not as hits.
#[test]
fn a_block_reaches_the_peers_in_the_next_report() {
    let t0 = Instant::now();
    let any = "127.0.0.1:0".parse().unwrap();
    let mut a_opts = opts(any, vec![]);
    a_opts.allow = vec!["127.0.0.1/32".parse().unwrap()];
    let a = Exchange::start(&a_opts, &secret(), t0).unwrap();
    let b_opts = opts(any, vec![a.local_addr().expect("bound")]);
    let b = Exchange::start(&b_opts, &secret(), t0).unwrap();
    let receiver = Fake::new(1, &[]);
    a.join(&a_opts, "g", member(&receiver), t0);
    let sender = Fake::new(2, &[]);
    sender.blocks.lock().push((Box::from(&b"k"[..]), 30_000));
    b.join(&b_opts, "g", member(&sender), t0);
    let due = t0 + Duration::from_millis(100);
    let mut got = super::Tick::default();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.blocks_applied == 0 && Instant::now() < deadline {
        b.tick(due);
        std::thread::sleep(Duration::from_millis(5));
        let t = a.tick(due);
        got.blocks_applied += t.blocks_applied;
        got.applied += t.applied;
    }
    assert_eq!((got.blocks_applied, got.applied), (1, 0));
    assert_eq!(
        *receiver.applied_blocks.lock(),
        vec![(b"k".to_vec(), 30_000)]
    );
    assert!(receiver.applied.lock().is_empty(), "not taken for hits");
}
