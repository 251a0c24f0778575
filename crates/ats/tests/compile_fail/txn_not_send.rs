// A transaction handle cannot leave its thread: only `Parked` can travel,
// and it changes the transaction only back on its home thread.
use ats::{Done, Hook};

fn on_txn(hook: Hook<'_>) -> Done {
    let txn = hook.txn();
    std::thread::scope(|s| {
        s.spawn(move || txn.set_status(500));
    });
    hook.resume()
}

fn main() {}
