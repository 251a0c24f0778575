//! probe.so's process-wide objects: the hook continuation, the
//! per-transaction slot (its `--slot-table-bits`), the metrics and the log,
//! made by the first probe rule ATS loads.

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock};

use ats::stats::Stat;
use ats::textlog::TextLog;
use ats::{HookCont, TxnData};

use crate::{Hooks, State};

pub(crate) struct Globals {
    pub(crate) cont: HookCont,
    pub(crate) state: TxnData<State>,
    /// The `--slot-table-bits` the `TxnData` was made with (`None`: `TxnData::new`).
    pub(crate) table_bits: Option<u32>,
    pub(crate) requests: Stat,
    pub(crate) states_live: Stat,
    pub(crate) states_stored: Stat,
    pub(crate) cancelled_ran: Stat,
    pub(crate) off_home: Stat,
    pub(crate) foreign: Stat,
    pub(crate) log: TextLog,
}

/// Set by the first rule's `new_instance` (see [`init_globals`]).
pub(crate) static GLOBALS: OnceLock<Globals> = OnceLock::new();
/// Serialises the creation of [`GLOBALS`].
static GLOBALS_INIT: Mutex<()> = Mutex::new(());
pub(crate) static SEQ: AtomicU64 = AtomicU64::new(0);
/// States stored in the slot and not dropped yet (`plugin.probe.txn_states_live`
/// as this process sees it now, not as of the last metric sync).
pub(crate) static LIVE: AtomicU64 = AtomicU64::new(0);

/// The largest `--slot-table-bits` (`TxnData::with_table_bits` caps there).
pub(crate) const MAX_TABLE_BITS: u32 = 20;

pub(crate) fn globals() -> &'static Globals {
    GLOBALS
        .get()
        .expect("hooks and DoRemap run only after an instance exists")
}

/// Creates the globals on the first rule, its `--slot-table-bits` deciding
/// the slot's table; a later rule may only ask for the table in effect.
pub(crate) fn init_globals(table_bits: Option<u32>) -> Result<(), String> {
    let _init = GLOBALS_INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(g) = GLOBALS.get() {
        return match table_bits {
            Some(bits) if g.table_bits != Some(bits) => Err(format!(
                "--slot-table-bits={bits}: the probe's slot was made by the first probe \
                 rule, with {}; the option only takes effect on that rule",
                match g.table_bits {
                    Some(b) => format!("--slot-table-bits={b}"),
                    None => "the default table".to_owned(),
                }
            )),
            _ => Ok(()),
        };
    }
    let state = match table_bits {
        Some(bits) => TxnData::with_table_bits("probe", bits)?,
        None => TxnData::new("probe")?,
    };
    let g = Globals {
        cont: HookCont::new(Hooks)?,
        state,
        table_bits,
        requests: Stat::find_or_create("plugin.probe.requests")?,
        states_live: Stat::find_or_create("plugin.probe.txn_states_live")?,
        states_stored: Stat::find_or_create("plugin.probe.txn_states_stored")?,
        cancelled_ran: Stat::find_or_create("plugin.probe.cancelled_timer_ran")?,
        off_home: Stat::find_or_create("plugin.probe.off_home_mutations")?,
        foreign: Stat::find_or_create("plugin.probe.foreign_resumes")?,
        log: TextLog::create("probe", true)?,
    };
    let _ = GLOBALS.set(g);
    Ok(())
}

/// `--slot-table-bits`'s value: decimal digits only, at most [`MAX_TABLE_BITS`].
pub(crate) fn parse_table_bits(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|b| v.bytes().all(|c| c.is_ascii_digit()) && *b <= MAX_TABLE_BITS)
        .ok_or_else(|| {
            format!(
                "invalid value '{v}' for --slot-table-bits \
                 (allowed: an integer from 0 to {MAX_TABLE_BITS})"
            )
        })
}
