//! The defaults `floe serve -h`, `floe seq -h` and their man pages show, read from floe-server's
//! configuration ([`ServerConfig::default`]): each default is written once, there. A flag is
//! `None` when not given and the configuration's value stands, so clap's own `default_value`
//! (which would hide the file's value) is not used; the help says "[default: VALUE]" from the
//! key the flag sets ([`FLAG_KEYS`]). docs/floe.toml is checked against the same defaults (the
//! tests below).

use clap::Command;
use floe_server::ServerConfig;

/// The key of floe.toml that each flag of `floe serve` sets (by the flag's id, its field's
/// name). `floe seq`'s sequencer flags are the same (`[sequencer]`).
pub(crate) const FLAG_KEYS: &[(&str, &str)] = &[
    ("grpc", "listen.grpc"),
    ("http", "listen.http"),
    ("allow_host", "listen.allow_hosts"),
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
    ("step_min", "sequencer.step_min"),
    ("step_max", "sequencer.step_max"),
    ("step_target_secs", "sequencer.step_target_secs"),
    ("timeout_ms", "sequencer.timeout_ms"),
    ("max_keys", "sequencer.max_keys"),
    ("key_idle_secs", "sequencer.key_idle_secs"),
    ("layout", "snowflake.layout"),
    ("epoch_ms", "snowflake.epoch_ms"),
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

/// The flags of `floe serve` that set no key of floe.toml.
#[cfg(test)]
const SERVE_ONLY: &[&str] = &["config", "print_config", "log_format", "help"];

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
        let id = arg.get_id().as_str();
        let Some(value) = FLAG_KEYS
            .iter()
            .find(|(flag, _)| *flag == id)
            .and_then(|(_, key)| default_of(&defaults, key))
        else {
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
