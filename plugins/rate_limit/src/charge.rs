//! `--count-status` at SEND_RESPONSE_HDR: a response whose status (as sent
//! to the client) is listed charges the rate bucket of each admitting entry
//! that lists it, where the bucket lives: this proxy's limiter (keyed,
//! grouped; peered, the charge is a hit in the next report; `--store-sync`,
//! exchanged the same way), or Redis (`--store`, fire and forget).
//!
//! Only a client's requests are charged: not those ATS or a plugin made
//! itself (`Txn::is_internal`: a background fetch, a stale-while-revalidate
//! refresh, a plugin's `TSHttpConnect`), which are not attempts by anyone.
//!
//! Only responses the origin sent are charged, now or earlier from the
//! cache (`Txn::response_from_origin`): Traffic Server's own responses (an
//! unreachable origin's 502, a timeout's 504, refusals by this or another
//! plugin) are not, nor is a request whose client left before the response
//! (ATS sends no response header then). Requests refused by this rule are
//! never charged (their fate is `Refused`); requests admitted at once or
//! after waiting for a slot (`Resumed`) are.

use ats::Txn;

use crate::central::rule_store::TxnCentral;
use crate::metrics::bump;
use crate::state::{Fate, TxnState};

/// Charges what the response's status calls for.
pub(crate) fn response(txn: Txn<'_>, head: &TxnState) {
    if !head.chain().any(|s| s.rule.opts.count_status.is_some()) || txn.is_internal() {
        return;
    }
    let Some(status) = txn.client_response().map(|r| r.status()) else {
        return;
    };
    // Read once, and only when a listed status asks.
    let mut from_origin = None;
    for s in head.chain() {
        let Some(list) = &s.rule.opts.count_status else {
            continue;
        };
        // Admitted at once or after waiting for a slot; never refused ones.
        let admitted = matches!(s.fate(), Fate::Admitted | Fate::Resumed);
        if !admitted || !list.contains(status) {
            continue;
        }
        if !*from_origin.get_or_insert_with(|| txn.response_from_origin()) {
            return;
        }
        let rule = &s.rule;
        // Taken: one response per transaction (its lease stays).
        let in_store = match s.central.lock().as_deref_mut() {
            Some(TxnCentral::Charged { base, .. }) => Some(std::mem::take(base)),
            _ => None,
        };
        let charged = match (in_store, &rule.store) {
            (Some(base), Some(rs)) if !base.is_empty() => {
                if !rs.charge(base, rule.opts.rate.unwrap_or(1.0), rule.opts.burst) {
                    // Not queued (the store is saturated or stopping): this
                    // proxy's limiter, which `--store-failure=local` asks
                    // when Redis cannot answer, keeps the debt at least.
                    rule.shaped.charge(s.who);
                }
                true
            }
            // Already charged (a response header is sent once).
            (Some(_), _) => false,
            // Decided by this proxy's limiter.
            (None, _) => rule.shaped.charge(s.who),
        };
        if charged {
            bump(rule.metrics.status_charged, 1);
        }
    }
}
