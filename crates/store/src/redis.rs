//! Redis: exact fleet-wide rate and concurrency limits.
//!
//! One decision is one `EVALSHA` of [`DECIDE`], which reads the server's
//! `TIME` (proxies' clocks never matter) and, atomically:
//! 1. with a concurrency limit, drops expired leases from the limiter's
//!    sorted set (`ZREMRANGEBYSCORE`) and counts the rest (`ZCARD`): at the
//!    limit, refuses (the rate is not charged);
//! 2. with a rate, runs GCRA on the limiter's theoretical arrival time
//!    (one string, expiring when the bucket is full again): too early,
//!    refuses with the wait;
//! 3. admits: stores the new arrival time and adds a lease (`ZADD`) scored
//!    with its expiry (server time + the lease TTL).
//!
//! With a block length (`--block`), a block in force (`:block`, a string
//! of its end that expires with it) refuses first, touching nothing else,
//! and a rate refusal starts one: every proxy sees it at its next decision.
//!
//! A lease is removed (`ZREM`) when its transaction closes; a proxy that
//! dies leaves its leases to expire. If the script is missing (`NOSCRIPT`:
//! a restart, `SCRIPT FLUSH`), it is loaded again and the decisions retried
//! once, within their deadline.
//!
//! Keys (see [`key_base`]): `rl:{NS}` for an unkeyed limiter, `rl:{NS:HASH}`
//! for a client key, with `:gcra` and `:leases` appended. The braces are a
//! Redis Cluster hash tag: one limiter's two keys share a slot, so one
//! script may touch both; different client keys spread over the slots.
//! On a Cluster ([`Target::Cluster`]) the same commands are routed by
//! their key's slot (see `redis_cluster`).

use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Value;
use sha2::{Digest, Sha256};

use crate::client::{Backend, BatchError};
use crate::redis_cluster::Routed;
use crate::redis_conn::Conn;
use crate::resp::server_error;
pub use crate::resp::MAX_REPLY;
pub use store_url::{Addr, Target};

/// The decision script. KEYS: the bucket, the leases, the block. ARGV:
/// emission interval in µs (0: no rate), burst, concurrency limit (0:
/// none), lease member, lease TTL in ms, (6) `1` to only check the rate
/// (`--count-status`: the response charges it with [`CHARGE`]; the limit
/// takes its lease as usual), and (7) the block length in µs (0: none).
/// Returns `{admitted (0/1), retry-after µs, why (0 admitted, 1
/// concurrency, 2 rate, 3 blocked, 4 a block started), leases held}`.
pub const DECIDE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local ttl_ms = tonumber(ARGV[5])
local block = tonumber(ARGV[7])
local held = 0
if block > 0 then
  local ends = tonumber(redis.call('GET', KEYS[3]) or '0')
  if ends > now then
    return {0, ends - now, 3, 0}
  end
end
if limit > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  held = redis.call('ZCARD', KEYS[2])
  if held >= limit then
    return {0, 0, 1, held}
  end
end
if interval > 0 then
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  if tat < now then tat = now end
  local new_tat = tat + interval
  local allow_at = new_tat - interval * burst
  if allow_at > now then
    if block > 0 then
      redis.call('SET', KEYS[3], string.format('%.0f', now + block), 'PX', math.ceil(block / 1000))
      return {0, block, 4, held}
    end
    return {0, allow_at - now, 2, held}
  end
  if ARGV[6] ~= '1' then
    local px = math.ceil((new_tat - now) / 1000) + 1
    redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', px)
  end
end
if limit > 0 then
  redis.call('ZADD', KEYS[2], string.format('%.0f', now + ttl_ms * 1000), ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ttl_ms + 1000)
  held = held + 1
end
return {1, 0, 0, held}
"#;

/// The charge of `--count-status`: one token from the bucket whether or not
/// it has one, each its full interval however deep below empty (requests
/// that passed the check together all pay), capped at a full bucket plus
/// one day of debt, as `limits::GcraParams::charge`. ARGV: emission
/// interval in µs, burst. Returns the new arrival time.
pub const CHARGE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local new_tat = math.max(tat, now) + interval
local cap = now + interval * burst + 86400000000
if new_tat > cap then new_tat = math.max(cap, tat) end
local px = math.ceil((new_tat - now) / 1000) + 1
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', px)
return new_tat
"#;

/// The hybrid mode's script (`--store-sync`): adds this proxy's hits of one
/// key to the key's counter for the current period of the server's clock
/// (`KEYS[1]:P`, P = server ms / period, kept five periods) and returns
/// `{P, total of P-1, total of P-2, ms left of the key's block}` (two
/// totals, so a proxy whose sync skipped a period still learns it; the
/// block, `KEYS[2]`, set by [`Op::Block`], its time left its TTL, below 1:
/// none). ARGV: period in ms, hits.
pub const SYNC: &str = r#"
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local period = tonumber(ARGV[1])
local p = math.floor(ms / period)
local function key(n) return KEYS[1] .. ':' .. string.format('%.0f', n) end
redis.call('INCRBY', key(p), ARGV[2])
redis.call('PEXPIRE', key(p), period * 5)
local prev1 = redis.call('GET', key(p - 1))
local prev2 = redis.call('GET', key(p - 2))
return {p, tonumber(prev1 or '0'), tonumber(prev2 or '0'), redis.call('PTTL', KEYS[2])}
"#;

/// Largest limiter namespace (the rest of a key is bounded by construction).
pub const MAX_NAMESPACE: usize = 64;

/// The base of a limiter's keys: `rl:{NS}`, or `rl:{NS:HASH}` for a client
/// key (HASH: the first 128 bits of the key's SHA-256, in hex, so any key,
/// however long or binary, makes a short printable name, the same on every
/// proxy).
pub fn key_base(namespace: &str, client_key: Option<&[u8]>) -> String {
    let mut s = String::with_capacity(8 + namespace.len() + 33);
    s.push_str("rl:{");
    s.push_str(namespace);
    if let Some(k) = client_key {
        s.push(':');
        for b in &Sha256::digest(k)[..16] {
            let _ = write!(s, "{b:02x}");
        }
    }
    s.push('}');
    s
}

/// One decision: the limits of one limiter (and client key).
#[derive(Debug, Clone)]
pub struct Decide {
    /// From [`key_base`].
    pub base: String,
    /// 1 s / rate, in µs; 0 without a rate.
    pub interval_us: u64,
    pub burst: u32,
    /// Concurrency limit; 0 without one (then no lease is taken).
    pub limit: u32,
    /// This admission's lease (see [`LeaseIds`]).
    pub member: String,
    pub lease_ttl_ms: u64,
    /// Only check the rate, taking nothing from it (`--count-status`).
    pub check_only: bool,
    /// `--block`: how long a rate refusal blocks the key, µs; 0: no block.
    pub block_us: u64,
}

#[derive(Debug, Clone)]
pub enum Op {
    Decide(Decide),
    /// Gives a lease back: `ZREM base:leases member`.
    Release {
        base: String,
        member: String,
    },
    /// `--count-status`: a response charges the bucket at `base` ([`CHARGE`]).
    Charge {
        base: String,
        interval_us: u64,
        burst: u32,
    },
    /// `--store-sync`: adds `hits` served here to the key's counter of the
    /// current period ([`SYNC`] on `base:sync`) and learns the previous one's
    /// total, and the key's block.
    Sync {
        base: String,
        period_ms: u64,
        hits: u32,
    },
    /// `--store-sync` with `--block`: the key at `base` is blocked for `ms`
    /// from now (`SET base:block 1 PX ms`); the proxies learn it at their
    /// next sync of the key.
    Block {
        base: String,
        ms: u64,
    },
}

/// What a decision found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Admitted {
        leases: u64,
    },
    /// At the concurrency limit.
    Busy {
        leases: u64,
    },
    /// Over the rate: the next request fits after this long.
    TooSoon {
        retry_after: Duration,
    },
    /// Blocked (`--block`) for this long still; `started`: by this
    /// decision, which was over the rate.
    Blocked {
        retry_after: Duration,
        started: bool,
    },
    Released,
    Charged,
    /// The server's period number and the totals, all proxies, of the two
    /// periods before it (the last first), and how long the key's block
    /// still holds (0: none).
    Synced {
        period: u64,
        previous: [u64; 2],
        blocked_ms: u64,
    },
    /// A block was stored ([`Op::Block`]).
    BlockSet,
}

/// Lease members unique across the fleet: a random per-process prefix and a counter.
pub struct LeaseIds {
    prefix: u64,
    next: AtomicU64,
}

impl Default for LeaseIds {
    fn default() -> Self {
        // RandomState is seeded from the OS's randomness.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        LeaseIds {
            prefix: h.finish(),
            next: AtomicU64::new(0),
        }
    }
}

impl LeaseIds {
    pub fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}:{n:x}", self.prefix)
    }
}

/// The Redis backend: one connection (a Cluster: one per master), pipelined.
pub struct Redis {
    conn: Conn,
    sha: String,
    sync_sha: String,
    charge_sha: String,
}

impl Redis {
    /// `target`: an [`Addr`] (one server) or a [`Target`].
    pub fn new(target: impl Into<Target>) -> Result<Redis, String> {
        Ok(Redis {
            conn: Conn::new(&target.into())?,
            sha: String::new(),
            sync_sha: String::new(),
            charge_sha: String::new(),
        })
    }

    fn load_scripts(&mut self, deadline: Instant, connect: bool) -> Result<(), BatchError> {
        let shas = if connect {
            self.conn.connect(&[DECIDE, SYNC, CHARGE], deadline)?
        } else {
            self.conn.load_scripts(&[DECIDE, SYNC, CHARGE], deadline)?
        };
        let [a, b, c] = <[String; 3]>::try_from(shas)
            .map_err(|v| BatchError::Failed(format!("SCRIPT LOAD answered {v:?}")))?;
        (self.sha, self.sync_sha, self.charge_sha) = (a, b, c);
        Ok(())
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

fn parse_decision(v: &Value) -> Result<Reply, String> {
    let Value::Array(items) = v else {
        return Err(format!("unexpected answer {v:?}"));
    };
    let n: Vec<i64> = items.iter().filter_map(int).collect();
    let &[admitted, retry_us, why, held] = n.as_slice() else {
        return Err(format!("unexpected answer {v:?}"));
    };
    let leases = held.max(0) as u64;
    let retry_after = Duration::from_micros(retry_us.max(0) as u64);
    Ok(match (admitted, why) {
        (1, _) => Reply::Admitted { leases },
        (_, 1) => Reply::Busy { leases },
        (_, 3 | 4) => Reply::Blocked {
            retry_after,
            started: why == 4,
        },
        _ => Reply::TooSoon { retry_after },
    })
}

fn parse_sync(v: &Value) -> Result<Reply, String> {
    let Value::Array(items) = v else {
        return Err(format!("unexpected answer {v:?}"));
    };
    let n: Vec<i64> = items.iter().filter_map(int).collect();
    let &[period, p1, p2, block] = n.as_slice() else {
        return Err(format!("unexpected answer {v:?}"));
    };
    let u = |x: i64| x.max(0) as u64;
    Ok(Reply::Synced {
        period: u(period),
        previous: [u(p1), u(p2)],
        blocked_ms: u(block),
    })
}

impl Redis {
    /// The commands of `ops`, each with the key it routes by.
    fn commands(&self, ops: &[&Op]) -> Vec<Routed> {
        ops.iter()
            .map(|op| match op {
                Op::Decide(d) => {
                    let gcra = format!("{}:gcra", d.base);
                    let mut c = redis::cmd("EVALSHA");
                    c.arg(&self.sha)
                        .arg(3)
                        .arg(&gcra)
                        .arg(format!("{}:leases", d.base))
                        .arg(format!("{}:block", d.base))
                        .arg(d.interval_us)
                        .arg(d.burst)
                        .arg(d.limit)
                        .arg(&d.member)
                        .arg(d.lease_ttl_ms)
                        .arg(if d.check_only { 1 } else { 0 })
                        .arg(d.block_us);
                    Routed::new(gcra.as_bytes(), &c)
                }
                Op::Charge {
                    base,
                    interval_us,
                    burst,
                } => {
                    let gcra = format!("{base}:gcra");
                    let mut c = redis::cmd("EVALSHA");
                    c.arg(&self.charge_sha)
                        .arg(1)
                        .arg(&gcra)
                        .arg(*interval_us)
                        .arg(*burst);
                    Routed::new(gcra.as_bytes(), &c)
                }
                Op::Release { base, member } => {
                    let leases = format!("{base}:leases");
                    Routed::new(
                        leases.as_bytes(),
                        redis::cmd("ZREM").arg(&leases).arg(member),
                    )
                }
                Op::Sync {
                    base,
                    period_ms,
                    hits,
                } => {
                    let key = format!("{base}:sync");
                    let mut c = redis::cmd("EVALSHA");
                    c.arg(&self.sync_sha)
                        .arg(2)
                        .arg(&key)
                        .arg(format!("{base}:block"))
                        .arg(*period_ms)
                        .arg(*hits);
                    Routed::new(key.as_bytes(), &c)
                }
                Op::Block { base, ms } => {
                    let key = format!("{base}:block");
                    Routed::new(
                        key.as_bytes(),
                        redis::cmd("SET")
                            .arg(&key)
                            .arg(1)
                            .arg("PX")
                            .arg((*ms).max(1)),
                    )
                }
            })
            .collect()
    }

    /// One round trip; each answer raw.
    fn round_trip(&mut self, ops: &[&Op], deadline: Instant) -> Result<Vec<Value>, BatchError> {
        let cmds = self.commands(ops);
        self.conn.query(&cmds, deadline)
    }
}

fn is_noscript(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

impl Backend for Redis {
    type Op = Op;
    type Reply = Reply;

    fn is_connected(&self) -> bool {
        self.conn.is_connected()
    }

    fn connect(&mut self, deadline: Instant) -> Result<(), BatchError> {
        self.load_scripts(deadline, true)
    }

    fn disconnect(&mut self) {
        self.conn.disconnect();
    }

    fn run(
        &mut self,
        ops: &[&Op],
        deadline: Instant,
        out: &mut Vec<Result<Reply, String>>,
    ) -> Result<(), BatchError> {
        let mut values = self.round_trip(ops, deadline)?;
        if values.len() != ops.len() {
            return Err(BatchError::Failed(
                "answers and requests differ in number".into(),
            ));
        }
        let missing: Vec<usize> = (0..values.len())
            .filter(|&i| is_noscript(&values[i]))
            .collect();
        if !missing.is_empty() {
            // The server lost the script: load it and retry those once.
            self.load_scripts(deadline, false)?;
            let again: Vec<&Op> = missing.iter().map(|&i| ops[i]).collect();
            let retried = self.round_trip(&again, deadline)?;
            for (i, v) in missing.into_iter().zip(retried) {
                values[i] = v;
            }
        }
        for (op, v) in ops.iter().zip(&values) {
            out.push(match (op, v) {
                (_, v @ Value::ServerError(_)) => Err(server_error(v).unwrap_or_default()),
                (Op::Decide(_), v) => parse_decision(v),
                (Op::Release { .. }, _) => Ok(Reply::Released),
                (Op::Charge { .. }, _) => Ok(Reply::Charged),
                (Op::Sync { .. }, v) => parse_sync(v),
                (Op::Block { .. }, _) => Ok(Reply::BlockSet),
            });
        }
        Ok(())
    }
}
