// A transaction handle taken from `HomeTxn` must not outlive its resolution.
use ats::{Done, HomeTxn};

fn resume(h: HomeTxn<'_>) -> Done {
    let txn = h.txn();
    let done = h.resume();
    txn.set_status(500);
    done
}

fn main() {}
