//! The fuzz target body for floe-server's configuration file.
//!
//! This file uses `floe_server` and `std` only: floe-server's tests include it (`#[path]`) to
//! replay `fuzz/regressions/config/` ([`TARGETS`]).

use floe_server::ServerConfig;

/// A target's body: it takes the raw input, and panics when a property fails.
pub type Body = fn(&[u8]);

/// Each target of this file by its name (its folder under `fuzz/regressions/`), with its body.
pub const TARGETS: &[(&str, Body)] = &[("config", config)];

/// A time to check layouts at: 2026-11-23T01:02:03.004Z.
const NOW_MS: u64 = 1_795_395_723_004;

/// An error message as floe shows it: one line, never empty.
fn one_line(message: impl ToString) {
    let message = message.to_string();
    assert!(
        !message.is_empty() && !message.contains(['\n', '\r']),
        "not one line: {message:?}"
    );
}

/// A `floe.toml`: `ServerConfig::from_toml`, then every check `floe serve` runs before it
/// opens anything (`check` into a plan, `validate`, and what they derive:
/// limits, options, floors, templates, store URLs), and `--print-config`'s redacted text.
///
/// Errors are one line; an accepted configuration comes back from its own TOML
/// (`to_toml`), and its redacted TOML still parses. What `check` accepts, `validate` accepts
/// (the same pass without the clock).
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match ServerConfig::from_toml(text) {
        Ok(config) => config,
        Err(e) => {
            one_line(e);
            return;
        }
    };
    let toml = config.to_toml();
    assert_eq!(
        ServerConfig::from_toml(&toml).as_ref(),
        Ok(&config),
        "{toml}"
    );
    let redacted = config.to_toml_redacted();
    if let Err(e) = ServerConfig::from_toml(&redacted) {
        panic!("--print-config's text does not parse: {e}\n{redacted}");
    }
    if let Err(e) = config.validate() {
        one_line(e);
    }
    let checked = config.check(NOW_MS);
    if let Err(e) = &checked {
        one_line(e);
    }
    assert!(
        checked.is_err() || config.validate().is_ok(),
        "check accepts what validate refuses"
    );
    for result in [
        config.limits().map(drop),
        config.serve_options().map(drop),
        config.floors().map(drop),
        config.templates().map(drop),
    ] {
        if let Err(e) = result {
            one_line(e);
        }
    }
    let _ = (
        config.store_specs(),
        config.leaf_store(),
        config.identity_port(),
    );
}
