//! Dropping a client (the last rule using a store is gone, e.g. after a
//! config reload) never waits for its I/O thread, and the thread then exits
//! on its own, closing its connection, within the requests' deadline.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use ats_tests::redis::Redis as Server;
use store::redis::{Addr, Op, Redis};
use store::{Backend, BatchError, Client, Config};

/// A store that does not answer until the test says so: its round trip
/// holds the thread (a hung store) until the test releases it.
struct Stuck {
    conn: Option<TcpStream>,
    addr: std::net::SocketAddr,
    /// Told when a round trip starts.
    entered: Sender<()>,
    /// The round trip ends when this receives (or its sender is gone).
    release: Receiver<()>,
}

impl Backend for Stuck {
    type Op = ();
    type Reply = ();

    fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    fn connect(&mut self, _deadline: Instant) -> Result<(), BatchError> {
        let c = TcpStream::connect(self.addr).map_err(|e| BatchError::Failed(e.to_string()))?;
        self.conn = Some(c);
        Ok(())
    }

    fn disconnect(&mut self) {
        self.conn = None;
    }

    fn run(
        &mut self,
        _ops: &[&()],
        _deadline: Instant,
        _out: &mut Vec<Result<(), String>>,
    ) -> Result<(), BatchError> {
        let _ = self.entered.send(());
        // Bounded, so a failing test cannot hang the thread for good.
        let _ = self.release.recv_timeout(Duration::from_secs(30));
        Err(BatchError::Timeout)
    }
}

/// Waits (at most `bound`) for `f`.
fn within(bound: Duration, f: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < bound {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

#[test]
fn a_drop_during_a_hung_round_trip_returns_at_once_and_the_thread_exits_after_it() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let addr = listener.local_addr().expect("address");
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let stuck = Stuck {
        conn: None,
        addr,
        entered: entered_tx,
        release: release_rx,
    };
    let c: Client<Stuck, u32> =
        Client::start("stuck-test", stuck, Config::default()).expect("thread");
    assert!(c.submit((), 1, Duration::from_secs(60)).is_ok());
    let (mut server_side, _) = listener.accept().expect("the client connects");
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the round trip starts");
    let exited = c.exit_watch();
    // The thread is held in its round trip: a drop that waited for it would
    // never return here (the release comes after).
    drop(c);
    assert!(!exited.done(), "the thread is still in its round trip");
    release.send(()).expect("the round trip is waiting");
    assert!(
        within(Duration::from_secs(10), || exited.done()),
        "the I/O thread did not exit after its round trip"
    );
    // The connection is closed: the server side reads EOF.
    server_side
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut b = [0u8; 1];
    assert_eq!(server_side.read(&mut b).expect("EOF, not a timeout"), 0);
}

#[test]
fn a_dropped_redis_client_closes_its_connection() {
    let server = Server::start().expect("redis-server");
    let clients = || server.clients().expect("CLIENT LIST");
    let addr = Addr {
        host: "127.0.0.1".into(),
        port: server.port(),
        db: 0,
    };
    let c: Client<Redis, u32> = Client::start(
        "store-test",
        Redis::new(&addr).expect("address"),
        Config::default(),
    )
    .expect("thread");
    let op = Op::Release {
        base: "shutdown-test".into(),
        member: "m".into(),
    };
    assert!(c.submit(op, 1, Duration::from_secs(2)).is_ok());
    assert!(
        within(Duration::from_secs(3), || c.try_complete().is_some()),
        "ZREM answered"
    );
    let before = clients();
    assert!(before >= 1, "our connection: {before}");
    let exited = c.exit_watch();
    drop(c);
    assert!(
        within(Duration::from_secs(2), || exited.done()),
        "the idle I/O thread exits at once"
    );
    let closed = within(Duration::from_secs(2), || clients() == before - 1);
    assert!(closed, "redis still lists {} clients", clients());
}
