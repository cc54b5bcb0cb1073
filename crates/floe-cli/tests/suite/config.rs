//! `floe serve --config FILE`: the file, `FLOE_*` variables and flags, in that order of
//! precedence; unknown keys and bad values refuse to start naming the file and the key; the
//! shipped example (docs/floe.toml) is valid and starts a server.

use crate::common;
use crate::serving;

use common::{cmd, ok, run};

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn printed(out: std::process::Output) -> toml::Table {
    toml::from_str(&ok(out)).unwrap()
}

#[test]
fn flags_win_over_variables_which_win_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "floe.toml",
        "[listen]\nhttp = \"127.0.0.1:1\"\ngrpc = \"127.0.0.1:2\"\n[snowflake]\nlayout = \"twitter\"\n[stores]\norders = \"memory\"\n",
    );
    let t = printed(run(&["serve", "--config", &file, "--print-config"]));
    assert_eq!(t["listen"]["http"].as_str(), Some("127.0.0.1:1"));
    assert_eq!(t["snowflake"]["layout"].as_str(), Some("twitter"));
    assert_eq!(t["stores"]["orders"].as_str(), Some("memory"));
    let out = cmd()
        .args([
            "serve",
            "--config",
            &file,
            "--print-config",
            "--grpc",
            "off",
        ])
        .env("FLOE_HTTP", "127.0.0.1:3")
        .env("FLOE_GRPC", "127.0.0.1:4")
        .env("FLOE_LAYOUT", "flake-idgen")
        .output()
        .unwrap();
    let t = printed(out);
    assert_eq!(
        t["listen"]["http"].as_str(),
        Some("127.0.0.1:3"),
        "variable over file"
    );
    assert_eq!(
        t["listen"]["grpc"].as_str(),
        Some("off"),
        "flag over variable"
    );
    assert_eq!(t["snowflake"]["layout"].as_str(), Some("flake-idgen"));
    // --store replaces the file's stores; --bigger-than adds.
    let t = printed(run(&[
        "serve",
        "--config",
        &file,
        "--print-config",
        "--store",
        "a=memory",
        "--bigger-than",
        "a:k=5",
    ]));
    let stores = t["stores"].as_table().unwrap();
    assert_eq!(stores.keys().collect::<Vec<_>>(), ["a"]);
    assert_eq!(t["bigger_than"]["a:k"].as_integer(), Some(5));
    // The configuration file can come from FLOE_CONFIG.
    let out = cmd()
        .args(["serve", "--print-config"])
        .env("FLOE_CONFIG", &file)
        .output()
        .unwrap();
    assert_eq!(printed(out)["stores"]["orders"].as_str(), Some("memory"));
}

#[test]
fn bad_files_refuse_to_start_naming_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, words) in [
        (
            "[listen]\ngrpc = \"off\"\nhtpp = \"x\"\n",
            "line 3: unknown field `htpp`",
        ),
        ("[limts]\n", "unknown field `limts`"),
        ("[limits]\nmax_batch = \"many\"\n", "line 2"),
        (
            "[limits]\nmax_batch = 0\n",
            "limits.max_batch: expected 1 to 1000000, found 0",
        ),
        ("[sequencer]\nstep_min = 0\n", "sequencer.step_min"),
        (
            "[snowflake]\nlayout = \"22/10/12\"\nepoch_ms = 0\n",
            "snowflake.layout",
        ),
        ("[stores]\na = \"cassandra://x\"\n", "stores.a"),
        ("[stores]\n\"a b\" = \"memory\"\n", "stores.a b"),
        (
            "[registry]\nurl = \"ftp://x\"\n",
            "registry: unknown scheme \"ftp\"",
        ),
        ("state_dir = 5\n", "line 1"),
        ("not toml at all", "line 1"),
    ] {
        let file = write(dir.path(), "bad.toml", text);
        let out = run(&[
            "serve",
            "--config",
            &file,
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ]);
        assert_eq!(out.status.code(), Some(2), "{text:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&file) || !words.starts_with("line"),
            "{text:?}: {err}"
        );
        assert!(err.contains(words), "{text:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let out = run(&["serve", "--config", "/nonexistent/floe.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/floe.toml: cannot read"));
}

#[test]
fn the_shipped_example_is_valid_and_serves() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/floe.toml");
    let t = printed(run(&["serve", "--config", example, "--print-config"]));
    assert_eq!(t["snowflake"]["layout"].as_str(), Some("leaf"));
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = serving::start(&["--config", example, "--state-dir", &state]);
    let (code, body) = serving::http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(code, 200, "{body}");
    server.term();
    let (status, _, _) = server.wait(std::time::Duration::from_secs(20));
    assert!(status.success());
}

/// A server of sequences only (`[ids] kinds = []`) may be the first to use its state directory:
/// it creates it (it refused to start, exit 1, "cannot open .../sequencer-tails.lock").
#[test]
fn a_sequences_only_server_starts_on_a_new_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "floe.toml", "[ids]\nkinds = []\n");
    let state = dir.path().join("new").join("state");
    let state = state.display().to_string();
    let server = serving::start(&["--config", &config, "--state-dir", &state]);
    let (code, body) = serving::http(
        &server.http,
        "GET",
        "/v1/sequencer/default/k?increment=strong",
    )
    .unwrap();
    assert_eq!((code, body.as_str()), (200, r#"{"next_id":"1"}"#));
    let (code, _) = serving::http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
    assert_ne!(code, 200, "no generator is served");
    server.term();
    let (status, _, _) = server.wait(std::time::Duration::from_secs(20));
    assert!(status.success());
    assert!(std::path::Path::new(&state).is_dir());
}

/// Every setting of `floe serve` with a flag has its `FLOE_*` variable (the flag's name in
/// capitals), but the repeatable ones (`--store`, `--bigger-than`, `--allow-host`,
/// `--template`: a list in one variable would need a separator that URLs and templates hold),
/// which packaging/floe.env names; and the variables are read: a number, a switch and a path.
#[test]
fn every_serve_setting_with_a_flag_has_its_variable() {
    let help = run(&["serve", "--help"]);
    let help = String::from_utf8(help.stdout).unwrap();
    let repeatable = ["--store", "--bigger-than", "--allow-host", "--template"];
    let mut flags = 0;
    // One entry per flag: its line and the lines of its text up to the next flag.
    let entries: Vec<String> = help
        .split("\n      --")
        .skip(1)
        .map(|e| format!("--{e}"))
        .collect();
    for entry in &entries {
        let flag = entry.split([' ', '\n']).next().unwrap();
        if ["--print-config", "--help", "--version"].contains(&flag) {
            continue;
        }
        flags += 1;
        let variable = format!(
            "[env: FLOE_{}",
            flag.trim_start_matches("--")
                .replace('-', "_")
                .to_uppercase()
        );
        let has = entry.contains(&variable);
        if repeatable.contains(&flag) {
            assert!(!has, "{flag} is repeatable: no variable, as floe.env says");
        } else {
            assert!(has, "{flag}: no {variable}] in its help:\n{entry}");
        }
    }
    assert!(flags > 35, "{flags} flags read from the help:\n{help}");
    let env = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/floe.env"
    ))
    .unwrap();
    for flag in repeatable {
        assert!(env.contains(flag), "packaging/floe.env names {flag}");
    }
    let out = cmd()
        .args(["serve", "--print-config"])
        .env("FLOE_MAX_KEYS", "5")
        .env("FLOE_START_FROM_CACHE", "1")
        .env("FLOE_SCRAMBLE_DOMAIN", "digits:8")
        .env("FLOE_SHUTDOWN_DELAY_SECS", "3")
        .output()
        .unwrap();
    let t = printed(out);
    assert_eq!(t["sequencer"]["max_keys"].as_integer(), Some(5));
    assert_eq!(t["registry"]["start_from_cache"].as_bool(), Some(true));
    assert_eq!(t["scramble"]["domain"].as_str(), Some("digits:8"));
    assert_eq!(t["limits"]["shutdown_delay_secs"].as_integer(), Some(3));
    // A switch's variable reads as people write it: 1, yes, on, true; 0, no, off, false.
    for (text, on) in [("yes", true), ("on", true), ("0", false), ("off", false)] {
        let out = cmd()
            .args(["serve", "--print-config"])
            .env("FLOE_PORT_FALLBACK", text)
            .output()
            .unwrap();
        assert_eq!(
            printed(out)["registry"]["port_fallback"].as_bool(),
            Some(on),
            "{text}"
        );
    }
}
