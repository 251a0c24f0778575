//! The files an instance starts from: runroot.yaml, records.config (9.2)
//! or records.yaml (10.x), remap.config, plugin.config, a TLS certificate.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;
use std::process::Command;

use super::{free_port, TsBuilder};
use crate::ats;

impl TsBuilder {
    pub(super) fn write_runroot(
        &self,
        root: &Path,
        port: u16,
        tls_port: Option<u16>,
    ) -> io::Result<()> {
        let etc = root.join("etc");
        for d in ["etc", "log", "run", "cache", "var"] {
            fs::create_dir_all(root.join(d))?;
        }
        let r = root.display();
        let (bin, inc, lib, libexec) = (
            ats::bin_dir(),
            ats::include_dir(),
            ats::lib_dir(),
            ats::plugin_dir(),
        );
        let (bin, inc, lib, libexec) = (
            bin.display(),
            inc.display(),
            lib.display(),
            libexec.display(),
        );
        fs::write(
            root.join("runroot.yaml"),
            format!(
                "prefix: {r}\nexec_prefix: {r}\nbindir: {bin}\nsbindir: {bin}\nsysconfdir: {r}/etc\n\
                 datadir: {r}/var\nincludedir: {inc}\nlibdir: {lib}\n\
                 libexecdir: {libexec}\nlocalstatedir: {r}/var\nruntimedir: {r}/run\n\
                 logdir: {r}/log\ncachedir: {r}/cache\n"
            ),
        )?;
        let mut records: BTreeMap<String, String> = [
            ("proxy.config.http.server_ports", {
                let pp = if self.proxy_protocol { ":pp" } else { "" };
                let mut ports = format!("STRING {port}:ip-in=127.0.0.1{pp}");
                if self.ipv6 {
                    ports.push_str(&format!(" {port}:ipv6:ip-in=[::1]{pp}"));
                }
                if let Some(t) = tls_port {
                    ports.push_str(&format!(" {t}:ssl:ip-in=127.0.0.1"));
                }
                ports
            }),
            ("proxy.config.admin.user_id", "STRING #-1".into()),
            ("proxy.config.crash_log_helper", "STRING NULL".into()),
            ("proxy.config.diags.output.diag", "STRING L".into()),
            ("proxy.config.diags.output.debug", "STRING L".into()),
            ("proxy.config.diags.debug.enabled", "INT 1".into()),
            (
                "proxy.config.diags.debug.tags",
                format!("STRING {}", self.debug_tags),
            ),
            ("proxy.config.url_remap.remap_required", "INT 1".into()),
            ("proxy.config.reverse_proxy.enabled", "INT 1".into()),
            ("proxy.config.exec_thread.autoconfig", "INT 0".into()),
            ("proxy.config.exec_thread.limit", "INT 2".into()),
            ("proxy.config.task_threads", "INT 2".into()),
            ("proxy.config.cache.ram_cache.size", "INT 8388608".into()),
            // Without this, requests in the first moments see no cache at all.
            ("proxy.config.http.wait_for_cache", "INT 1".into()),
            ("proxy.config.http.insert_response_via_str", "INT 0".into()),
            ("proxy.config.log.logging_enabled", "INT 3".into()),
            ("proxy.config.log.max_secs_per_buffer", "INT 1".into()),
            (
                "proxy.config.process_manager.mgmt_port",
                format!("INT {}", free_port()),
            ),
            (
                "proxy.config.admin.synthetic_port",
                format!("INT {}", free_port()),
            ),
            (
                "proxy.config.http.connect_attempts_max_retries",
                "INT 0".into(),
            ),
            ("proxy.config.http.connect_attempts_timeout", "INT 5".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if tls_port.is_some() {
            make_certificate(&etc)?;
            for (k, v) in [
                (
                    "proxy.config.ssl.server.cert.path",
                    format!("STRING {r}/etc"),
                ),
                (
                    "proxy.config.ssl.server.private_key.path",
                    format!("STRING {r}/etc"),
                ),
                (
                    "proxy.config.ssl.server.multicert.filename",
                    format!("STRING {r}/etc/ssl_multicert.config"),
                ),
            ] {
                records.insert(k.to_owned(), v);
            }
        }
        if ats::is_10() {
            // 10 resolves the default (etc/trafficserver/body_factory) against
            // the runroot's prefix, not sysconfdir as 9.2 does.
            records.insert(
                "proxy.config.body_factory.template_sets_dir".into(),
                format!("STRING {r}/etc/body_factory"),
            );
            let mut yaml = BTreeMap::new();
            for (k, v) in records.into_iter().chain(self.records.clone()) {
                if let Some(name) = name_in_10(&k) {
                    yaml.insert(name.to_owned(), v);
                }
            }
            fs::write(etc.join("records.yaml"), records_yaml(&yaml))?;
            // The JSON-RPC server that traffic_ctl talks to, as by default:
            // RUNTIMEDIR/jsonrpc20.sock, for this user and root only.
            fs::write(
                etc.join("jsonrpc.yaml"),
                "rpc:\n  enabled: true\n  unix:\n    restricted_api: true\n",
            )?;
        } else {
            records.extend(self.records.clone());
            let text: String = records
                .iter()
                .map(|(k, v)| format!("CONFIG {k} {v}\n"))
                .collect();
            fs::write(etc.join("records.config"), text)?;
        }
        fs::write(etc.join("remap.config"), &self.remap)?;
        fs::write(etc.join("plugin.config"), &self.plugin_config)?;
        fs::write(etc.join("storage.config"), format!("{}/cache 64M\n", r))?;
        fs::write(
            etc.join("logging.yaml"),
            "logging:\n  formats:\n    - name: test\n      format: '%<cqtq> %<ttms> %<chi> %<crc>/%<pssc> %<cqhm> %<cquc> %<phr>/%<shn>'\n  logs:\n    - filename: access\n      format: test\n      mode: ascii\n",
        )?;
        let defaults = ats::default_config_dir();
        fs::copy(defaults.join("ip_allow.yaml"), etc.join("ip_allow.yaml"))?;
        copy_dir(&defaults.join("body_factory"), &etc.join("body_factory"))?;
        for (name, contents) in &self.files {
            // A name may hold a subdirectory (a package's own, ats-throttle/).
            let path = etc.join(name);
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            fs::write(path, contents)?;
        }
        Ok(())
    }
}

/// A self-signed certificate for `*.test` and its key (`cert.pem`,
/// `key.pem` in `etc`), made by the `openssl` CLI, and the
/// ssl_multicert.config that serves them on every address.
fn make_certificate(etc: &Path) -> io::Result<()> {
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=a.test",
            "-addext",
            "subjectAltName=DNS:*.test",
        ])
        .arg("-keyout")
        .arg(etc.join("key.pem"))
        .arg("-out")
        .arg(etc.join("cert.pem"))
        .output()
        .map_err(|e| io::Error::other(format!("cannot run openssl (install it): {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    fs::write(
        etc.join("ssl_multicert.config"),
        "dest_ip=* ssl_cert_name=cert.pem ssl_key_name=key.pem\n",
    )
}

/// records.config names that 10.x renamed ("Configuration Changes" in
/// 10's upgrading notes). Tests keep using the 9.2 names.
const RENAMED_IN_10: &[(&str, &str)] = &[
    (
        "proxy.config.exec_thread.autoconfig",
        "proxy.config.exec_thread.autoconfig.enabled",
    ),
    (
        "proxy.config.output.logfile",
        "proxy.config.output.logfile.name",
    ),
    (
        "proxy.config.tunnel.prewarm",
        "proxy.config.tunnel.prewarm.enabled",
    ),
    (
        "proxy.config.ssl.origin_session_cache",
        "proxy.config.ssl.origin_session_cache.enabled",
    ),
    (
        "proxy.config.ssl.session_cache",
        "proxy.config.ssl.session_cache.mode",
    ),
    (
        "proxy.config.ssl.TLSv1_3",
        "proxy.config.ssl.TLSv1_3.enabled",
    ),
    (
        "proxy.config.ssl.client.TLSv1_3",
        "proxy.config.ssl.client.TLSv1_3.enabled",
    ),
    (
        "proxy.config.http.connect_attempts_max_retries_dead_server",
        "proxy.config.http.connect_attempts_max_retries_down_server",
    ),
    (
        "proxy.config.http.connect.dead.policy",
        "proxy.config.http.connect.down.policy",
    ),
];

/// records.config names that 10.x no longer has (traffic_manager's among
/// them): left out of records.yaml, where 10 would only warn "Unrecognized
/// configuration value" about them.
const GONE_IN_10: &[&str] = &[
    "proxy.config.process_manager.mgmt_port",
    "proxy.config.admin.synthetic_port",
    "proxy.config.http.down_server.abort_threshold",
    "proxy.config.http.parent_proxy.connect_attempts_timeout",
    "proxy.config.http.post_connect_attempts_timeout",
    "proxy.config.http.per_server.connection.queue_size",
    "proxy.config.http.per_server.connection.queue_delay",
    "proxy.config.http.keepalive_internal_vc",
];

/// The 10.x name of a 9.2 record, `None` if 10 has no such record.
fn name_in_10(name: &str) -> Option<&str> {
    if GONE_IN_10.contains(&name) {
        return None;
    }
    Some(
        RENAMED_IN_10
            .iter()
            .find(|(old, _)| *old == name)
            .map_or(name, |(_, new)| new),
    )
}

/// records.yaml text for `records` (full names, records.config typed values
/// such as `INT 1`, `STRING a b`, `FLOAT 0.5`).
///
/// Each record is one dotted key under `records:` (10 builds a record's name
/// by joining the keys on its path with dots, so `diags.debug.enabled: 1`
/// and the nested form are the same record). Every value is a quoted scalar
/// with its YAML type tag: 10 takes the type of a record it knows from its
/// own table and the string as records.config's value (`STRING NULL` still
/// means unset), and sets a record it does not know (a plugin's) only when
/// it is tagged.
fn records_yaml(records: &BTreeMap<String, String>) -> String {
    let mut out = String::from("records:\n");
    for (name, typed) in records {
        let key = name.strip_prefix("proxy.config.").unwrap_or_else(|| {
            panic!("records.yaml holds proxy.config.* records only, not {name:?}")
        });
        assert!(
            !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-'),
            "unexpected record name {name:?}"
        );
        let (ty, value) = typed.split_once(char::is_whitespace).unwrap_or((typed, ""));
        let tag = match ty {
            "INT" | "COUNTER" => "!!int",
            "FLOAT" => "!!float",
            "STRING" => "!!str",
            _ => panic!("record {name}: unknown type in {typed:?} (INT, FLOAT or STRING)"),
        };
        out.push_str(&format!("  {key}: {tag} {}\n", yaml_quoted(value.trim())));
    }
    out
}

/// `s` as a YAML double-quoted scalar.
fn yaml_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else {
            fs::copy(entry.path(), dest)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_become_tagged_dotted_yaml_keys_with_10_names() {
        let records: BTreeMap<String, String> = [
            ("proxy.config.admin.user_id", "STRING #-1"),
            ("proxy.config.crash_log_helper", "STRING NULL"),
            ("proxy.config.proxy_name", "STRING a \"b\" \\c"),
            ("proxy.config.diags.debug.tags", "STRING "),
            ("proxy.config.net.poll_timeout", "INT 10"),
            ("proxy.config.http.cache.heuristic_lm_factor", "FLOAT 0.5"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(
            records_yaml(&records),
            "records:\n  \
             admin.user_id: !!str \"#-1\"\n  \
             crash_log_helper: !!str \"NULL\"\n  \
             diags.debug.tags: !!str \"\"\n  \
             http.cache.heuristic_lm_factor: !!float \"0.5\"\n  \
             net.poll_timeout: !!int \"10\"\n  \
             proxy_name: !!str \"a \\\"b\\\" \\\\c\"\n"
        );
        assert_eq!(
            name_in_10("proxy.config.exec_thread.autoconfig"),
            Some("proxy.config.exec_thread.autoconfig.enabled")
        );
        assert_eq!(name_in_10("proxy.config.process_manager.mgmt_port"), None);
        assert_eq!(
            name_in_10("proxy.config.exec_thread.limit"),
            Some("proxy.config.exec_thread.limit")
        );
    }
}
