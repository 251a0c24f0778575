//! A batch keeps its requests in submission order, also when some of them
//! expired while queued: rate_limit's `--store` dry run submits a lease's
//! release right after its decision, and Redis must run them in that order.

use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use store::{Backend, BatchError, Client, Config};

/// Records each round trip's ops; the one carrying [`HOLD`] says it has
/// started and waits for the test, so that requests queue up behind it.
struct Recorder {
    connected: bool,
    batches: Sender<Vec<u32>>,
    entered: Sender<()>,
    release: Receiver<()>,
}

const HOLD: u32 = 999;

impl Backend for Recorder {
    type Op = u32;
    type Reply = ();

    fn is_connected(&self) -> bool {
        self.connected
    }

    fn connect(&mut self, _deadline: Instant) -> Result<(), BatchError> {
        self.connected = true;
        Ok(())
    }

    fn disconnect(&mut self) {
        self.connected = false;
    }

    fn run(
        &mut self,
        ops: &[&u32],
        _deadline: Instant,
        out: &mut Vec<Result<(), String>>,
    ) -> Result<(), BatchError> {
        let ops: Vec<u32> = ops.iter().map(|o| **o).collect();
        if ops.contains(&HOLD) {
            let _ = self.entered.send(());
            // Bounded, so a failing test cannot hang the thread for good.
            let _ = self.release.recv_timeout(Duration::from_secs(30));
        }
        out.extend(ops.iter().map(|_| Ok(())));
        let _ = self.batches.send(ops);
        Ok(())
    }
}

/// A client whose first round trip (token 0, op [`HOLD`]) has started and
/// is held: what is submitted next queues behind it (no sleeps: the
/// backend says it started) until `release` is sent.
struct Held {
    client: Client<Recorder, u32>,
    batches: Receiver<Vec<u32>>,
    release: Sender<()>,
}

const LONG: Duration = Duration::from_secs(20);

fn held(name: &str) -> Held {
    let (batches_tx, batches) = mpsc::channel();
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let backend = Recorder {
        connected: false,
        batches: batches_tx,
        entered: entered_tx,
        release: release_rx,
    };
    let client = Client::start(name, backend, Config::default()).expect("thread");
    client.submit(HOLD, 0, LONG).expect("submit");
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the held round trip started");
    Held {
        client,
        batches,
        release,
    }
}

#[test]
fn requests_expired_in_the_queue_leave_the_others_in_order() {
    let Held {
        client: c,
        batches,
        release,
    } = held("order-test");
    // Even ops expire at once (a zero timeout: due as submitted); the odd
    // ones stay, between them.
    for op in 0..=10 {
        let timeout = if op % 2 == 0 { Duration::ZERO } else { LONG };
        c.submit(op, op, timeout).expect("submit");
    }
    release.send(()).expect("the round trip is waiting");
    let mut sent = Vec::new();
    let start = Instant::now();
    while sent.len() < 5 && start.elapsed() < Duration::from_secs(10) {
        if let Ok(b) = batches.recv_timeout(Duration::from_secs(1)) {
            sent.extend(b.into_iter().filter(|&op| op != HOLD));
        }
    }
    assert_eq!(sent, [1, 3, 5, 7, 9], "even ops expired; the rest in order");
}

/// `drain` hands back at most `max` completions a pass, in order, and the
/// rest stay for the next pass (a drainer on an ATS thread stays short).
#[test]
fn drain_hands_back_at_most_max_a_pass() {
    let Held {
        client: c,
        batches,
        release,
    } = held("drain-test");
    let (served_tx, served) = mpsc::channel();
    assert!(c.set_notify(move || {
        let _ = served_tx.send(());
    }));
    for op in 1..=4 {
        c.submit(op, op, LONG).expect("submit");
    }
    release.send(()).expect("the round trip is waiting");
    // Every round trip is followed by a notify, after its completions are queued.
    let (mut ops, mut trips) = (0, 0);
    let start = Instant::now();
    while ops < 5 && start.elapsed() < Duration::from_secs(10) {
        if let Ok(b) = batches.recv_timeout(Duration::from_secs(1)) {
            ops += b.len();
            trips += 1;
        }
    }
    for _ in 0..trips {
        served
            .recv_timeout(Duration::from_secs(10))
            .expect("completions handed back");
    }
    let mut tokens = Vec::new();
    c.drain(2, |done| tokens.push(done.token));
    assert_eq!(tokens, [0, 1], "two, the first submitted first");
    assert_eq!(c.outstanding(), 3, "the rest wait");
    c.drain(10, |done| tokens.push(done.token));
    assert_eq!(tokens, [0, 1, 2, 3, 4]);
    c.drain(10, |_| panic!("nothing left"));
    assert_eq!(c.outstanding(), 0);
}
