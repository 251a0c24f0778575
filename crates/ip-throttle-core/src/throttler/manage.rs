//! A rule's reloadable configuration ([`Snapshot`]) and what works on a
//! throttler outside a request: ban expiry, the `unban` and `show`
//! commands, and reloads.

use std::path::PathBuf;
use std::sync::Arc;

use limits::{Clock, Nanos};

use super::decision::{event, Event};
use super::Throttler;
use crate::lists::{CidrList, Lists};
use crate::options::{EventKind, Options};
use crate::state::View;
use crate::Client;
use optspec::files::Files;

/// The reloadable configuration of a rule.
#[derive(Debug)]
pub struct Snapshot {
    pub opts: Options,
    pub lists: Lists,
}

impl Snapshot {
    /// Reads the list files `opts` names.
    pub fn load(opts: Options, files: &dyn Files) -> Result<Snapshot, String> {
        let read = |f: &Option<PathBuf>, opt: &str| -> Result<Arc<CidrList>, String> {
            match f {
                Some(p) => crate::lists::load(p, files)
                    .map(Arc::new)
                    .map_err(|e| format!("--{opt}: {e}")),
                None => Ok(Arc::new(CidrList::new())),
            }
        };
        let lists = Lists {
            allow: read(&opts.allow_file, "allow-file")?,
            deny: read(&opts.deny_file, "deny-file")?,
        };
        Ok(Snapshot { opts, lists })
    }
}

/// Which list a reload reads again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListName {
    Allow,
    Deny,
}

impl<C: Clock> Throttler<C> {
    /// Ends a ban that has expired (the `unban` timer). The event if it did.
    pub fn expire(&self, key: u64) -> Option<Event> {
        self.expire_by(key, 0)
    }

    /// As [`Throttler::expire`], for a timer armed for a ban's end `due`
    /// that fires a hair early (ATS's timers run off a cached clock that can
    /// lag the real one): a ban that still ends at or before `due` ends now.
    /// Any other state (the ban was lifted, or replaced) advances on the real
    /// clock only.
    pub fn expire_by(&self, key: u64, due: Nanos) -> Option<Event> {
        let now = self.clock.now();
        let p = self.current.load().opts.params;
        self.table
            .get(key, |s| {
                let banned_until = s.banned_until();
                let t = match banned_until {
                    Some(end) if end <= due => now.max(end),
                    _ => now,
                };
                s.advance(t, &p).then(|| event(EventKind::Unban, s))
            })
            .flatten()
    }

    /// Lifts a ban on a client at once (the `unban` command). The event if it did.
    pub fn unban(&self, client: impl Into<Client>) -> Option<Event> {
        self.table
            .get(self.key(client), |s| {
                s.unban().then(|| event(EventKind::Unban, s))
            })
            .flatten()
    }

    /// The state of a client now (the `show` command); `None`: not
    /// tracked, which means allowed.
    pub fn show(&self, client: impl Into<Client>) -> Option<View> {
        let now = self.clock.now();
        let p = self.current.load().opts.params;
        self.table.get(self.key(client), |s| s.view(now, &p))
    }

    /// Builds a new snapshot from `opts` (reading its list files) and
    /// swaps it in. `opts` must keep `--keys` and `--key-prefix`: they
    /// shape the state table, which a reload keeps (per-IP state survives).
    pub fn reload(&self, opts: Options, files: &dyn Files) -> Result<(), String> {
        if opts.keys != self.keys
            || (opts.v4_prefix, opts.v6_prefix) != (self.v4_prefix, self.v6_prefix)
        {
            return Err(format!(
                "--keys and --key-prefix cannot change on a reload (in force: --keys={} \
                 --key-prefix={}/{}); reload remap.config instead",
                self.keys, self.v4_prefix, self.v6_prefix
            ));
        }
        let _one = self.reloading.lock();
        let next = Snapshot::load(opts, files)?;
        self.current.store(Arc::new(next));
        Ok(())
    }

    /// Reads one list file again and swaps it in; the other list and the
    /// options stay. The number of prefixes loaded.
    pub fn reload_list(&self, which: ListName, files: &dyn Files) -> Result<usize, String> {
        let _one = self.reloading.lock();
        let cur = self.current.load_full();
        let (file, opt) = match which {
            ListName::Allow => (&cur.opts.allow_file, "allow-file"),
            ListName::Deny => (&cur.opts.deny_file, "deny-file"),
        };
        let Some(file) = file else {
            return Err(format!("no --{opt} is configured"));
        };
        let list = Arc::new(crate::lists::load(file, files).map_err(|e| format!("--{opt}: {e}"))?);
        let n = list.len();
        let mut lists = cur.lists.clone();
        match which {
            ListName::Allow => lists.allow = list,
            ListName::Deny => lists.deny = list,
        }
        self.current.store(Arc::new(Snapshot {
            opts: cur.opts.clone(),
            lists,
        }));
        Ok(n)
    }
}
