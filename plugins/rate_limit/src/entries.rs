//! Several rate_limit entries on one remap rule: each entry's state goes on
//! the transaction after the earlier entries' (one chain, in remap order),
//! and an entry reads what the earlier ones left before it takes or waits
//! for anything (the no-hold-and-wait rule of `do_remap`).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use ats::{HookId, Txn};
use parking_lot::Mutex;

use rate_limit_core::Counted;

use crate::rule::{Globals, Rule};
use crate::state::{Fate, Held, Pending, PerTxn, TxnState};

impl Rule {
    /// Several entries on one rule: what earlier entries left on this
    /// transaction, for the no-hold-and-wait rule (see `do_remap`).
    pub(crate) fn earlier(&self, g: &Globals, txn: Txn<'_>) -> Earlier {
        let head = match g.txn.get(txn) {
            None => return Earlier::default(),
            Some(PerTxn::Held { .. }) => {
                return Earlier {
                    holds: true,
                    ..Earlier::default()
                }
            }
            Some(PerTxn::Entries(head)) => head,
        };
        let slot_wait = |s: &TxnState| s.rule.opts.limit.is_some() && s.wait.lock().is_some();
        // A --conntrack entry keeps its slot in the session, not the transaction.
        let session_holds = || {
            txn.ssn()
                .and_then(|ss| g.ssn.get(ss))
                .is_some_and(|s| s.holds_any())
        };
        Earlier {
            refused: head.refused(),
            waits: head.chain().any(slot_wait),
            holds: head.chain().any(|s| s.held.lock().is_some()) || session_holds(),
        }
    }

    /// Stores the transaction's state (after any earlier rate_limit entry's
    /// on the same rule) and hooks what its fate needs.
    pub(crate) fn attach<'t>(
        self: &Arc<Self>,
        g: &Globals,
        txn: Txn<'t>,
        fate: Fate,
        held: Option<Held>,
        wait: Option<Pending>,
        who: Counted,
    ) -> Option<&'t TxnState> {
        let state = TxnState {
            rule: self.clone(),
            who,
            fate: AtomicU8::new(fate as u8),
            held: Mutex::new(held),
            wait: Mutex::new(wait.map(Box::new)),
            next: OnceLock::new(),
            decorating: AtomicBool::new(false),
            central: Mutex::new(None),
        };
        // Only a later entry can find an earlier one's state: the first
        // skips the lookup.
        let earlier = if self.chained { g.txn.get(txn) } else { None };
        let (head, mine) = match earlier {
            // A first entry that keeps only `Held` is never followed, so a
            // later entry finds the entries' states or nothing.
            Some(head) => {
                let head = head.entries()?;
                (head, head.push(state)?)
            }
            None => {
                // Fails only if this copy's state is there already, which a
                // first entry cannot see: then it is not tracked (no slot).
                let head = g.txn.set(txn, PerTxn::Entries(state)).ok()?.entries()?;
                (head, head)
            }
        };
        // `--count-status`: the response's status may charge the rate.
        // A dry run's let-through (`DryRun`) has nothing of its own to add.
        let decorate = !matches!(fate, Fate::Admitted | Fate::DryRun)
            || self.opts.ratelimit_headers
            || self.opts.count_status.is_some();
        if decorate && !head.decorating.swap(true, Ordering::Relaxed) {
            txn.hook(HookId::SendResponseHdr, &g.hooks);
        }
        Some(mine)
    }
}

/// What earlier rate_limit entries on the same rule left on a transaction.
#[derive(Default)]
pub(crate) struct Earlier {
    pub(crate) refused: bool,
    /// One waits for a slot (or for its rate, then a slot).
    pub(crate) waits: bool,
    /// A slot is held: by the transaction, or (`--conntrack`) its session.
    pub(crate) holds: bool,
}
