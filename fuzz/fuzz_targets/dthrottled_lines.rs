//! dthrottled's line protocol (daemons/dthrottled, `Server::serve_here`, the
//! loop each connection's thread runs): tags, one a line, over a stream
//! that delivers them in arbitrary pieces. Input: the first byte picks
//! `max_line`, the second seeds the sizes of the reads; the rest is what
//! the client sent. With a bucket that never runs dry, every answer is
//! known: one per `\n`, in order, `NO` for an empty tag (a bare `\r` too)
//! or a line over `max_line` bytes, else `OK`; nothing for a last line
//! without its `\n`. Invariants: no panic; the answers are exactly those,
//! whatever the read sizes.

#![no_main]
#![forbid(unsafe_code)]

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use dthrottled::config::Config;
use dthrottled::server::{Server, Stream};
use libfuzzer_sys::fuzz_target;

const MAX_LINES: [usize; 8] = [1, 2, 3, 4, 7, 16, 256, 16 * 1024];

/// A connection whose reads return the input in pieces of pseudo-random
/// sizes, and whose writes are kept.
struct Conn {
    input: Mutex<(Vec<u8>, usize, u32)>,
    output: Mutex<Vec<u8>>,
}

impl Stream for Conn {
    fn timeouts(&self, _read: Option<Duration>, _write: Duration) -> io::Result<()> {
        Ok(())
    }

    fn read_into(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut g = self.input.lock().unwrap();
        let (data, at, seed) = &mut *g;
        // xorshift: read sizes from 1 to 64 bytes, or the whole buffer.
        *seed ^= *seed << 13;
        *seed ^= *seed >> 17;
        *seed ^= *seed << 5;
        let want = if *seed % 8 == 0 {
            buf.len()
        } else {
            (*seed % 64) as usize + 1
        };
        let n = want.min(buf.len()).min(data.len() - *at);
        buf[..n].copy_from_slice(&data[*at..*at + n]);
        *at += n;
        Ok(n)
    }

    fn write_all_of(&self, buf: &[u8]) -> io::Result<()> {
        self.output.lock().unwrap().extend_from_slice(buf);
        Ok(())
    }

    fn shut(&self) {}
}

fuzz_target!(|data: &[u8]| {
    let [pick, seed, sent @ ..] = data else {
        return;
    };
    let max_line = MAX_LINES[usize::from(pick & 7)];
    let config = Config {
        burst: 1_000_000_000,
        rate: 1e9,
        max_line,
        max_tags: 1024,
        max_report_tags: 64,
        ..Config::default()
    };
    let server = Server::new(&config);
    let conn = Conn {
        input: Mutex::new((sent.to_vec(), 0, u32::from(*seed) | 0x100)),
        output: Mutex::new(Vec::new()),
    };
    server.serve_here(&conn).expect("no I/O error");
    let mut want = Vec::new();
    let mut lines = sent.split(|&b| b == b'\n');
    lines.next_back(); // the last piece has no `\n`: unanswered
    for line in lines {
        let tag = line.strip_suffix(b"\r").unwrap_or(line);
        want.extend_from_slice(if line.len() > max_line || tag.is_empty() {
            b"NO\n"
        } else {
            b"OK\n"
        });
    }
    assert_eq!(*conn.output.lock().unwrap(), want);
});
