use super::*;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// A connection whose server sends `bytes`, then stays open.
fn conn(bytes: Vec<u8>) -> RespConn {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut peer, _) = l.accept().unwrap();
    std::thread::spawn(move || {
        let _ = peer.write_all(&bytes);
        // Open until the client closes.
        let _ = peer.read(&mut [0; 1]);
    });
    RespConn {
        io: BufReader::new(Timed::new(s)),
        line: Vec::new(),
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(2)
}

fn failed(r: Result<Value, BatchError>) -> String {
    match r {
        Err(BatchError::Failed(e)) => e,
        r => panic!("{r:?}"),
    }
}

#[test]
fn reads_the_resp2_types_in_order() {
    let mut c = conn(
        b"*3\r\n$3\r\nabc\r\n:-5\r\n*1\r\n$0\r\n\r\n+OK\r\n+PONG\r\n$-1\r\n*-1\r\n*0\r\n".to_vec(),
    );
    assert_eq!(
        c.recv(soon()).unwrap(),
        Value::Array(vec![
            Value::BulkString(b"abc".to_vec()),
            Value::Int(-5),
            Value::Array(vec![Value::BulkString(Vec::new())]),
        ])
    );
    assert_eq!(c.recv(soon()).unwrap(), Value::Okay);
    assert_eq!(c.recv(soon()).unwrap(), Value::SimpleString("PONG".into()));
    assert_eq!(c.recv(soon()).unwrap(), Value::Nil);
    assert_eq!(c.recv(soon()).unwrap(), Value::Nil);
    assert_eq!(c.recv(soon()).unwrap(), Value::Array(Vec::new()));
    // Nothing more comes: the deadline ends the wait.
    let r = c.recv(Instant::now() + Duration::from_millis(20));
    assert_eq!(r, Err(BatchError::Timeout));
}

#[test]
fn error_replies_keep_their_codes() {
    let mut c = conn(b"-NOSCRIPT No matching script.\r\n-MOVED 3999 127.0.0.1:6381\r\n".to_vec());
    let Value::ServerError(e) = c.recv(soon()).unwrap() else {
        panic!()
    };
    assert_eq!(e.code(), "NOSCRIPT");
    assert!(is_error(
        &c.recv(soon()).unwrap(),
        "MOVED",
        "3999 127.0.0.1:6381"
    ));
}

/// The fuzz target's entry reads what `recv` reads, and says how much.
#[test]
fn replies_read_from_bytes() {
    let bytes = b"*2\r\n:7\r\n$2\r\nab\r\n+OK\r\n";
    let (v, took) = read_reply(bytes).unwrap();
    assert_eq!(
        v,
        Value::Array(vec![Value::Int(7), Value::BulkString(b"ab".to_vec())])
    );
    assert_eq!(read_reply(&bytes[took..]).unwrap(), (Value::Okay, 5));
    let e = failed(read_reply(b"$3\r\nab").map(|(v, _)| v));
    assert!(e.contains("mid-reply"), "{e}");
}

fn is_error(v: &Value, code: &str, details: &str) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == code && e.details() == Some(details))
}

#[test]
fn malformed_replies_break_the_connection() {
    for bad in [
        &b"?x\r\n"[..],
        b":12a\r\n",
        b"$3\r\nabcd\r\n",
        b"+OK\n",
        b"$-2\r\n",
        b"\r\n",
    ] {
        let e = failed(conn(bad.to_vec()).recv(soon()));
        assert!(e.contains("protocol"), "{bad:?}: {e}");
    }
    let nested = [b"*1\r\n".repeat(MAX_DEPTH + 1), b":1\r\n".to_vec()].concat();
    assert!(failed(conn(nested).recv(soon())).contains("nested"));
}

#[test]
fn a_reply_is_capped() {
    // Refused on its announced length, before any of it is read.
    let e = failed(conn(format!("${}\r\n", MAX_REPLY).into_bytes()).recv(soon()));
    assert!(e.contains("larger than 1024 KiB"), "{e}");
    // A line that never ends.
    let e = failed(conn(vec![b'+'; MAX_REPLY + 10]).recv(soon()));
    assert!(e.contains("larger than"), "{e}");
    // Many small elements: each counts as a Value.
    let n = MAX_REPLY / std::mem::size_of::<Value>();
    let many = [format!("*{n}\r\n").into_bytes(), b":1\r\n".repeat(n)].concat();
    assert!(failed(conn(many).recv(soon())).contains("larger than"));
    // Just under the cap is read.
    let n = MAX_REPLY - 2 * std::mem::size_of::<Value>() - 64;
    let big = [
        format!("${n}\r\n").into_bytes(),
        vec![b'x'; n],
        b"\r\n".to_vec(),
    ]
    .concat();
    assert!(matches!(conn(big).recv(soon()), Ok(Value::BulkString(b)) if b.len() == n));
}

#[test]
fn a_closed_connection_is_an_error() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut peer, _) = l.accept().unwrap();
    peer.write_all(b"*2\r\n:1\r\n").unwrap();
    drop(peer);
    let mut c = RespConn {
        io: BufReader::new(Timed::new(s)),
        line: Vec::new(),
    };
    let e = failed(c.recv(soon()));
    assert!(e.contains("closed the connection"), "{e}");
}
