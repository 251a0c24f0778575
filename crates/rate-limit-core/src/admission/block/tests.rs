use std::sync::Arc;
use std::time::Duration;

use limits::{ManualClock, Nanos, Permit, Waiter, NANOS_PER_MS, NANOS_PER_SEC};
use proptest::prelude::*;

use crate::{Admission, Limiter, Options, Refused};

struct W;

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

type L = Arc<Limiter<W, Arc<ManualClock>>>;

const S: Nanos = NANOS_PER_SEC;

fn build(args: &[&str]) -> (L, Arc<ManualClock>) {
    let o = Options::parse("http://x/", args).unwrap();
    let clock = Arc::new(ManualClock::new(100 * S));
    (Limiter::for_options(&o, clock.clone()), clock)
}

/// The decision for one request of `key` (`None`: the rule's).
fn ask(l: &L, key: Option<u64>) -> Result<(), Refused> {
    match l.admit_in_scope(key, &[]) {
        Admission::Go(_) => Ok(()),
        Admission::Wait(_) => panic!("--queue=0: nothing waits"),
        Admission::Reject(why) => Err(why),
    }
}

const KEYED: &[&str] = &[
    "--key=ip",
    "--rate=1",
    "--burst=1",
    "--queue=0",
    "--block=3",
];
const RULE: &[&str] = &["--rate=1", "--burst=1", "--queue=0", "--block=3"];

#[test]
fn a_key_over_its_rate_stays_refused_for_the_block_then_gets_a_full_burst() {
    let (l, clock) = build(KEYED);
    assert_eq!(ask(&l, Some(7)), Ok(()));
    assert_eq!(ask(&l, Some(7)), Err(Refused::BlockStarted));
    // Its bucket refilled after 1 s: still refused, and not charged.
    clock.advance(Duration::from_nanos(1_500 * NANOS_PER_MS));
    assert_eq!(ask(&l, Some(7)), Err(Refused::Blocked));
    assert_eq!(l.blocked_for(Some(7)), Some(1_500 * NANOS_PER_MS));
    // Others are not blocked.
    assert_eq!(ask(&l, Some(8)), Ok(()));
    clock.advance(Duration::from_nanos(1_500 * NANOS_PER_MS));
    assert_eq!(l.blocked_for(Some(7)), None);
    assert_eq!(ask(&l, Some(7)), Ok(()), "served once the block ends");
    assert_eq!(
        ask(&l, Some(7)),
        Err(Refused::BlockStarted),
        "over again: a new block"
    );
}

#[test]
fn without_a_key_the_whole_rule_is_blocked_once() {
    let (l, clock) = build(RULE);
    assert_eq!(ask(&l, None), Ok(()));
    assert_eq!(ask(&l, None), Err(Refused::BlockStarted));
    // One block: the requests refused while it holds do not start another.
    for _ in 0..5 {
        assert_eq!(ask(&l, None), Err(Refused::Blocked));
    }
    clock.advance(Duration::from_nanos(2 * S));
    assert_eq!(ask(&l, None), Err(Refused::Blocked));
    clock.advance(Duration::from_nanos(S));
    assert_eq!(ask(&l, None), Ok(()));
}

#[test]
fn without_block_a_rate_refusal_is_only_that() {
    let (l, _) = build(&["--key=ip", "--rate=1", "--burst=1", "--queue=0"]);
    assert_eq!(ask(&l, Some(1)), Ok(()));
    assert_eq!(ask(&l, Some(1)), Err(Refused::Rate));
    assert_eq!(ask(&l, Some(1)), Err(Refused::Rate));
    let (l, _) = build(&["--rate=1", "--burst=1", "--queue=0"]);
    assert_eq!(ask(&l, None), Ok(()));
    assert_eq!(ask(&l, None), Err(Refused::Rate));
}

#[test]
fn a_count_status_refusal_starts_a_block() {
    let (l, clock) = build(&[
        "--key=ip",
        "--rate=1",
        "--burst=1",
        "--count-status=401",
        "--block=5",
    ]);
    assert_eq!(ask(&l, Some(3)), Ok(()));
    assert!(l.charge(Some(3)));
    assert_eq!(ask(&l, Some(3)), Err(Refused::BlockStarted));
    clock.advance(Duration::from_nanos(4 * S));
    assert_eq!(ask(&l, Some(3)), Err(Refused::Blocked));
    clock.advance(Duration::from_nanos(S));
    assert_eq!(ask(&l, Some(3)), Ok(()));
}

#[test]
fn block_and_unblock_by_command() {
    let (l, clock) = build(KEYED);
    // A key never seen is added, blocked.
    assert!(l.block(Some(42), 10 * S));
    assert_eq!(ask(&l, Some(42)), Err(Refused::Blocked));
    assert_eq!(l.blocked_for(Some(42)), Some(10 * S));
    assert!(l.unblock(Some(42)));
    assert_eq!(ask(&l, Some(42)), Ok(()));
    assert!(!l.unblock(Some(42)), "nothing held any more");
    assert!(!l.unblock(Some(99)), "a key never seen");
    // A key blocked by its rate is freed early.
    assert_eq!(ask(&l, Some(1)), Ok(()));
    assert_eq!(ask(&l, Some(1)), Err(Refused::BlockStarted));
    clock.advance(Duration::from_nanos(S));
    assert!(l.unblock(Some(1)));
    assert_eq!(ask(&l, Some(1)), Ok(()));
    // The rule-wide block.
    let (l, _) = build(RULE);
    assert!(l.block(None, 10 * S));
    assert_eq!(ask(&l, None), Err(Refused::Blocked));
    assert!(l.unblock(None));
    assert_eq!(ask(&l, None), Ok(()));
}

#[test]
fn a_rule_without_block_honours_a_block_by_command() {
    let (l, _) = build(&["--key=ip", "--rate=1", "--burst=5"]);
    assert!(l.block(Some(5), 2 * S));
    assert_eq!(ask(&l, Some(5)), Err(Refused::Blocked));
    assert_eq!(ask(&l, Some(6)), Ok(()));
}

#[test]
fn blocked_keys_yield_to_new_clients_in_a_full_table() {
    let (l, _) = build(&[
        "--key=ip",
        "--rate=1",
        "--burst=1",
        "--queue=0",
        "--block=60",
        "--keys=2",
    ]);
    for k in [1, 2] {
        assert_eq!(ask(&l, Some(k)), Ok(()));
        assert_eq!(ask(&l, Some(k)), Err(Refused::BlockStarted));
    }
    // Both held keys are blocked (sticky): a new client evicts one rather
    // than be refused for a full table.
    assert_eq!(ask(&l, Some(3)), Ok(()));
    assert_eq!(l.keys().map(|t| t.len()), Some(2));
}

#[test]
fn a_reload_changes_the_length_of_blocks_to_come() {
    let (l, clock) = build(KEYED);
    let o = Options::parse(
        "http://x/",
        &[
            "--key=ip",
            "--rate=1",
            "--burst=1",
            "--queue=0",
            "--block=10",
        ],
    )
    .unwrap();
    l.reconfigure(crate::Limits::of(&o)).unwrap();
    assert_eq!(ask(&l, Some(1)), Ok(()));
    assert_eq!(ask(&l, Some(1)), Err(Refused::BlockStarted));
    clock.advance(Duration::from_nanos(9 * S));
    assert_eq!(ask(&l, Some(1)), Err(Refused::Blocked));
    clock.advance(Duration::from_nanos(S));
    assert_eq!(ask(&l, Some(1)), Ok(()));
}

proptest! {
    /// Any sequence of requests and pauses: a block starts only on a
    /// refusal while none holds, every request in a block is refused as
    /// blocked, and the bucket gives exactly what an unblocked bucket
    /// would once the block is over (it was not charged meanwhile).
    #[test]
    fn blocks_refuse_everything_they_cover_and_nothing_else(
        steps in proptest::collection::vec((0u64..4_000, 1usize..4), 1..40),
        block in 1u32..5,
    ) {
        let args = ["--key=ip", "--rate=1", "--burst=2", "--queue=0", &format!("--block={block}")];
        let (l, clock) = build(&args);
        let mut until: Option<Nanos> = None;
        for (pause_ms, n) in steps {
            clock.advance(Duration::from_nanos(pause_ms * NANOS_PER_MS));
            for _ in 0..n {
                let now = limits::Clock::now(&*clock);
                let r = ask(&l, Some(9));
                match until {
                    Some(u) if u > now => prop_assert_eq!(r, Err(Refused::Blocked)),
                    // The first request after a block of at least the
                    // bucket's refill time (2 s): full, as nothing the
                    // block refused was charged.
                    Some(_) if block >= 2 => {
                        prop_assert_eq!(r, Ok(()), "the bucket refilled during the block");
                        until = None;
                    }
                    _ => match r {
                        Ok(()) => {}
                        Err(Refused::BlockStarted) => until = Some(now + u64::from(block) * S),
                        Err(other) => prop_assert!(false, "{other:?} outside a block"),
                    },
                }
            }
        }
    }
}

/// `--peers`: a block started here goes to the next report of blocks
/// (once, with its time left); a peer's block refuses the key here.
#[test]
fn peered_blocks_are_reported_once_and_a_peers_block_refuses_here() {
    let clock = Arc::new(ManualClock::new(100 * S));
    let o = Options::parse(
        "http://x/",
        &[
            "--key=ip",
            "--rate=1",
            "--burst=1",
            "--queue=0",
            "--block=30",
            "--group=g",
            "--peers=127.0.0.1:5000",
            "--peer-secret-file=k",
            "--peer-max-tags=2",
        ],
    )
    .unwrap();
    let here: L = Limiter::for_options(&o, clock.clone());
    let there: L = Limiter::for_options(&o, clock.clone());
    let hash = |l: &L, tag: &[u8]| l.keys().unwrap().hash(tag);
    let ask_tag = |l: &L, tag: &[u8]| match l.admit_in_scope(Some(hash(l, tag)), tag) {
        Admission::Go(_) => Ok(()),
        Admission::Wait(_) => panic!("--queue=0"),
        Admission::Reject(why) => Err(why),
    };
    assert_eq!(ask_tag(&here, b"ip=192.0.2.7"), Ok(()));
    assert_eq!(ask_tag(&here, b"ip=192.0.2.7"), Err(Refused::BlockStarted));
    clock.advance(Duration::from_secs(10));
    let (blocks, dropped) = here.peer_blocks();
    assert_eq!(blocks, vec![(Box::from(&b"ip=192.0.2.7"[..]), 20_000)]);
    assert_eq!(dropped, 0);
    assert_eq!(here.peer_blocks().0, Vec::new(), "reported once");
    // The peer takes it: refused there though it never saw the client.
    for (tag, ms) in &blocks {
        assert!(there.apply_peer_block(tag, *ms));
    }
    assert_eq!(ask_tag(&there, b"ip=192.0.2.7"), Err(Refused::Blocked));
    assert_eq!(
        there.peer_blocks().0,
        Vec::new(),
        "a peer's block is not passed on"
    );
    // A shorter block from a peer does not cut a longer one short.
    assert!(there.apply_peer_block(b"ip=192.0.2.7", 1_000));
    clock.advance(Duration::from_secs(5));
    assert_eq!(ask_tag(&there, b"ip=192.0.2.7"), Err(Refused::Blocked));
    clock.advance(Duration::from_secs(15));
    assert_eq!(ask_tag(&there, b"ip=192.0.2.7"), Ok(()));
    // A peer's block is capped at the longest --block (a day).
    assert!(there.apply_peer_block(b"far", u32::MAX));
    let far = there.keys().unwrap().hash(b"far");
    assert_eq!(there.blocked_for(Some(far)), Some(86_400 * S));
    // At most --peer-max-tags blocks wait for a report; the rest are counted.
    for i in 0..3u8 {
        let tag = [b'k', i];
        assert!(here.block_peer(&tag, 60 * S));
    }
    let (blocks, dropped) = here.peer_blocks();
    assert_eq!((blocks.len(), dropped), (2, 1));
    // A block over before the report is not sent.
    assert!(here.block_peer(b"short", S));
    clock.advance(Duration::from_secs(2));
    assert_eq!(here.peer_blocks().0, Vec::new());
}

/// A dry run waits for nothing, so its queue never fills: the wait the
/// live queue would have refused starts the block the live rule would.
#[test]
fn a_dry_run_starts_the_block_the_live_queue_would_have() {
    let (l, _) = build(&[
        "--key=ip",
        "--rate=1",
        "--burst=1",
        "--queue=1",
        "--maxage=5000",
        "--block=3",
    ]);
    let dry = |l: &L| match l.admit_in_scope(Some(4), &[]) {
        Admission::Go(_) => Ok(()),
        Admission::Wait(w) => l.settle_dry_wait(w),
        Admission::Reject(why) => Err(why),
    };
    assert_eq!(dry(&l), Ok(()));
    assert_eq!(dry(&l), Ok(()), "one wait fits the one place");
    assert_eq!(
        dry(&l),
        Err(Refused::BlockStarted),
        "the live queue was full"
    );
    assert_eq!(dry(&l), Err(Refused::Blocked));
}
