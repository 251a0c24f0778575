//! Deterministic simulations of the controller against a model origin
//! (crates/adaptive-sim): convergence from any start, capacity changes, a sudden
//! overload (`converge.rs`); failing origins, low traffic, latency changes
//! (`faults.rs`). Each prints what it measured (`--nocapture`).

mod converge;
mod faults;
