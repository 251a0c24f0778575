// The handle `on_home` gives cannot be sent to another thread.
use ats::Parked;

fn resume_elsewhere(parked: Parked) {
    parked.on_home(|h| {
        std::thread::scope(|s| s.spawn(move || h.resume()).join().unwrap())
    });
}

fn main() {}
