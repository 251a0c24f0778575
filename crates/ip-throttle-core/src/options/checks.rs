//! Checks that need several options.

use limits::quote::quote;

use super::{fmt_seconds, Options};

impl Options {
    /// Checks that need several options.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.store.is_some() && !crate::shared::valid_instance(&self.instance) {
            return Err(format!(
                "--instance has an invalid value {} for a --store: allowed 1 to {} printable \
                 characters without spaces (it is part of the store's keys)",
                quote(&self.instance),
                crate::shared::MAX_INSTANCE
            ));
        }
        if self.forwarded_header.is_some() && self.trusted_proxies.is_empty() {
            return Err(
                "--forwarded-header needs --trusted-proxies: the header is read only from them"
                    .to_owned(),
            );
        }
        let p = &self.params;
        if p.max_delay < p.initial_delay {
            return Err(format!(
                "--max-delay has an invalid value '{}': allowed at least --initial-delay ({} s)",
                fmt_seconds(p.max_delay),
                fmt_seconds(p.initial_delay)
            ));
        }
        Ok(())
    }
}
