// A connection handle stays on the thread of the callback that got it.
use ats::{ClientHello, Done};

fn on_hello(hello: ClientHello<'_>) -> Done {
    let vc = hello.vconn();
    on_another_thread(move || vc.sni().map(<[u8]>::len));
    hello.resume()
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
