//! Upstream's default metric tag, `scheme.host[:port]` from the rule's "from"
//! URL: the leaf crate `metric-tag`, which ip_throttle.so shares.

pub use metric_tag::from_url;
