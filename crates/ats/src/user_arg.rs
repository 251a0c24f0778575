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

use std::ffi::{c_int, c_void, CString};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::cont::{HookCont, HookHandler};
use crate::txn::{Done, Hook, HookId, Ssn, SsnHook, Txn};
use crate::{log::to_cstring, sys};

// Compiled for tests on 9.x too: it is pure, and its tests run everywhere.
#[cfg(any(ats_10, test))]
mod table;
mod values;
mod vconn;

pub(crate) use vconn::ConnMarks;
pub use vconn::VConnData;

use values::{Key, TxnValues, TABLE_BITS};

/// Identifies this loaded copy of the plugin. With ATS's dynamic reload a
/// replaced .so is loaded again beside the old one; both reserve the same
/// user-argument index by name, and a session can meet both copies. A value
/// is only ever read or dropped by the copy that stored it.
static COPY_MARK: u8 = 0;

fn copy_id() -> usize {
    &COPY_MARK as *const u8 as usize
}

/// A stored value: the copy id first (same offset in every copy), then the value.
#[repr(C)]
struct Stamped<T> {
    copy: usize,
    value: T,
}

/// The value in user argument `idx` of `obj` if this copy stored it.
///
/// # Safety
/// `obj` must be a live txn/ssn whose user argument `idx` holds null or a
/// `Box<Stamped<_>>` (of this or another copy of the plugin).
unsafe fn ours<'a, T>(scope: Scope, obj: *mut c_void, idx: c_int) -> Option<&'a Stamped<T>> {
    // SAFETY: per the contract.
    let p = unsafe { arg_get(scope, obj, idx) };
    if p.is_null() {
        return None;
    }
    // SAFETY: every copy stores a repr(C) Stamped whose first field is the copy id.
    let copy = unsafe { *p.cast::<usize>() };
    // SAFETY: the copy id says this copy stored a Stamped<T> there.
    (copy == copy_id()).then(|| unsafe { &*p.cast::<Stamped<T>>() })
}

/// Reads user argument `idx` of a live txn or ssn. 9.2's
/// `TSHttpTxnArgGet`/`TSHttpSsnArgGet` read the same storage as
/// `TSUserArgGet` without its `__dynamic_cast`: about 20 instructions
/// instead of 540 (callgrind, BENCHMARKS.md). 10.x removed them.
///
/// # Safety
/// `obj` is a live object of `scope`'s kind; `idx` was reserved for it.
unsafe fn arg_get(scope: Scope, obj: *mut c_void, idx: c_int) -> *mut c_void {
    #[cfg(ats_9)]
    // SAFETY: per the contract; the casts only restate the handle's type.
    unsafe {
        match scope {
            Scope::Txn => sys::TSHttpTxnArgGet(obj.cast(), idx),
            Scope::Ssn => sys::TSHttpSsnArgGet(obj.cast(), idx),
            Scope::VConn => sys::TSVConnArgGet(obj.cast(), idx),
        }
    }
    #[cfg(ats_10)]
    {
        let _ = scope;
        // SAFETY: per the contract.
        unsafe { sys::TSUserArgGet(obj, idx) }
    }
}

/// Writes user argument `idx`; see [`arg_get`].
///
/// # Safety
/// As for [`arg_get`].
unsafe fn arg_set(scope: Scope, obj: *mut c_void, idx: c_int, value: *mut c_void) {
    #[cfg(ats_9)]
    // SAFETY: per the contract.
    unsafe {
        match scope {
            Scope::Txn => sys::TSHttpTxnArgSet(obj.cast(), idx, value),
            Scope::Ssn => sys::TSHttpSsnArgSet(obj.cast(), idx, value),
            Scope::VConn => sys::TSVConnArgSet(obj.cast(), idx, value),
        }
    }
    #[cfg(ats_10)]
    {
        let _ = scope;
        // SAFETY: per the contract.
        unsafe { sys::TSUserArgSet(obj, idx, value) }
    }
}

/// Where a user argument's values live.
#[derive(Clone, Copy)]
enum Scope {
    Txn,
    Ssn,
    /// A client connection (TLS hooks; see [`VConnData`]).
    VConn,
}

impl Scope {
    fn sys(self) -> sys::TSUserArgType {
        match self {
            Scope::Txn => sys::TSUserArgType::TS_USER_ARGS_TXN,
            Scope::Ssn => sys::TSUserArgType::TS_USER_ARGS_SSN,
            Scope::VConn => sys::TSUserArgType::TS_USER_ARGS_VCONN,
        }
    }
}

fn reserve(scope: Scope, name: &str) -> Result<c_int, String> {
    let cname: CString = to_cstring(name);
    let mut idx: c_int = -1;
    // A reloaded copy of the .so reuses the index its predecessor reserved
    // under the same name instead of leaking one per reload.
    // SAFETY: valid C string and out pointer; description out may be null.
    let found = unsafe {
        sys::TSUserArgIndexNameLookup(scope.sys(), cname.as_ptr(), &mut idx, std::ptr::null_mut())
    };
    if found == sys::TSReturnCode::TS_SUCCESS && idx >= 0 {
        return Ok(idx);
    }
    // SAFETY: valid C strings and out pointer.
    let rc = unsafe {
        sys::TSUserArgIndexReserve(scope.sys(), cname.as_ptr(), cname.as_ptr(), &mut idx)
    };
    if rc == sys::TSReturnCode::TS_SUCCESS && idx >= 0 {
        Ok(idx)
    } else {
        Err(format!(
            "TSUserArgIndexReserve({name}) failed: no free user argument slots"
        ))
    }
}

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

/// Takes this copy's value out of the user argument (another copy's is left alone).
///
/// # Safety
/// As for [`ours`], with `T` the type this copy stores at `idx`.
unsafe fn take_raw<T>(scope: Scope, obj: *mut c_void, idx: c_int) -> Option<Box<Stamped<T>>> {
    // SAFETY: per the contract.
    let p: *const Stamped<T> = unsafe { ours::<T>(scope, obj, idx) }?;
    // SAFETY: clearing first makes the take happen once.
    unsafe { arg_set(scope, obj, idx, std::ptr::null_mut()) };
    // SAFETY: p came from Box::<Stamped<T>>::into_raw in set().
    Some(unsafe { Box::from_raw(p.cast_mut()) })
}

fn stamped<T>(value: T) -> *mut Stamped<T> {
    Box::into_raw(Box::new(Stamped {
        copy: copy_id(),
        value,
    }))
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
