// A transaction handle cannot leave its thread: only `Parked` can travel,
// and it changes the transaction only back on its home thread.
use ats::{Done, Hook};

fn on_txn(hook: Hook<'_>) -> Done {
    let txn = hook.txn();
    on_another_thread(move || txn.set_status(500));
    hook.resume()
}

/// Stands for any API that runs code on another thread (`std::thread::spawn`,
/// a pool, a channel): all require `Send`. Local, so that the error names no
/// file of std's.
fn on_another_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

fn main() {}
