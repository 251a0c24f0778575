//! Who the client is, for one request: `--exempt` (through the trusted
//! proxies), the `--key` (hashed; its bytes built in a per-thread buffer,
//! which peered limiters and `top` read), and the address the refusal log
//! names. On the transaction's thread.

use std::cell::RefCell;
use std::net::IpAddr;

use ats::{Header, RemapRequest, Txn};
use rate_limit_core::key::{Client, Missing, RequestView};
use rate_limit_core::{Counted, Shaped};

use crate::rule::Rule;

impl Rule {
    /// `--exempt`: `Err` if the client is in an exempt network (an unknown
    /// one never is); else the client as found (`Some`, with `--exempt`),
    /// for the key.
    pub(crate) fn exempt(
        &self,
        txn: Txn<'_>,
        req: &RemapRequest<'_>,
    ) -> Result<Option<Option<Client>>, ()> {
        let Some(e) = &self.opts.exempt else {
            return Ok(None);
        };
        let view = KeyView {
            txn,
            hdr: req.request_header(),
            client: None,
        };
        let client = e.proxies.client_ip(&view);
        if client.is_some_and(|c| e.exempts(c)) {
            return Err(());
        }
        Ok(Some(client))
    }

    /// Whose limits the request counts against, as the rule's shape says:
    /// the rule's, its flow's (`--fair`), or its client key's with `--key`
    /// (hashed: the table keeps nothing else), or what the `--key-missing`
    /// policy says for a request without one.
    pub(crate) fn client_key(
        &self,
        txn: Txn<'_>,
        req: &RemapRequest<'_>,
        client: Option<Option<Client>>,
    ) -> ClientKey {
        let l = match &self.shaped {
            Shaped::Rule(_) => return ClientKey::Counted(Counted::Rule),
            Shaped::Fair(l) => return ClientKey::Counted(Counted::Flow(self.flow(l, txn, req))),
            Shaped::Keyed(l) => l,
        };
        // A keyed limiter is built for a rule with `--key` (load.rs).
        let Some(spec) = &self.opts.key else {
            return ClientKey::Counted(Counted::Rule);
        };
        let view = KeyView {
            txn,
            hdr: req.request_header(),
            client,
        };
        let found = KEY_BYTES.with(|buf| {
            let mut buf = buf.borrow_mut();
            if !spec.key(&view, &mut buf) {
                // Empty: the shared key's peer tag (never exchanged).
                buf.clear();
                return None;
            }
            if l.is_peered() {
                // Peers (and --store-sync) name keys by their tag: the table hashes that.
                rate_limit_core::peering::to_peer_tag(spec, &mut buf);
            }
            Some(l.key(&buf))
        });
        match (found, self.opts.key_missing) {
            (Some(k), _) => ClientKey::Counted(Counted::Key(k)),
            // Real keys are never empty (each part has a tag byte).
            (None, Missing::Shared) => ClientKey::Counted(Counted::Key(l.key(&[]))),
            (None, Missing::Pass) => ClientKey::Pass,
            (None, Missing::Refuse) => ClientKey::Refuse,
        }
    }

    /// Lets `top` show the client's key (just built in `KEY_BYTES`: a
    /// peered rule's peer tag, else the key's bytes).
    pub(crate) fn note_name(&self, who: Counted) {
        if let Some(k) = who.key() {
            let peered = matches!(&self.shaped, Shaped::Keyed(l) if l.is_peered());
            KEY_BYTES.with(|b| {
                if let Ok(b) = b.try_borrow() {
                    match peered {
                        true => self.card.note_tag_name(k.hash(), &b),
                        false => self.card.note_name(k.hash(), &b),
                    }
                }
            });
        }
    }

    /// The client as `--exempt` (or else `--key=ip`) finds it: through the
    /// trusted proxies, if any.
    pub(crate) fn client_ip(&self, txn: Txn<'_>) -> Option<Client> {
        let view = KeyView {
            txn,
            hdr: txn.client_request(),
            client: None,
        };
        match (&self.opts.exempt, &self.opts.key) {
            (Some(e), _) => e.proxies.client_ip(&view),
            (None, Some(k)) => k.proxies.client_ip(&view),
            (None, None) => txn.connection_client_ip().map(Client::Addr),
        }
    }
}

/// Whose limits a request is counted against.
pub(crate) enum ClientKey {
    /// The rule's, its flow's or its key's.
    Counted(Counted),
    /// None: no key, and `--key-missing=pass`.
    Pass,
    /// No key, and `--key-missing=refuse`.
    Refuse,
}

thread_local! {
    /// Reused for every key built on this thread.
    pub(crate) static KEY_BYTES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A request as `--key` reads it.
pub(crate) struct KeyView<'t> {
    pub(crate) txn: Txn<'t>,
    pub(crate) hdr: Option<Header<'t>>,
    /// The client `--exempt` already found (the same trusted proxies as
    /// `--key`'s), so an `ip` key does not walk the header again.
    pub(crate) client: Option<Option<Client>>,
}

impl RequestView for KeyView<'_> {
    /// The connection's client: on a PROXY-protocol port the header's
    /// source, on 10.x as on 9.2 (as ip_throttle reads it).
    fn remote_ip(&self) -> Option<IpAddr> {
        self.txn.connection_client_ip()
    }

    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.hdr.as_ref()?.joined(name)
    }

    fn query(&self) -> Option<Vec<u8>> {
        self.hdr.as_ref()?.url_query()
    }

    fn resolved_client(&self) -> Option<Option<Client>> {
        self.client
    }
}
