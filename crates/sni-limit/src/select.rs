//! One loaded file: its selectors, and which one a connection's SNI picks.
//!
//! Names are matched exactly, without regard to ASCII case and one
//! trailing dot (DNS names are case-insensitive); `""` takes connections
//! without an SNI, `"*"` (or `"default"`) every other connection, those
//! without an SNI too when no `""` selector exists.

use std::collections::HashMap;
use std::sync::Arc;

use limits::{Clock, MonotonicClock, Waiter};

use crate::config::{Config, Sni, MAX_NAME};
use crate::gate::{IpRep, Selector};

/// The selectors of one loaded file.
pub struct Selectors<W: Waiter, C: Clock = MonotonicClock> {
    list: Vec<Arc<Selector<W, C>>>,
    /// Lowercase names and aliases.
    by_name: HashMap<Box<[u8]>, usize>,
    missing: Option<usize>,
    any: Option<usize>,
    /// Each `ip-rep:` entry's sieve, by its index in the file (`None`: off).
    reps: Vec<Option<Arc<IpRep>>>,
}

impl<W: Waiter, C: Clock + Clone> Selectors<W, C> {
    /// Builds the selectors of `config`. A selector of `old` (the file
    /// this one replaces) with the same SNI hands over its live state:
    /// held slots, parked handshakes and buckets carry over, changed
    /// limits apply at once (see `Selector::build`).
    pub fn build(config: &Config, old: Option<&Selectors<W, C>>, clock: C) -> Self {
        // One sieve per ip-rep, shared by the selectors naming it (a client
        // spreading its connections over several names is ranked as one).
        let reps: Vec<Option<Arc<IpRep>>> = config
            .ip_reps
            .iter()
            .map(|r| {
                let before = old.and_then(|o| o.reps.iter().flatten().find(|p| p.name() == r.name));
                IpRep::build(r, before.map(|p| &**p))
            })
            .collect();
        let mut list = Vec::with_capacity(config.selectors.len());
        let mut by_name = HashMap::new();
        let (mut missing, mut any) = (None, None);
        for (i, conf) in config.selectors.iter().enumerate() {
            let before = old.and_then(|o| o.by_sni(&conf.sni));
            let rep = conf.ip_rep.and_then(|i| reps.get(i).cloned().flatten());
            list.push(Selector::build(config, conf, rep, before, clock.clone()));
            match &conf.sni {
                Sni::Name(n) => {
                    by_name.insert(n.as_bytes().into(), i);
                }
                Sni::Any => any = Some(i),
                Sni::Missing => missing = Some(i),
            }
            for a in &conf.aliases {
                by_name.insert(a.as_bytes().into(), i);
            }
        }
        Selectors {
            list,
            by_name,
            missing,
            any,
            reps,
        }
    }
}

impl<W: Waiter, C: Clock> Selectors<W, C> {
    /// The selector of a connection whose client hello carried `sni`
    /// (`None` or empty: no SNI). `None`: no selector takes it.
    pub fn select(&self, sni: Option<&[u8]>) -> Option<&Arc<Selector<W, C>>> {
        self.index(sni).and_then(|i| self.list.get(i))
    }

    /// [`select`](Self::select)'s choice as its index in [`all`](Self::all).
    pub fn index(&self, sni: Option<&[u8]>) -> Option<usize> {
        match sni.filter(|s| !s.is_empty()) {
            None => self.missing.or(self.any),
            Some(name) => self.by_name(name).or(self.any),
        }
    }

    /// Every selector, in file order.
    pub fn all(&self) -> &[Arc<Selector<W, C>>] {
        &self.list
    }

    fn by_sni(&self, sni: &Sni) -> Option<&Arc<Selector<W, C>>> {
        let i = match sni {
            Sni::Name(n) => self.by_name.get(n.as_bytes()).copied(),
            Sni::Any => self.any,
            Sni::Missing => self.missing,
        };
        i.and_then(|i| self.list.get(i))
            .filter(|s| s.conf().sni == *sni)
    }

    /// An exact match of a client's SNI: lowercased on the stack (the
    /// bytes are the client's, of any length and content).
    fn by_name(&self, name: &[u8]) -> Option<usize> {
        let name = name.strip_suffix(b".").unwrap_or(name);
        if name.len() > MAX_NAME || self.by_name.is_empty() {
            return None;
        }
        let mut buf = [0u8; MAX_NAME];
        let low = buf.get_mut(..name.len())?;
        low.copy_from_slice(name);
        low.make_ascii_lowercase();
        self.by_name.get(&*low).copied()
    }
}
