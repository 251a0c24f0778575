// A `VConnData` value must not outlive `ClientHello::resume`, after which
// the connection may close (dropping the value).
use ats::{ClientHello, Done, VConnData};

fn on_hello(data: &VConnData<u32>, hello: ClientHello<'_>) -> (Option<u32>, Done) {
    let v = data.get(hello.vconn());
    let done = hello.resume();
    (v.copied(), done)
}

fn main() {}
