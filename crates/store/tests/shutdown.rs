//! Dropping a client (the last rule using a store is gone, e.g. after a
//! config reload) never waits for its I/O thread, and the thread then exits
//! on its own, closing its connection, within the requests' deadline.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ats_tests::redis::Redis as Server;
use store::redis::{Addr, Op, Redis};
use store::{Backend, BatchError, Client, Config};

/// A store that never answers: each round trip holds the thread until its
/// deadline (a hung store).
struct Stuck {
    conn: Option<TcpStream>,
    addr: std::net::SocketAddr,
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
        deadline: Instant,
        _out: &mut Vec<Result<(), String>>,
    ) -> Result<(), BatchError> {
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        Err(BatchError::Timeout)
    }
}

/// Waits (at most `bound`) for `f`; how long it took.
fn within(bound: Duration, f: impl Fn() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < bound {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

#[test]
fn a_drop_during_a_hung_round_trip_returns_at_once_and_the_thread_exits_by_the_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let addr = listener.local_addr().expect("address");
    let c: Client<Stuck, u32> =
        Client::start("stuck-test", Stuck { conn: None, addr }, Config::default()).expect("thread");
    let timeout = Duration::from_millis(800);
    assert!(c.submit((), 1, timeout).is_ok());
    let (mut server_side, _) = listener.accept().expect("the client connects");
    // The round trip is under way (the thread sleeps until its deadline).
    std::thread::sleep(Duration::from_millis(50));
    let exited = c.exit_watch();
    let t = Instant::now();
    drop(c);
    let dropped_in = t.elapsed();
    assert!(
        dropped_in < Duration::from_millis(20),
        "drop waited {dropped_in:?} for a hung round trip"
    );
    assert!(!exited.done(), "the thread is still in its round trip");
    let gone = within(Duration::from_secs(3), || exited.done());
    assert!(
        gone.is_some(),
        "the I/O thread did not exit after its deadline"
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
        within(Duration::from_secs(3), || c.try_complete().is_some()).is_some(),
        "ZREM answered"
    );
    let before = clients();
    assert!(before >= 1, "our connection: {before}");
    let exited = c.exit_watch();
    drop(c);
    assert!(
        within(Duration::from_secs(2), || exited.done()).is_some(),
        "the idle I/O thread exits at once"
    );
    let closed = within(Duration::from_secs(2), || clients() == before - 1);
    assert!(closed.is_some(), "redis still lists {} clients", clients());
}
