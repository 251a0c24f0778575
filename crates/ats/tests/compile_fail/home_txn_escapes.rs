// The handle `on_home` gives cannot be kept past the call.
use std::cell::RefCell;

use ats::{HomeTxn, Parked};

thread_local! {
    static KEEP: RefCell<Option<HomeTxn<'static>>> = const { RefCell::new(None) };
}

fn keep(parked: Parked) {
    parked.on_home(|h| {
        KEEP.with(|k| *k.borrow_mut() = Some(h));
        panic!("no Done without resolving")
    });
}

fn main() {}
