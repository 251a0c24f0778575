//! Admission decisions of one limiter: a rate bucket, concurrency slots with
//! a FIFO queue, a bounded number of queue places and a maximum wait, for
//! the whole rule or, keyed (`--key`), for each client key.
//!
//! Pure: inputs in, decisions out, time from an injected
//! [`Clock`](limits::Clock). The plugin maps the decisions to hooks and
//! timers; nothing here knows about transactions. Resources given out are guards that give themselves back:
//! a [`Permit`](limits::Permit) frees its slot, a
//! [`BudgetToken`](limits::BudgetToken) its queue place, and a [`RateToken`]
//! returns its rate token unless the request was served.
//!
//! A limiter's shape is its `Scope`: the rule scope (`rule_scope.rs`: one
//! bucket, slots and queue for every request, the slots optionally split
//! between fair flows) or the keyed scope (`key_scope.rs`: a table of
//! per-key buckets and slots, optionally peered, `peered.rs`). Each holds
//! only its own state. Callers see a limiter as its shape (`shaped.rs`):
//! [`RuleLimiter`], [`FairLimiter`] or [`KeyedLimiter`], each with only the
//! calls that fit it, and a request's [`Counted`] (the rule, a [`Flow`] or
//! a [`Key`]) made by that handle.
//!
//! The files, each using only those listed before it (so no import loop):
//! `bounds.rs` the [`Limits`]; `key_scope.rs`, `block.rs` (what `--block`
//! keeps) and `rule_scope.rs` each scope's state; `limiter.rs` the [`Limiter`] holding one, its
//! construction, limits and live changes; `decision.rs` what a decision
//! hands back; then the limiter's calls, each an `impl Limiter` block:
//! `admit.rs` (a new request, in each scope: `admit/`), `queue.rs` (the
//! slot queue), `fair.rs`, `peered.rs`, `charge.rs`, `dry_run.rs`,
//! `control.rs` (per-key commands), `auto.rs` (`--limit=auto`), `usage.rs` (reports), `build.rs` (one from a rule's options); last
//! `shaped.rs`, the handles. This file only re-exports.

mod admit;
mod auto;
mod block;
mod bounds;
mod build;
mod charge;
mod control;
mod decision;
mod dry_run;
mod fair;
mod key_scope;
mod limiter;
mod peered;
mod queue;
mod rule_scope;
mod shaped;
#[cfg(test)]
mod tests;
mod usage;

pub use auto::{AutoState, Outcome};
pub use bounds::Limits;
pub use decision::{Admission, RateToken, Refused, SlotWait, Wait};
pub use key_scope::Keyed;
pub use limiter::Limiter;
pub use peered::MAX_PEER_DEBT;
pub use shaped::{Counted, FairLimiter, Flow, Key, KeyedLimiter, RuleLimiter, Shaped};
pub use usage::{KeyUsage, Usage};
