//! Where a [`TxnData`](super::TxnData)'s values live on each Traffic
//! Server version: the user argument (9.x), or the id table with its spill
//! to the user argument (10.x).

use std::ffi::{c_int, c_void};

use super::raw::{arg_get, arg_set, ours, take_raw, Scope, Stamped};
use crate::txn::Txn;

/// Where a [`TxnData`](super::TxnData)'s values live: each transaction's user argument
/// (9.x, whose `TSHttpTxnArgGet` costs ~20 instructions), or on 10.x, whose
/// only argument API costs ~540 per call, a lock-free table keyed by the
/// transaction id, spilling to the user argument only for a transaction
/// whose bucket is full (see `user_arg/table.rs`).
pub(super) struct TxnValues {
    idx: c_int,
    #[cfg(ats_10)]
    table: super::table::IdTable,
    /// Values of open transactions that went to the user argument: while
    /// there are none, a value not in the table is not anywhere.
    #[cfg(ats_10)]
    spilled: std::sync::atomic::AtomicUsize,
}

/// 2^13 buckets of 4 entries, 64 bytes each: 512 KiB a `TxnData`, room for far
/// more transactions than one traffic_server has open at once.
pub(super) const TABLE_BITS: u32 = 13;

/// What locates a transaction's value: its id on 10.x (one
/// `TSHttpTxnIdGet`, taken once per callback), nothing more on 9.x.
#[derive(Clone, Copy)]
pub(super) struct Key<'t> {
    txn: Txn<'t>,
    #[cfg(ats_10)]
    id: u64,
}

impl<'t> Key<'t> {
    pub(super) fn of(txn: Txn<'t>) -> Self {
        Key {
            txn,
            #[cfg(ats_10)]
            id: txn.id(),
        }
    }

    fn obj(self) -> *mut c_void {
        self.txn.as_ptr().cast()
    }
}

#[cfg(ats_10)]
fn spilled_now(n: &std::sync::atomic::AtomicUsize) -> bool {
    n.load(std::sync::atomic::Ordering::Relaxed) > 0
}

impl TxnValues {
    pub(super) fn new(idx: c_int, table_bits: u32) -> Self {
        let _ = table_bits;
        TxnValues {
            idx,
            #[cfg(ats_10)]
            table: super::table::IdTable::new(table_bits),
            #[cfg(ats_10)]
            spilled: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// This copy's value for the transaction.
    ///
    /// # Safety
    /// The user argument stores only `Stamped<T>`.
    pub(super) unsafe fn get<'t, T>(&self, key: Key<'t>) -> Option<&'t Stamped<T>> {
        #[cfg(ats_10)]
        {
            if let Some(p) = self.table.get(key.id) {
                // SAFETY: stored by put() from a live Box<Stamped<T>>, owned by
                // the user argument until take(), which runs at TXN_CLOSE after every
                // callback that can hold the transaction.
                return Some(unsafe { &*p.cast::<Stamped<T>>() });
            }
            if !spilled_now(&self.spilled) {
                return None;
            }
        }
        // SAFETY: live txn; per the contract.
        unsafe { ours::<T>(Scope::Txn, key.obj(), self.idx) }
    }

    /// Stores `p` for the transaction unless a value is stored already (on
    /// 9.x, by any copy of the plugin), in which case `p` is handed back.
    pub(super) fn put<T>(&self, key: Key<'_>, p: *mut Stamped<T>) -> Result<(), *mut Stamped<T>> {
        #[cfg(ats_10)]
        {
            // A value that spilled earlier (its bucket was full then) is in
            // the argument; look there only while spills exist.
            if spilled_now(&self.spilled)
                // SAFETY: live txn, reserved index.
                && !unsafe { arg_get(Scope::Txn, key.obj(), self.idx) }.is_null()
            {
                return Err(p);
            }
            match self.table.insert(key.id, p.cast()) {
                Ok(()) => return Ok(()),
                Err(super::table::Refused::Taken) => return Err(p),
                Err(super::table::Refused::Full) => {}
            }
        }
        // The argument's index is shared by every loaded copy of the plugin
        // (reserved by name): never overwrite another copy's value.
        // SAFETY: live txn, reserved index.
        if !unsafe { arg_get(Scope::Txn, key.obj(), self.idx) }.is_null() {
            return Err(p);
        }
        #[cfg(ats_10)]
        self.spilled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: live txn, reserved index; ownership moves into the user argument
        // until take() reclaims it.
        unsafe { arg_set(Scope::Txn, key.obj(), self.idx, p.cast()) };
        Ok(())
    }

    /// Takes this copy's value for the transaction out.
    ///
    /// # Safety
    /// The user argument stores only `Stamped<T>`.
    pub(super) unsafe fn take<T>(&self, key: Key<'_>) -> Option<Box<Stamped<T>>> {
        #[cfg(ats_10)]
        {
            if let Some(p) = self.table.remove(key.id) {
                // SAFETY: p came from Box::<Stamped<T>>::into_raw via put().
                return Some(unsafe { Box::from_raw(p.cast::<Stamped<T>>()) });
            }
            if !spilled_now(&self.spilled) {
                return None;
            }
        }
        // SAFETY: live txn; per the contract.
        let taken = unsafe { take_raw::<T>(Scope::Txn, key.obj(), self.idx) };
        #[cfg(ats_10)]
        if taken.is_some() {
            self.spilled
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        taken
    }
}
