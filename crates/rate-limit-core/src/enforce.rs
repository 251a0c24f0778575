//! Gradual enforcement (`--enforce=PERCENT`): which clients a rule refuses
//! for real, the others being a dry run.
//!
//! A keyed rule chooses by the key's hash, so a client is treated the same
//! on every request, and raising the share only adds clients: a key is
//! enforced when its position in [0, 100), drawn from the hash, is below
//! the share. A rule without a key chooses per request, by the same test on
//! a fresh draw.

use std::cell::Cell;

/// The default: every client is refused for real.
pub const ALL: u8 = 100;

/// Where `hash` falls in [0, 100): a multiply-shift of a mixed hash, so the
/// table's hashes (already uniform) and weaker ones spread alike.
fn position(hash: u64) -> u64 {
    // splitmix64's finaliser: every input bit moves the high bits.
    let mut z = hash.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 32) * 100) >> 32
}

/// Whether a client with key `hash` is refused for real at `percent`.
pub fn chosen(hash: u64, percent: u8) -> bool {
    percent >= ALL || position(hash) < u64::from(percent)
}

thread_local! {
    /// Per-thread draws for rules without a key (not a secret: a client
    /// cannot pick its draw, only retry, which the rule counts anyway).
    static DRAW: Cell<u64> = const { Cell::new(0) };
}

/// Whether this request (of a rule without a key) is refused for real at
/// `percent`: about `percent` % of requests are.
pub fn chosen_now(percent: u8) -> bool {
    if percent >= ALL {
        return true;
    }
    if percent == 0 {
        return false;
    }
    // A Weyl sequence per thread, mixed by `position`: consecutive draws
    // spread evenly, and no state is shared between threads.
    let n = DRAW
        .try_with(|d| {
            let n = d.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
            d.set(n);
            n
        })
        .unwrap_or(0);
    position(n) < u64::from(percent)
}

#[cfg(test)]
mod tests;
