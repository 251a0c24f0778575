// A header borrowed through a hook's transaction must not outlive the hook.
use ats::{Done, Hook};

fn on_txn(hook: Hook<'_>) -> Done {
    let req = hook.txn().client_request();
    let done = hook.resume();
    drop(req);
    done
}

fn main() {}
