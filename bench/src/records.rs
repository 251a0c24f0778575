//! What every traffic_server of the bench runs with, whichever part
//! starts it (the load bench, `icount`, `tls`).

/// records.config overrides for the bench, and how the report describes them.
pub(crate) const ATS_RECORDS: &[(&str, &str)] = &[
    ("proxy.config.diags.debug.enabled", "INT 0"),
    ("proxy.config.log.logging_enabled", "INT 0"),
    // The proxied workload's URL has a query string: no cache lookup at all.
    (
        "proxy.config.http.cache.cache_urls_that_look_dynamic",
        "INT 0",
    ),
];
pub(crate) const ATS_SETTINGS: &str =
    "2 exec threads, debug output and logging off, 8 MB RAM cache, \
                            `cache_urls_that_look_dynamic 0`";
