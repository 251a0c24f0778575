// The handle a parked handshake's `on_home` gives cannot be sent to another thread.
use ats::ParkedHello;

fn resume_elsewhere(parked: ParkedHello) {
    parked.on_home(|h| {
        on_another_thread(move || h.resume())
    });
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
