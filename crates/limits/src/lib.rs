//! Admission primitives for Traffic Server plugins, in pure Rust.
//!
//! Nothing here touches the TS API: time is injected ([`clock`]), and work
//! that must happen when a slot frees is a callback ([`slots::Waiter`]).
//! Plugins wire these to hooks; tests drive them with a manual clock.
//!
//! - [`gcra::Gcra`]: a rate bucket in one `AtomicU64`.
//! - [`slots::Slots`]: a concurrency limit with FIFO hand-off to waiters,
//!   or ([`fair`]) fair shares between flows with round-robin hand-off.
//! - [`budget::Budget`]: a bounded counter whose tokens give back on drop.
//! - [`ctl`]: the words of a `traffic_ctl plugin msg` command.
//! - [`quote`]: configuration values shown in error messages, short and
//!   printable (the `quoting` leaf crate, re-exported for the option parsers).

#![forbid(unsafe_code)]

pub mod budget;
pub mod clock;
pub mod ctl;
mod entry;
pub mod fair;
pub mod gcra;
pub mod slots;

pub use quoting as quote;

pub use budget::{Budget, BudgetToken};
pub use clock::{Clock, ManualClock, MonotonicClock, Nanos, NANOS_PER_MS, NANOS_PER_SEC};
pub use fair::{FairConfig, FairStats, FlowRefused, FlowState, FlowTry, FlowWeight};
pub use gcra::{Gcra, GcraParams, LiveParams, Quota, Reservation, MAX_DEBT};
pub use slots::{Permit, Slots, Ticket, Waiter, WeakTicket};
