//! Read, modify, compare-and-swap: state that proxies share by updating
//! it in place (ip_throttle's per-IP records), on any store that can read
//! a key with a version and write it only if that version still holds
//! (memcached `gets`/`cas`, a Redis script comparing the value).
//!
//! An op is a key and a [`Modify`]: a pure function from the key's current
//! value to a reply and what to write back. A batch is served in rounds:
//! 1. one pipelined read per server of every key of the round;
//! 2. each op's `apply` on what it read, ops on one key one after the other
//!    (each sees what the previous one left), then one pipelined
//!    conditional write per server and key;
//! 3. the ops of a key whose write lost a race (another proxy wrote it
//!    first) run again from step 1, at most [`MAX_ROUNDS`] times, so no
//!    update is lost (Perlbal's get then set raced).

use std::time::Instant;

use crate::client::{Backend, BatchError};

/// Rounds of read and compare-and-swap for one op before it gives up.
pub const MAX_ROUNDS: usize = 4;

/// What to write back after reading a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    Keep,
    Set { value: Vec<u8>, ttl_secs: u32 },
    Delete,
}

/// A read-modify-write: pure, as it may run again after a lost race.
pub trait Modify: Send + 'static {
    type Out: Send + 'static;
    fn apply(&self, current: Option<&[u8]>) -> (Self::Out, Put);
}

/// One op: a key and what to do with its value.
pub struct Rmw<M> {
    pub key: String,
    pub modify: M,
}

/// A conditional write of one key.
pub struct CasWrite<'a, V> {
    pub key: &'a str,
    /// What the read found (`None`: absent); the write holds only if the
    /// key is still so.
    pub read: Option<&'a V>,
    /// `Some`: store this (`Put::Set`); `None`: delete. A delete may be
    /// unconditional (memcached's text protocol has no conditional delete):
    /// callers delete only what must go whatever happened meanwhile (the
    /// `unban` command).
    pub value: Option<(&'a [u8], u32)>,
}

/// A store's side of the rounds: versioned reads, conditional writes.
pub trait CasStore: Send + 'static {
    /// What a conditional write compares against (memcached's CAS unique,
    /// or the value itself).
    type Version: Send + 'static;

    fn valid_key(&self, key: &str) -> bool;
    /// Which server holds `key` (0 with one server).
    fn server_of(&self, key: &str) -> usize;
    fn servers(&self) -> usize;
    fn is_connected(&self) -> bool;
    fn connect(&mut self, deadline: Instant) -> Result<(), BatchError>;
    fn disconnect(&mut self);
    /// The values of `keys` (all on `server`), in order, in one round trip.
    #[allow(clippy::type_complexity)]
    fn read(
        &mut self,
        server: usize,
        keys: &[&str],
        deadline: Instant,
    ) -> Result<Vec<Option<(Vec<u8>, Self::Version)>>, BatchError>;
    /// The writes (all on `server`) in one round trip; per write, true if
    /// it lost a race (the key changed since it was read).
    fn write(
        &mut self,
        server: usize,
        writes: &[CasWrite<'_, Self::Version>],
        deadline: Instant,
    ) -> Result<Vec<bool>, BatchError>;
}

/// A [`Backend`] of read-modify-write ops on a [`CasStore`].
pub struct CasBackend<S, M> {
    store: S,
    _m: std::marker::PhantomData<fn(M)>,
}

impl<S, M> CasBackend<S, M> {
    pub fn new(store: S) -> Self {
        CasBackend {
            store,
            _m: std::marker::PhantomData,
        }
    }
}

/// One key's ops in a round, and what they leave.
struct KeyOps<V, O> {
    key: usize,
    ops: Vec<usize>,
    read: Option<(Vec<u8>, V)>,
    replies: Vec<O>,
    write: Option<Option<(Vec<u8>, u32)>>,
}

impl<S: CasStore, M: Modify> Backend for CasBackend<S, M> {
    type Op = Rmw<M>;
    type Reply = M::Out;

    fn is_connected(&self) -> bool {
        self.store.is_connected()
    }

    fn connect(&mut self, deadline: Instant) -> Result<(), BatchError> {
        self.store.connect(deadline)
    }

    fn disconnect(&mut self) {
        self.store.disconnect()
    }

    fn run(
        &mut self,
        ops: &[&Rmw<M>],
        deadline: Instant,
        out: &mut Vec<Result<M::Out, String>>,
    ) -> Result<(), BatchError> {
        let mut answers: Vec<Option<Result<M::Out, String>>> = Vec::with_capacity(ops.len());
        let mut todo = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            if self.store.valid_key(&op.key) {
                answers.push(None);
                todo.push(i);
            } else {
                answers.push(Some(Err(format!("invalid store key '{}'", op.key))));
            }
        }
        for _round in 0..MAX_ROUNDS {
            if todo.is_empty() {
                break;
            }
            let mut raced = Vec::new();
            for server in 0..self.store.servers() {
                let groups = self.round(server, ops, &todo, deadline)?;
                for g in groups {
                    let (lost, replies) = g;
                    for (i, reply) in replies {
                        if lost {
                            raced.push(i);
                        } else {
                            answers[i] = Some(Ok(reply));
                        }
                    }
                }
            }
            raced.sort_unstable();
            todo = raced;
        }
        for i in todo {
            answers[i] = Some(Err(format!(
                "'{}': lost {MAX_ROUNDS} compare-and-swap races in a row",
                ops[i].key
            )));
        }
        out.extend(
            answers
                .into_iter()
                .map(|a| a.unwrap_or_else(|| Err("no answer".into()))),
        );
        Ok(())
    }
}

/// Per key of a round: whether its write lost a race, and its ops' replies.
type Settled<O> = (bool, Vec<(usize, O)>);

impl<S: CasStore, M: Modify> CasBackend<S, M> {
    /// One round on one server: read its keys of `todo`, apply, write.
    fn round(
        &mut self,
        server: usize,
        ops: &[&Rmw<M>],
        todo: &[usize],
        deadline: Instant,
    ) -> Result<Vec<Settled<M::Out>>, BatchError> {
        let mut keys: Vec<&str> = Vec::new();
        let mut groups: Vec<KeyOps<S::Version, M::Out>> = Vec::new();
        for &i in todo {
            let k = ops[i].key.as_str();
            if self.store.server_of(k) != server {
                continue;
            }
            match keys.iter().position(|&x| x == k) {
                Some(j) => groups[j].ops.push(i),
                None => {
                    groups.push(KeyOps {
                        key: keys.len(),
                        ops: vec![i],
                        read: None,
                        replies: Vec::new(),
                        write: None,
                    });
                    keys.push(k);
                }
            }
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let found = self.store.read(server, &keys, deadline)?;
        for (g, f) in groups.iter_mut().zip(found) {
            let mut value: Option<Vec<u8>> = f.as_ref().map(|(v, _)| v.clone());
            let mut ttl = 0;
            let mut changed = false;
            for &i in &g.ops {
                let (reply, put) = ops[i].modify.apply(value.as_deref());
                match put {
                    Put::Keep => {}
                    Put::Set { value: v, ttl_secs } => {
                        value = Some(v);
                        ttl = ttl_secs;
                        changed = true;
                    }
                    Put::Delete => {
                        value = None;
                        changed = true;
                    }
                }
                g.replies.push(reply);
            }
            // Nothing to write if nothing changed, or a key absent stays so.
            if changed && (value.is_some() || f.is_some()) {
                g.write = Some(value.map(|v| (v, ttl)));
            }
            g.read = f;
        }
        let writes: Vec<CasWrite<'_, S::Version>> = groups
            .iter()
            .filter_map(|g| {
                let w = g.write.as_ref()?;
                Some(CasWrite {
                    key: keys[g.key],
                    read: g.read.as_ref().map(|(_, v)| v),
                    value: w.as_ref().map(|(v, ttl)| (v.as_slice(), *ttl)),
                })
            })
            .collect();
        let lost = if writes.is_empty() {
            Vec::new()
        } else {
            self.store.write(server, &writes, deadline)?
        };
        if lost.len() != writes.len() {
            return Err(BatchError::Failed(format!(
                "{} answers to {} writes",
                lost.len(),
                writes.len()
            )));
        }
        let mut lost = lost.into_iter();
        Ok(groups
            .into_iter()
            .map(|g| {
                let raced = g.write.is_some() && lost.next().unwrap_or(true);
                (raced, g.ops.into_iter().zip(g.replies).collect())
            })
            .collect())
    }
}
