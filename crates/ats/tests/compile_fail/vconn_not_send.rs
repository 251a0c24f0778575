// A connection handle stays on the thread of the callback that got it.
use ats::{ClientHello, Done};

fn on_hello(hello: ClientHello<'_>) -> Done {
    let vc = hello.vconn();
    std::thread::scope(|s| {
        s.spawn(move || vc.sni().map(<[u8]>::len));
    });
    hello.resume()
}

fn main() {}
