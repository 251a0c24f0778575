// The handle a parked handshake's `on_home` gives cannot be sent to another thread.
use ats::ParkedHello;

fn resume_elsewhere(parked: ParkedHello) {
    parked.on_home(|h| {
        std::thread::scope(|s| s.spawn(move || h.resume()).join().unwrap())
    });
}

fn main() {}
