//! Per-transaction, per-session and per-connection state, dropped when ATS
//! closes the transaction (TXN_CLOSE), session (SSN_CLOSE) or connection
//! (VCONN_CLOSE, [`VConnData`]).
//!
//! The state is boxed (stamped, see [`copy_id`]) into a TS user argument. Putting a resource
//! guard in it (a concurrency permit, an in-flight counter) makes "release
//! exactly once, whatever the outcome" a property of `Drop`: TXN_CLOSE fires
//! for aborted, failed and errored transactions alike. There is no `take`:
//! a value is only ever dropped by the reaper, so a `&T` handed out by `get`
//! for the duration of a callback can never dangle; state that changes over
//! a transaction's life uses interior mutability.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::cont::{HookCont, HookHandler};
use crate::txn::{Done, Hook, HookId, Ssn, SsnHook, Txn};

mod raw;
// Compiled for tests on 9.x too: it is pure, and its tests run everywhere.
#[cfg(any(ats_10, test))]
mod table;
mod values;
mod vconn;

pub(crate) use vconn::ConnMarks;
pub use vconn::VConnData;

use raw::{arg_get, arg_set, copy_id, ours, reserve, stamped, take_raw, Scope, Stamped};
use values::{Key, TxnValues, TABLE_BITS};

/// Drops whatever a user argument holds when the transaction/session closes.
struct Reaper<T> {
    idx: c_int,
    /// A transaction user argument's values and where their boxes go back (sessions
    /// free theirs).
    txn: Option<(Arc<TxnValues>, Arc<Pool<T>>)>,
    _t: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static> HookHandler for Reaper<T> {
    fn on_txn(&self, hook: Hook<'_>) -> Done {
        if let Some((values, pool)) = &self.txn {
            // SAFETY: the user argument of this reaper stores only Stamped<T> (TxnData::<T>::set).
            if let Some(b) = unsafe { values.take::<T>(Key::of(hook.txn())) } {
                pool.recycle(b);
            }
        }
        hook.resume()
    }

    fn on_ssn(&self, hook: SsnHook<'_>) -> Done {
        // SAFETY: as above, for SsnData::<T>::set.
        drop(unsafe { take_raw::<T>(Scope::Ssn, hook.ssn().as_ptr().cast(), self.idx) });
        hook.resume()
    }
}

/// Boxes of values given back at TXN_CLOSE, reused by the next `set`: in
/// the steady state storing a transaction's state allocates nothing (a
/// lock-free pop and push instead of malloc and free, ~90 instructions less
/// per transaction under callgrind). At most `POOL` boxes are kept; beyond
/// that they are freed.
struct Pool<T>(ArrayQueue<Box<MaybeUninit<Stamped<T>>>>);

/// Boxes a pool keeps: a few hundred kB for a state of about 100 bytes.
const POOL: usize = 4096;

impl<T> Pool<T> {
    fn stamped(&self, value: T) -> *mut Stamped<T> {
        let t = Stamped {
            copy: copy_id(),
            value,
        };
        match self.0.pop() {
            Some(mut b) => {
                b.write(t);
                // MaybeUninit<X> has X's layout: the box is a Box<Stamped<T>> now.
                Box::into_raw(b).cast::<Stamped<T>>()
            }
            None => Box::into_raw(Box::new(t)),
        }
    }

    /// Moves the value out of a box from [`stamped`](Self::stamped) that was
    /// never stored, and keeps the box.
    ///
    /// # Safety
    /// `p` came from `self.stamped` and is owned by the caller.
    unsafe fn unstamp(&self, p: *mut Stamped<T>) -> T {
        // SAFETY: per the contract, a valid, owned Stamped<T>.
        let b: Box<MaybeUninit<Stamped<T>>> = unsafe { Box::from_raw(p.cast()) };
        // SAFETY: initialised by `stamped`; read once, then only the memory is kept.
        let t = unsafe { b.assume_init_read() };
        let _ = self.0.push(b);
        t.value
    }

    /// Drops the value and keeps its box (or frees it if the pool is full).
    fn recycle(&self, b: Box<Stamped<T>>) {
        let raw = Box::into_raw(b);
        // SAFETY: `raw` is a valid, owned Stamped<T>, dropped exactly once
        // here; if its Drop panics the memory leaks (never freed twice).
        unsafe { std::ptr::drop_in_place(raw) };
        // SAFETY: the same allocation, now holding no value; MaybeUninit
        // has Stamped<T>'s layout, so freeing or reusing it is sound.
        let empty: Box<MaybeUninit<Stamped<T>>> = unsafe { Box::from_raw(raw.cast()) };
        let _ = self.0.push(empty);
    }
}

/// Per-transaction state of type `T` (in a user argument, or a table on 10.x).
/// Create one per state type at plugin init.
pub struct TxnData<T> {
    values: Arc<TxnValues>,
    reaper: HookCont,
    pool: Arc<Pool<T>>,
    _t: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static> TxnData<T> {
    /// Reserves the user argument; `name` should be unique to the plugin (e.g. "rate_limit").
    pub fn new(name: &str) -> Result<Self, String> {
        Self::with_table_bits(name, TABLE_BITS)
    }

    /// As [`new`](Self::new), with a table of `2^bits` buckets of 4 on
    /// 10.x (ignored on 9.x), at most 2^20. For tests that must drive the
    /// spill to the user argument (probe.so's `--slot-table-bits`).
    pub fn with_table_bits(name: &str, bits: u32) -> Result<Self, String> {
        let idx = reserve(Scope::Txn, name)?;
        let values = Arc::new(TxnValues::new(idx, bits.min(20)));
        let pool = Arc::new(Pool(ArrayQueue::new(POOL)));
        let reaper = HookCont::new(Reaper::<T> {
            idx,
            txn: Some((values.clone(), pool.clone())),
            _t: PhantomData,
        })?;
        Ok(TxnData {
            values,
            reaper,
            pool,
            _t: PhantomData,
        })
    }

    /// Stores `value` for the transaction; it is dropped at TXN_CLOSE. If
    /// the user argument is occupied (the plugin twice in one remap chain, or a
    /// second remap of the transaction), the value is handed back.
    /// Returns the stored value, as [`TxnData::get`] would.
    pub fn set<'t>(&self, txn: Txn<'t>, value: T) -> Result<&'t T, T> {
        let p = self.pool.stamped(value);
        if let Err(p) = self.values.put(Key::of(txn), p) {
            // SAFETY: `p` came from the pool just now and was not stored.
            return Err(unsafe { self.pool.unstamp(p) });
        }
        txn.hook(HookId::TxnClose, &self.reaper);
        // SAFETY: as in `get`: the box lives until TXN_CLOSE, after every
        // callback that holds `txn`.
        Ok(unsafe { &(*p).value })
    }

    /// The state stored for the transaction, if any.
    pub fn get<'t>(&self, txn: Txn<'t>) -> Option<&'t T> {
        // SAFETY: this user argument stores only Stamped<T>; the box is owned until
        // TXN_CLOSE, which cannot happen while a callback holding `txn` runs.
        unsafe { self.values.get::<T>(Key::of(txn)) }.map(|t| &t.value)
    }
}

/// Per-session state of type `T` (in a user argument), dropped at SSN_CLOSE.
pub struct SsnData<T> {
    idx: c_int,
    reaper: HookCont,
    _t: PhantomData<fn(T)>,
}

impl<T: Send + Sync + 'static> SsnData<T> {
    pub fn new(name: &str) -> Result<Self, String> {
        let idx = reserve(Scope::Ssn, name)?;
        let reaper = HookCont::new(Reaper::<T> {
            idx,
            txn: None,
            _t: PhantomData,
        })?;
        Ok(SsnData {
            idx,
            reaper,
            _t: PhantomData,
        })
    }

    /// Stores `value` for the session; dropped at SSN_CLOSE. Hands the value
    /// back if the user argument is occupied (also by another copy of the plugin).
    pub fn set(&self, ssn: Ssn<'_>, value: T) -> Result<(), T> {
        let obj: *mut c_void = ssn.as_ptr().cast();
        // SAFETY: live session, reserved index.
        if !unsafe { arg_get(Scope::Ssn, obj, self.idx) }.is_null() {
            return Err(value);
        }
        // SAFETY: as in TxnData::set.
        unsafe { arg_set(Scope::Ssn, obj, self.idx, stamped(value).cast()) };
        ssn.hook(HookId::SsnClose, &self.reaper);
        Ok(())
    }

    /// This copy's value for the session, if any.
    pub fn get<'s>(&self, ssn: Ssn<'s>) -> Option<&'s T> {
        // SAFETY: live session; the user argument holds null or a stamped box owned until SSN_CLOSE.
        unsafe { ours::<T>(Scope::Ssn, ssn.as_ptr().cast(), self.idx) }.map(|t| &t.value)
    }
}
