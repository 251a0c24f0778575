//! One connection to one Redis server and the RESP2 replies read on it:
//! one deadline bounds each exchange, and a reply is read into at most
//! [`MAX_REPLY`] bytes. Below both the single-server and the Cluster
//! connection (`redis_conn`, `redis_cluster`), and uses neither.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Instant;

use redis::Value;

use crate::client::BatchError;
use crate::net::{io_err, Endpoint, Timed};

/// Most memory one reply may take as it is read: its bytes, and each
/// element counted as at least a [`Value`]. No reply of ours is near it
/// (a decision is under 100 bytes, a record at most 4 KiB, a large
/// Cluster's slot map tens of KiB); a server that sends more breaks the
/// connection rather than grow the I/O thread's memory until the deadline.
pub const MAX_REPLY: usize = 1 << 20;
/// Deepest nesting of arrays read (ours: 3, in `CLUSTER SLOTS`).
const MAX_DEPTH: usize = 8;

/// One connection to a Redis server, read and written with one deadline
/// per exchange ([`Timed`]).
///
/// Replies are read here rather than by the `redis` crate's `Connection`:
/// it sets the read timeout once per reply and its parser then reads as
/// many times as the reply takes, each read waiting that long again, and
/// it buffers a reply of any length. The RESP2 types are read here (we
/// never ask for RESP3); error replies go through the crate's parser, so
/// codes such as `NOSCRIPT` or `MOVED` read as they always did.
///
/// Generic over its reader only so that [`read_reply`] (the fuzz target's
/// entry) reads replies from bytes with the very same code.
pub(crate) struct RespConn<R = BufReader<Timed>> {
    io: R,
    line: Vec<u8>,
}

impl RespConn {
    pub fn open(endpoint: &Endpoint, deadline: Instant) -> Result<RespConn, BatchError> {
        let s = endpoint.connect(deadline)?;
        Ok(RespConn {
            io: BufReader::with_capacity(16 * 1024, Timed::new(s)),
            line: Vec::with_capacity(64),
        })
    }

    pub fn send(&mut self, packed: &[u8], deadline: Instant) -> Result<(), BatchError> {
        let io = self.io.get_mut();
        io.deadline = deadline;
        io.write_all(packed).map_err(io_err)
    }

    /// One reply, by the deadline.
    pub fn recv(&mut self, deadline: Instant) -> Result<Value, BatchError> {
        self.io.get_mut().deadline = deadline;
        let mut budget = MAX_REPLY;
        self.value(&mut budget, 0)
    }
}

/// One reply read from `bytes` as [`RespConn::recv`] reads it from a
/// server, and the bytes it took: the RESP reader's fuzz target
/// (`fuzz/fuzz_targets/store_resp.rs`).
#[doc(hidden)]
pub fn read_reply(bytes: &[u8]) -> Result<(Value, usize), BatchError> {
    let mut conn = RespConn {
        io: bytes,
        line: Vec::with_capacity(64),
    };
    let mut budget = MAX_REPLY;
    let v = conn.value(&mut budget, 0)?;
    Ok((v, bytes.len() - conn.io.len()))
}

impl<R: BufRead> RespConn<R> {
    fn value(&mut self, budget: &mut usize, depth: usize) -> Result<Value, BatchError> {
        charge(budget, std::mem::size_of::<Value>())?;
        self.read_line(budget)?;
        let Some((&kind, rest)) = self.line.split_first() else {
            return Err(protocol("an empty line"));
        };
        Ok(match kind {
            b'+' if rest == b"OK" => Value::Okay,
            b'+' => Value::SimpleString(
                String::from_utf8(rest.to_vec()).map_err(|_| protocol("a non-UTF-8 status"))?,
            ),
            b'-' => {
                self.line.extend_from_slice(b"\r\n");
                redis::parse_redis_value(&self.line).map_err(|e| protocol(&e.to_string()))?
            }
            b':' => Value::Int(number(rest)?),
            b'$' => match number(rest)? {
                -1 => Value::Nil,
                n => {
                    let n = usize::try_from(n).map_err(|_| protocol("a negative length"))?;
                    charge(budget, n.saturating_add(2))?;
                    let mut b = vec![0; n + 2];
                    self.io.read_exact(&mut b).map_err(eof)?;
                    if !b.ends_with(b"\r\n") {
                        return Err(protocol("a bulk string not ended by CRLF"));
                    }
                    b.truncate(n);
                    Value::BulkString(b)
                }
            },
            b'*' => match number(rest)? {
                -1 => Value::Nil,
                n => {
                    let n = usize::try_from(n).map_err(|_| protocol("a negative length"))?;
                    if depth >= MAX_DEPTH {
                        return Err(protocol("arrays nested too deep"));
                    }
                    // Grown as elements arrive: the length is the server's word.
                    let mut items = Vec::new();
                    for _ in 0..n {
                        items.push(self.value(budget, depth + 1)?);
                    }
                    Value::Array(items)
                }
            },
            _ => return Err(protocol("an unknown reply type")),
        })
    }

    /// The next line, without its CRLF, into `self.line`.
    fn read_line(&mut self, budget: &mut usize) -> Result<(), BatchError> {
        self.line.clear();
        let n = (&mut self.io)
            .take(*budget as u64)
            .read_until(b'\n', &mut self.line)
            .map_err(eof)?;
        *budget -= n;
        if self.line.ends_with(b"\r\n") {
            self.line.truncate(n - 2);
            return Ok(());
        }
        Err(if *budget == 0 {
            too_large()
        } else if n == 0 {
            BatchError::Failed("redis closed the connection".into())
        } else if self.line.ends_with(b"\n") {
            protocol("a line not ended by CRLF")
        } else {
            BatchError::Failed("redis closed the connection mid-reply".into())
        })
    }
}

fn charge(budget: &mut usize, n: usize) -> Result<(), BatchError> {
    *budget = budget.checked_sub(n).ok_or_else(too_large)?;
    Ok(())
}

fn too_large() -> BatchError {
    BatchError::Failed(format!(
        "redis: a reply larger than {} KiB",
        MAX_REPLY / 1024
    ))
}

fn protocol(what: &str) -> BatchError {
    BatchError::Failed(format!("redis protocol error: {what}"))
}

fn eof(e: std::io::Error) -> BatchError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        BatchError::Failed("redis closed the connection mid-reply".into())
    } else {
        io_err(e)
    }
}

fn number(digits: &[u8]) -> Result<i64, BatchError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol("a malformed number"))
}

/// Sends `packed` (`n` commands) and reads the `n` answers, all by the
/// deadline; error replies are answers.
pub(crate) fn exchange(
    conn: &mut RespConn,
    packed: &[u8],
    n: usize,
    deadline: Instant,
) -> Result<Vec<Value>, BatchError> {
    conn.send(packed, deadline)?;
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        values.push(conn.recv(deadline)?);
    }
    Ok(values)
}

/// `SELECT db` (a `redis://HOST/DB` other than 0).
pub(crate) fn select(conn: &mut RespConn, db: i64, deadline: Instant) -> Result<(), BatchError> {
    let packed = redis::cmd("SELECT").arg(db).get_packed_command();
    match exchange(conn, &packed, 1, deadline)?.pop() {
        Some(Value::Okay) => Ok(()),
        v => Err(BatchError::Failed(format!("SELECT {db} answered {v:?}"))),
    }
}

/// Loads `scripts` in one round trip; their SHA1s for EVALSHA.
pub(crate) fn load_scripts(
    conn: &mut RespConn,
    scripts: &[&str],
    deadline: Instant,
) -> Result<Vec<String>, BatchError> {
    let mut p = redis::pipe();
    for s in scripts {
        p.cmd("SCRIPT").arg("LOAD").arg(*s);
    }
    let v = exchange(conn, &p.get_packed_pipeline(), scripts.len(), deadline)?;
    v.iter()
        .map(|v| match v {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        })
        .collect::<Option<Vec<String>>>()
        .ok_or_else(|| BatchError::Failed(format!("SCRIPT LOAD answered {v:?}")))
}

/// `redis: CODE details` of an error reply.
pub(crate) fn server_error(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(format!(
            "redis: {} {}",
            e.code(),
            e.details().unwrap_or_default()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
