//! What every option table of the crate shares (the rule's, and the peer,
//! store, fair-share and status modules'): the error, its wording, and
//! applying options a module kept until what they depend on was known. A
//! leaf: the modules' tables use it, and `options.rs` lists the tables.

use std::fmt;

use limits::quote::quote;
use optspec::Opt;

/// A rejected option: names it, then the value, then what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError(pub String);

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

// The option comes first: ATS keeps only ~1 KB of a diagnostic.
pub(crate) fn invalid(name: &str, value: &str, allowed: &str) -> OptionError {
    OptionError(invalid_head(name, value) + allowed)
}

/// What [`invalid`] says before what is allowed (`set` reads it back off).
pub(crate) fn invalid_head(name: &str, value: &str) -> String {
    format!("--{name} has an invalid value {}: allowed ", quote(value))
}

/// In which order a module's options are applied, so the first bad value
/// reported is the one it always was.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// The table's order, whatever the order given.
    Table,
    /// The order given.
    Given,
}

/// Applies a module's options, given as `(name, value)` (the parser keeps
/// them until the options they depend on are known), through its `table`.
pub(crate) fn apply_given<T, C>(
    table: &[Opt<T, C, OptionError>],
    raw: &[(&'static str, String)],
    order: Order,
    target: &mut T,
    cx: &C,
) -> Result<(), OptionError> {
    let mut apply = |opt: &Opt<T, C, OptionError>, value: &str| opt.apply(target, Some(value), cx);
    if order == Order::Table {
        for opt in table {
            if let Some((_, v)) = raw.iter().find(|(n, _)| *n == opt.name) {
                apply(opt, v)?;
            }
        }
        return Ok(());
    }
    for (name, v) in raw {
        let opt = table
            .iter()
            .find(|o| o.name == *name)
            .ok_or_else(|| OptionError(format!("unknown option --{name}")))?;
        apply(opt, v)?;
    }
    Ok(())
}

/// A whole number from `min` to `max`, strictly written; `unit` follows
/// what is allowed (`" (milliseconds)"`, or "").
pub(crate) fn uint(
    name: &str,
    value: &str,
    min: u64,
    max: u64,
    unit: &str,
) -> Result<u64, OptionError> {
    optspec::value::uint(value, min, max).map_err(|_| {
        invalid(
            name,
            value,
            &format!("an integer from {min} to {max}{unit}"),
        )
    })
}
