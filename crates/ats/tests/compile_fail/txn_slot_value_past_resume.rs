// A transaction slot's value must not outlive `Hook::resume`, which may run
// the transaction to TXN_CLOSE (dropping the value) before returning.
use ats::{Done, Hook, TxnSlot};

fn on_txn(slot: &TxnSlot<u32>, hook: Hook<'_>) -> (Option<u32>, Done) {
    let v = slot.get(hook.txn());
    let done = hook.resume();
    (v.copied(), done)
}

fn main() {}
