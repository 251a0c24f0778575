// A key is made only by its keyed limiter, never from a bare number.
use rate_limit_core::Key;

fn main() {
    let _ = Key(42);
}
