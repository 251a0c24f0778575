// The handle a parked handshake's `on_home` gives cannot be kept past the call.
use std::cell::RefCell;

use ats::{HomeHello, ParkedHello};

thread_local! {
    static KEEP: RefCell<Option<HomeHello<'static>>> = const { RefCell::new(None) };
}

fn keep(parked: ParkedHello) {
    parked.on_home(|h| {
        KEEP.with(|k| *k.borrow_mut() = Some(h));
        panic!("no Done without resolving")
    });
}

fn main() {}
