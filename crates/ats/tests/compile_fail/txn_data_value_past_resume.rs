// A `TxnData` value must not outlive `Hook::resume`, which may run
// the transaction to TXN_CLOSE (dropping the value) before returning.
use ats::{Done, Hook, TxnData};

fn on_txn(data: &TxnData<u32>, hook: Hook<'_>) -> (Option<u32>, Done) {
    let v = data.get(hook.txn());
    let done = hook.resume();
    (v.copied(), done)
}

fn main() {}
