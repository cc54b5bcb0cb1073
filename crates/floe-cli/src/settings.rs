//! The settings of `floe serve` and `floe seq` as flags: the key of floe.toml each flag sets
//! ([`FLAG_KEYS`]), written once, and from it
//!
//! - the flags given, written over the configuration ([`overlay`]): no hand mapping a flag;
//! - the defaults the help and the man pages show, read from floe-server's configuration
//!   ([`ServerConfig::default`]), where each default is written once. A flag is `None` when not
//!   given, so that the file's value stands: clap's own `default_value` would hide it. The
//!   help says "[default: VALUE]" from the flag's key instead ([`with_defaults`]).
//!
//! docs/floe.toml is checked against the same defaults (the tests below).

use clap::Command;
use floe_server::ServerConfig;
use serde::Serialize;

/// The key of floe.toml that each flag of `floe serve` sets (by the flag's id, its field's
/// name). `floe seq`'s sequencer flags are the same (`[sequencer]`).
pub(crate) const FLAG_KEYS: &[(&str, &str)] = &[
    ("grpc", "listen.grpc"),
    ("http", "listen.http"),
    ("allow_host", "listen.allow_hosts"),
    ("host_check", "listen.host_check"),
    ("state_dir", "state_dir"),
    ("registry", "registry.url"),
    ("service", "registry.service"),
    ("host", "registry.host"),
    ("port", "registry.port"),
    ("port_fallback", "registry.port_fallback"),
    ("start_from_cache", "registry.start_from_cache"),
    ("reclaim_after", "registry.reclaim_after_secs"),
    ("max_clock_wait_ms", "registry.max_clock_wait_ms"),
    ("stores", "stores"),
    ("bigger_than", "bigger_than"),
    ("registered_only", "sequencer.registered_only"),
    ("step_min", "sequencer.step_min"),
    ("step_max", "sequencer.step_max"),
    ("step_target_secs", "sequencer.step_target_secs"),
    ("timeout_ms", "sequencer.timeout_ms"),
    ("max_keys", "sequencer.max_keys"),
    ("key_idle_secs", "sequencer.key_idle_secs"),
    ("layout", "snowflake.layout"),
    ("epoch_ms", "snowflake.epoch_ms"),
    ("snowflake_above", "snowflake.above"),
    ("random_start", "snowflake.random_start"),
    ("templates", "templates"),
    ("scramble_key_file", "scramble.key_file"),
    ("scramble_domain", "scramble.domain"),
    ("max_batch", "limits.max_batch"),
    ("max_connections", "limits.max_connections"),
    ("max_streams", "limits.max_streams"),
    ("header_timeout_secs", "limits.header_timeout_secs"),
    ("idle_timeout_secs", "limits.idle_timeout_secs"),
    ("request_timeout_secs", "limits.request_timeout_secs"),
    ("shutdown_timeout_secs", "limits.shutdown_timeout_secs"),
    ("shutdown_delay_secs", "limits.shutdown_delay_secs"),
    ("tls_cert", "tls.cert"),
    ("tls_key", "tls.key"),
    ("token_file", "auth.token_file"),
    ("health_needs_token", "auth.health_needs_token"),
];

/// The key a flag sets, by the flag's id.
fn key_of(id: &str) -> Option<&'static str> {
    FLAG_KEYS
        .iter()
        .find(|(flag, _)| *flag == id)
        .map(|(_, key)| *key)
}

/// The flag (`--step-min`) that sets a key of floe.toml (`sequencer.step_min`), for messages
/// about a value given by flag; the key itself when no flag sets it.
pub(crate) fn flag_of(key: &str) -> String {
    FLAG_KEYS.iter().find(|(_, k)| *k == key).map_or_else(
        || key.to_string(),
        |(flag, _)| format!("--{}", flag.replace('_', "-")),
    )
}

/// The flags of `floe serve` that set no key of floe.toml.
#[cfg(test)]
const SERVE_ONLY: &[&str] = &["config", "print_config", "log_format", "help"];

/// `given` (flags, by their ids: a struct deriving `Serialize`, its unset flags `None`) written
/// over `config`, each at its key ([`FLAG_KEYS`]). A switch that is off leaves its key as the
/// file says: a switch turns a setting on. Lists and tables (`--store`, `--template`, ...) are
/// the caller's (`#[serde(skip)]`): they are parsed and checked first.
///
/// # Errors
/// A flag with no key in [`FLAG_KEYS`] (a bug, named), or a value the configuration refuses.
pub(crate) fn overlay<T: Serialize>(
    config: &ServerConfig,
    given: &T,
) -> Result<ServerConfig, String> {
    let internal =
        |e: &dyn std::fmt::Display| format!("internal error: the flags as settings: {e}");
    // Text, numbers, switches and paths: only a path that is not UTF-8 fails here.
    let given = match serde_json::to_value(given) {
        Ok(serde_json::Value::Object(flags)) => flags,
        Ok(_) => return Err(internal(&"the flags are not a table")),
        Err(e) => {
            return Err(format!(
                "a path given is not UTF-8 ({e}): floe takes UTF-8 paths"
            ))
        }
    };
    let mut table = toml::Table::try_from(config).map_err(|e| internal(&e))?;
    let mut result = config.clone();
    for (id, value) in given {
        if value.is_null() || value == serde_json::Value::Bool(false) {
            continue;
        }
        let flag = id.replace('_', "-");
        // TOML's integers are i64: a larger u64 is refused here, naming its flag.
        let value = toml::Value::try_from(&value)
            .map_err(|e| format!("--{flag}: {value} cannot be a setting: {e}"))?;
        let key = key_of(&id).ok_or_else(|| internal(&format!("--{id} sets no key")))?;
        let (path, last) = key
            .rsplit_once('.')
            .map_or((None, key), |(p, l)| (Some(p), l));
        let mut at = &mut table;
        for part in path.into_iter().flat_map(|p| p.split('.')) {
            at = at
                .entry(part)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .ok_or_else(|| internal(&format!("{key} is not under a table")))?;
        }
        at.insert(last.to_string(), value);
        // Read after each flag, so that an error names the flag.
        result = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e: toml::de::Error| format!("--{flag} ({key}): {}", e.message().trim()))?;
    }
    Ok(result)
}

/// The default of a key as the help writes it: a number or a text; `None` for a key with no
/// value by default (its help says in words what stands instead), a list, a table, or a
/// switch (off).
fn default_of(defaults: &toml::Value, key: &str) -> Option<String> {
    let value = key
        .split('.')
        .try_fold(defaults, |table, part| table.get(part))?;
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `command` with "[default: VALUE]" after the help of each flag of `serve` and `seq` whose
/// key has a value by default.
pub(crate) fn with_defaults(command: Command) -> Command {
    // The defaults are plain data: they serialize (as --print-config shows).
    let Ok(defaults) = toml::Value::try_from(ServerConfig::default()) else {
        return command;
    };
    let mark = |arg: clap::Arg| {
        // clap says the default of a flag that has its own (seq's --state-dir).
        if !arg.get_default_values().is_empty() {
            return arg;
        }
        let id = arg.get_id().as_str();
        let Some(value) = key_of(id).and_then(|key| default_of(&defaults, key)) else {
            return arg;
        };
        let with = |help: &clap::builder::StyledStr| format!("{help} [default: {value}]");
        let long = arg.get_long_help().map(with);
        let short = arg.get_help().map(with);
        let arg = match short {
            Some(h) => arg.help(h),
            None => arg,
        };
        match long {
            Some(h) => arg.long_help(h),
            None => arg,
        }
    };
    command
        .mut_subcommand("serve", |c| c.mut_args(mark))
        .mut_subcommand("seq", |c| c.mut_args(mark))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn serve() -> Command {
        with_defaults(crate::Cli::command())
            .find_subcommand("serve")
            .cloned()
            .unwrap()
    }

    /// No flag says its default twice (its own, and its key's).
    #[test]
    fn no_help_says_its_default_twice() {
        let mut cmd = with_defaults(crate::Cli::command());
        let mut help = Vec::new();
        for sub in ["serve", "seq"] {
            cmd.find_subcommand_mut(sub)
                .unwrap()
                .write_long_help(&mut help)
                .unwrap();
        }
        let help = String::from_utf8(help).unwrap();
        for line in help.lines() {
            assert!(!line.contains("] [default: "), "{line}");
        }
        assert!(help.contains("[default: .floe]"));
    }

    #[test]
    fn every_serve_flag_sets_a_key_or_is_known_not_to() {
        for arg in serve().get_arguments() {
            let id = arg.get_id().as_str();
            assert!(
                FLAG_KEYS.iter().any(|(flag, _)| *flag == id) || SERVE_ONLY.contains(&id),
                "--{id}: add its floe.toml key to FLAG_KEYS (or to SERVE_ONLY)"
            );
        }
        for (flag, _) in FLAG_KEYS {
            assert!(
                serve().get_arguments().any(|a| a.get_id() == flag),
                "FLAG_KEYS names {flag}, which serve has no more"
            );
        }
    }

    /// Flags with values, as `floe serve` would parse them.
    fn given(args: &[&str]) -> ServerConfig {
        let mut argv = vec!["floe", "serve"];
        argv.extend_from_slice(args);
        let cli = <crate::Cli as clap::Parser>::try_parse_from(argv).unwrap();
        let crate::Command::Serve(serve) = cli.command else {
            unreachable!("serve parses as serve")
        };
        serve.config().unwrap()
    }

    #[test]
    fn each_flag_given_writes_its_key_and_nothing_else() {
        let d = ServerConfig::default();
        assert_eq!(given(&[]).to_toml(), d.to_toml());
        let c = given(&[
            "--grpc",
            "off",
            "--max-batch",
            "7",
            "--step-min",
            "9",
            "--port",
            "4000",
            "--epoch-ms",
            "1288834974657",
            "--layout",
            "twitter",
            "--port-fallback",
            "--token-file",
            "/t",
        ]);
        assert_eq!(c.listen.grpc, "off");
        assert_eq!(c.listen.http, d.listen.http);
        assert_eq!(c.limits.max_batch, 7);
        assert_eq!(c.sequencer.step_min, 9);
        assert_eq!(c.sequencer.step_max, d.sequencer.step_max);
        assert_eq!(c.registry.port, Some(4000));
        assert_eq!(c.snowflake.default.epoch_ms, Some(1_288_834_974_657));
        assert_eq!(c.snowflake.default.layout, "twitter");
        assert!(c.registry.port_fallback);
        assert_eq!(c.auth.token_file, Some("/t".into()));
        // A file's other settings (stores, templates, named layouts) come through whole.
        let mut file = ServerConfig::from_toml(include_str!("../../../docs/floe.toml")).unwrap();
        file.snowflake
            .named
            .insert("old".into(), file.snowflake.default.clone());
        let flagged = overlay(&file, &serde_json::json!({ "max_batch": 7 })).unwrap();
        file.limits.max_batch = 7;
        assert_eq!(flagged.to_toml(), file.to_toml());
        // A path that is not UTF-8 is refused as such, not as floe's own error.
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(b"/tmp/\xff"));
            let given = std::collections::BTreeMap::from([("state_dir", path)]);
            let e = overlay(&d, &given).unwrap_err();
            assert!(e.contains("UTF-8") && !e.contains("internal"), "{e}");
        }
        // A number TOML cannot hold names its flag.
        let e = overlay(&d, &serde_json::json!({ "epoch_ms": u64::MAX })).unwrap_err();
        assert!(e.starts_with("--epoch-ms: 18446744073709551615 "), "{e}");
        // A switch left off keeps the file's value.
        let mut on = ServerConfig::default();
        on.registry.start_from_cache = true;
        let off = overlay(&on, &serde_json::json!({ "start_from_cache": false })).unwrap();
        assert!(off.registry.start_from_cache);
        // Every flag of FLAG_KEYS lands where the configuration reads it.
        for (flag, key) in FLAG_KEYS {
            // A text where a number or a list is read is refused naming the key; a key
            // the configuration does not have would be "unknown field".
            if let Err(e) = overlay(&d, &serde_json::json!({ *flag: "x" })) {
                assert!(!e.contains("unknown field"), "--{flag} ({key}): {e}");
                let named = format!("--{} ({key}): ", flag.replace('_', "-"));
                assert!(e.starts_with(&named), "--{flag}: {e}");
            }
        }
    }

    #[test]
    fn the_help_shows_the_configurations_defaults() {
        let d = ServerConfig::default();
        let serve = serve();
        let help = |id: &str| {
            let arg = serve.get_arguments().find(|a| a.get_id() == id).unwrap();
            arg.get_long_help().or(arg.get_help()).unwrap().to_string()
        };
        let max_batch = help("max_batch");
        assert!(
            max_batch.ends_with(&format!("[default: {}]", d.limits.max_batch)),
            "{max_batch}"
        );
        let http = help("http");
        assert!(
            http.ends_with(&format!("[default: {}]", d.listen.http)),
            "{http}"
        );
        let step_min = help("step_min");
        assert!(
            step_min.ends_with(&format!("[default: {}]", d.sequencer.step_min)),
            "{step_min}"
        );
        // A key with no default value keeps its words, and gains nothing.
        let port = help("port");
        assert_eq!(port.matches("[default:").count(), 1, "{port}");
        // Every default is shown once.
        for arg in serve.get_arguments() {
            for text in [arg.get_help(), arg.get_long_help()].into_iter().flatten() {
                let text = text.to_string();
                assert!(text.matches("[default:").count() <= 1, "{text}");
            }
        }
    }

    /// docs/floe.toml: every key a flag sets is there (written, or commented out when it has
    /// no default), and every value written is the default, so that the example, the help
    /// and the configuration agree.
    #[test]
    fn docs_floe_toml_writes_the_defaults_and_every_flags_key() {
        let text = include_str!("../../../docs/floe.toml");
        // Its stores and templates are examples (no store named is `default=embedded`, and
        // there is no template by default): the rest is the defaults.
        let values = |config: ServerConfig| {
            let mut t = toml::Table::try_from(config).unwrap();
            t.remove("stores");
            t.remove("templates");
            t
        };
        assert_eq!(
            values(ServerConfig::from_toml(text).unwrap()),
            values(ServerConfig::default()),
            "docs/floe.toml writes a value that is not the default"
        );
        // The keys under each [section] header, commented out or not.
        let mut section = String::new();
        let mut keys = std::collections::BTreeSet::new();
        for line in text.lines() {
            let line = line.trim_start_matches('#').trim();
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = format!("{name}.");
            } else if let Some((key, _)) = line.split_once(" = ") {
                if !key.contains(' ') {
                    keys.insert(format!("{section}{key}"));
                }
            }
        }
        for (flag, key) in FLAG_KEYS {
            let table = ["stores", "bigger_than", "templates"];
            assert!(
                keys.contains(*key) || table.contains(key),
                "docs/floe.toml has no {key} (--{flag}); it has {keys:?}"
            );
        }
    }
}
