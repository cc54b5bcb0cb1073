//! What a package of floe ships besides the binary: shell completions, man pages, the version
//! and commit, progress kept off standard error when it is not a terminal, the Containerfile
//! (its shape only: no container engine here builds it) and the systemd unit (checked by
//! `systemd-analyze verify`, which scripts/test.sh installs with man-db).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{cmd, ok, run};

/// The repository's root (two levels above this crate).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn floe_bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("floe")
}

/// Every command and subcommand, as `floe --help` lists them.
const COMMANDS: [&str; 9] = [
    "gen",
    "inspect",
    "worker",
    "serve",
    "seq",
    "scramble",
    "unscramble",
    "completions",
    "man",
];
const WORKER_COMMANDS: [&str; 3] = ["list", "register", "release"];
const SEQ_KEYS_COMMANDS: [&str; 6] = [
    "list",
    "show",
    "raise",
    "register",
    "unregister",
    "registered",
];

#[test]
fn completions_cover_every_command() {
    let bash = ok(run(&["completions", "bash"]));
    for c in COMMANDS
        .iter()
        .chain(&WORKER_COMMANDS)
        .chain(&SEQ_KEYS_COMMANDS)
    {
        assert!(
            bash.contains(&format!("floe__{c}")) || bash.contains(&format!("__{c}")),
            "bash completion misses {c}"
        );
    }
    // Every subcommand word is offered at the top level.
    for c in COMMANDS {
        assert!(bash.contains(&format!(" {c} ")), "{c} not offered");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let script = ok(run(&["completions", shell]));
        assert!(script.contains("floe"), "{shell}");
        for c in COMMANDS {
            assert!(script.contains(c), "{shell} completion misses {c}");
        }
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_bash_completion_is_valid_bash() {
    let script = ok(run(&["completions", "bash"]));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floe.bash");
    std::fs::write(&file, script).unwrap();
    let out = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_man_page_names_every_command() {
    let page = ok(run(&["man"]));
    assert!(page.contains(".TH floe 1"), "{page}");
    assert!(page.contains(".SH SUBCOMMANDS"), "{page}");
    for c in COMMANDS {
        assert!(page.contains(&format!("floe\\-{c}(1)")), "{c} missing");
    }
    assert!(
        page.contains(".SH \"EXIT STATUS\"") && page.contains("EX_TEMPFAIL"),
        "the exit codes are in the page"
    );
    // One command's page, one level down.
    let list = ok(run(&["man", "worker", "list"]));
    assert!(list.contains(".TH floe-worker-list 1"), "{list}");
    let out = run(&["man", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected one of gen, inspect"));
}

/// `floe man --out-dir DIR` writes one page per command, and each renders with man-db's
/// `man -l` with no warning.
#[test]
fn every_man_page_renders() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man1");
    ok(cmd()
        .args(["man", "--out-dir"])
        .arg(&out_dir)
        .output()
        .unwrap());
    let mut pages = vec!["floe".to_string()];
    pages.extend(COMMANDS.iter().map(|c| format!("floe-{c}")));
    pages.extend(WORKER_COMMANDS.iter().map(|c| format!("floe-worker-{c}")));
    pages.push("floe-seq-keys".to_string());
    pages.extend(
        SEQ_KEYS_COMMANDS
            .iter()
            .map(|c| format!("floe-seq-keys-{c}")),
    );
    let mut written: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    written.sort();
    let mut expected: Vec<String> = pages.iter().map(|p| format!("{p}.1")).collect();
    expected.sort();
    assert_eq!(written, expected);
    for page in &pages {
        let out = Command::new("man")
            .arg("-l")
            .arg(out_dir.join(format!("{page}.1")))
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0")
            .env("PAGER", "cat")
            .env("MANPAGER", "cat")
            .output()
            .expect("man (Debian's man-db; scripts/test.sh installs it)");
        let text = plain(&String::from_utf8_lossy(&out.stdout));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{page}: {err}");
        assert_eq!(err, "", "{page}: man warns");
        assert!(
            text.contains("NAME") && text.contains(page.as_str()),
            "{page}: {text}"
        );
        sections_of_a_page(page, &text);
    }
}

/// The sections floe adds to clap_mangen's: EXIT STATUS on every page, EXAMPLES on every
/// command's (their commands parse: `manpage::tests` in the binary), and an ENVIRONMENT that
/// is exactly the variables of the command's `--help` (`[env: NAME=]`), and the two read
/// besides: FLOE_SCRAMBLE_KEY where the help names it, RUST_LOG for `floe serve`. floe's own
/// page lists every command's.
fn sections_of_a_page(page: &str, text: &str) {
    let headers: Vec<&str> = text
        .lines()
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with(' ')
                && l.chars().all(|c| c.is_ascii_uppercase() || c == ' ')
        })
        .collect();
    assert!(headers.contains(&"EXIT STATUS"), "{page}: {headers:?}");
    for code in ["0", "1", "2", "69", "74", "75"] {
        let section = section(text, "EXIT STATUS");
        assert!(
            section
                .lines()
                .any(|l| l.starts_with("       ") && l.split_whitespace().next() == Some(code)),
            "{page}: exit {code} not in EXIT STATUS: {section}"
        );
    }
    let groups = ["floe-worker", "floe-seq-keys"];
    if !page.starts_with("floe-seq-keys-") && !groups.contains(&page) {
        assert!(headers.contains(&"EXAMPLES"), "{page}: {headers:?}");
    }
    let in_man: std::collections::BTreeSet<String> = section(text, "ENVIRONMENT")
        .lines()
        .filter(|l| l.starts_with("       ") && !l.starts_with("        "))
        .map(str::trim)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(String::from)
        .collect();
    let help_pages: Vec<String> = if page == "floe" {
        let mut all = vec!["floe".to_string()];
        all.extend(COMMANDS.iter().map(|c| format!("floe-{c}")));
        all.extend(WORKER_COMMANDS.iter().map(|c| format!("floe-worker-{c}")));
        all.extend(
            SEQ_KEYS_COMMANDS
                .iter()
                .map(|c| format!("floe-seq-keys-{c}")),
        );
        all
    } else {
        vec![page.to_string()]
    };
    let mut in_help = std::collections::BTreeSet::new();
    for p in &help_pages {
        let mut args: Vec<&str> = p.split('-').skip(1).collect();
        args.push("--help");
        let help = ok(run(&args));
        for part in help.split("[env: ").skip(1) {
            in_help.insert(part.split('=').next().unwrap().to_string());
        }
        if help.contains("$FLOE_SCRAMBLE_KEY") {
            in_help.insert("FLOE_SCRAMBLE_KEY".to_string());
        }
        if p == "floe-serve" {
            in_help.insert("RUST_LOG".to_string());
        }
    }
    assert_eq!(in_man, in_help, "{page}: ENVIRONMENT against --help");
    if page == "floe-serve" {
        assert!(in_man.len() > 30, "{in_man:?}");
        assert!(headers.contains(&"FILES"), "{page}: {headers:?}");
        // Joined, without man's hyphenation (`hori‐` / `zon`).
        let files = section(text, "FILES")
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ")
            .replace("\u{2010} ", "");
        for file in ["floe.toml", ".floe", "sequences.redb", "horizon-*.json"] {
            assert!(
                files.contains(file),
                "{page}: FILES without {file}: {files}"
            );
        }
    }
}

/// The text of a rendered page's section, up to the next header.
fn section<'a>(text: &'a str, header: &str) -> &'a str {
    let Some(start) = text.find(&format!("\n{header}\n")) else {
        return "";
    };
    let rest = &text[start + header.len() + 2..];
    let end = rest
        .lines()
        .scan(0, |at, l| {
            let here = *at;
            *at += l.len() + 1;
            Some((here, l))
        })
        .find(|(_, l)| !l.is_empty() && !l.starts_with(' '))
        .map_or(rest.len(), |(at, _)| at);
    &rest[..end]
}

/// Text as read: a character followed by a backspace (grotty's bold and underline) dropped.
fn plain(text: &str) -> String {
    let mut out: Vec<char> = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if chars.peek() == Some(&'\u{8}') {
            chars.next();
            continue;
        }
        out.push(c);
    }
    out.into_iter().collect()
}

#[test]
fn the_version_names_the_commit() {
    let out = ok(run(&["--version"]));
    let line = out.trim_end();
    let rest = line
        .strip_prefix(&format!("floe {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line:?}"));
    let hash = rest.strip_suffix("-dirty").unwrap_or(rest);
    // Built from a git checkout (as here): the commit git names for HEAD. Built from a
    // tarball or a container without .git: FLOE_COMMIT, else "unknown".
    match Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
    {
        Ok(git) if git.status.success() => {
            assert_eq!(hash, String::from_utf8_lossy(&git.stdout).trim(), "{line}");
        }
        _ => assert!(
            hash == "unknown" || !hash.is_empty(),
            "no git here: FLOE_COMMIT or unknown, found {line}"
        ),
    }
    // Each command says the same.
    assert_eq!(
        ok(run(&["gen", "--version"])).trim_end(),
        line.replace("floe ", "floe-gen ")
    );
}

/// Progress is for a person at a terminal: with standard error a pipe (a script, a log, this
/// test), a long run writes nothing there.
#[test]
fn progress_stays_off_a_pipe() {
    for args in [
        &["gen", "snowflake", "-n", "3000000", "--worker", "1"][..],
        &["gen", "uuid7", "-n", "3000000"],
        &["seq", "k", "-n", "300000", "--store", "memory"],
    ] {
        let started = std::time::Instant::now();
        let out = run(args);
        let took = started.elapsed();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "",
            "{args:?} ({took:?})"
        );
        assert!(!out.stdout.is_empty());
    }
}

/// The lines of a file with `\` continuations joined and comments dropped.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if current.is_empty() && (line.starts_with('#') || line.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// The Containerfile's shape: a build stage and a slim runtime stage, not root, the state
/// directory a volume, `floe serve` the entrypoint with every address inside the container,
/// the ports exposed, a health check, FLOE_COMMIT for --version. (Not built here: there is no
/// container engine.)
#[test]
fn the_containerfile_has_its_shape() {
    let text = std::fs::read_to_string(repo().join("Containerfile")).unwrap();
    let lines = instructions(&text);
    let with = |word: &str| -> Vec<&String> {
        lines
            .iter()
            .filter(|l| l.split_whitespace().next() == Some(word))
            .collect()
    };
    let stages = with("FROM");
    assert!(stages.len() >= 2, "multi-stage: {stages:?}");
    assert!(stages[0].contains(" AS build"), "{stages:?}");
    let runtime = stages.last().unwrap();
    assert!(
        runtime.contains("debian:bookworm-slim") || runtime.contains("distroless"),
        "{runtime}"
    );
    // The binary comes from the build stage.
    assert!(
        with("COPY").iter().any(|c| c.contains("--from=build")),
        "{lines:?}"
    );
    let users = with("USER");
    let user = users.last().expect("a USER");
    let name = user.split_whitespace().nth(1).unwrap();
    assert!(
        !["root", "0", "root:root", "0:0"].contains(&name) && !name.starts_with("root:"),
        "{user}"
    );
    assert!(with("VOLUME").iter().any(|v| v.contains("/var/lib/floe")));
    let entry = with("ENTRYPOINT");
    assert_eq!(entry.len(), 1);
    assert!(
        entry[0].contains("\"floe\"") || entry[0].contains("/floe\""),
        "{entry:?}"
    );
    assert!(entry[0].contains("\"serve\""), "{entry:?}");
    assert!(with("HEALTHCHECK").len() == 1, "a health check");
    assert!(with("ARG").iter().any(|a| a.contains("FLOE_COMMIT")));
    // The ENV of the runtime stage: the listeners on every address, the state in the volume;
    // and the ports exposed are the ones listened on.
    let runtime_start = lines.iter().position(|l| l == *runtime).unwrap();
    let env: Vec<(String, String)> = lines[runtime_start..]
        .iter()
        .filter(|l| l.starts_with("ENV "))
        .flat_map(|l| {
            l["ENV ".len()..]
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let get = |k: &str| {
        env.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("ENV {k} missing: {env:?}"))
    };
    let exposed: Vec<&String> = with("EXPOSE");
    for key in ["FLOE_GRPC", "FLOE_HTTP"] {
        let addr = get(key);
        let (host, port) = addr.rsplit_once(':').unwrap();
        assert_eq!(host, "0.0.0.0", "{key}");
        assert!(
            exposed.iter().any(|e| e.contains(&format!("{port}/tcp"))),
            "{key} port {port} not exposed: {exposed:?}"
        );
    }
    assert_eq!(get("FLOE_STATE_DIR"), "/var/lib/floe");
    // floe reads those variables: the configuration it would serve with says so.
    let out = cmd()
        .args(["serve", "--print-config"])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap();
    let config = ok(out);
    assert!(
        config.contains(&format!("grpc = \"{}\"", get("FLOE_GRPC"))),
        "{config}"
    );
    assert!(
        config.contains(&format!("http = \"{}\"", get("FLOE_HTTP"))),
        "{config}"
    );
    assert!(config.contains("state_dir = \"/var/lib/floe\""), "{config}");
    // The health check is a floe command floe accepts.
    let check = with("HEALTHCHECK")[0];
    assert!(
        check.contains("\"gen\", \"uuid7\", \"--server\", \"127.0.0.1:34904\""),
        "{check}"
    );
}

/// The unit with its ExecStart on the binary under test, and man pages where `Documentation=`
/// looks for them: `systemd-analyze verify` must say nothing at all (it prints unknown keys
/// and bad values as warnings and still exits 0).
#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(repo().join("packaging/floe.service")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("man");
    ok(cmd()
        .args(["man", "--out-dir"])
        .arg(man.join("man1"))
        .output()
        .unwrap());
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let args = exec
        .strip_prefix("/usr/bin/floe ")
        .unwrap_or_else(|| panic!("ExecStart runs /usr/bin/floe: {exec}"));
    let local = unit.replace(
        &format!("ExecStart={exec}"),
        &format!("ExecStart={} {args}", floe_bin().display()),
    );
    let file = dir.path().join("floe.service");
    std::fs::write(&file, &local).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&file)
        .env("MANPATH", &man)
        .output()
        .expect("systemd-analyze (Debian's systemd; scripts/test.sh installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert_eq!(said, "", "systemd-analyze verify warns");

    // The same verify does catch a bad unit (so its silence above means something).
    let bad = local.replace("Restart=on-failure", "Restart=sometimes");
    std::fs::write(&file, bad).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&file)
        .env("MANPATH", &man)
        .output()
        .unwrap();
    assert!(
        !out.stderr.is_empty() || !out.status.success(),
        "a bad Restart= went unnoticed"
    );

    // floe accepts ExecStart's arguments (%S is the state root, /var/lib).
    let state = dir.path().join("state");
    let args: Vec<String> = args
        .split_whitespace()
        .map(|a| a.replace("%S", &state.display().to_string()))
        .collect();
    let config = ok(cmd().args(&args).arg("--print-config").output().unwrap());
    assert!(
        config.contains(&format!("state_dir = \"{}/floe\"", state.display())),
        "{config}"
    );

    // What the unit promises: hardening, no restart of a bad configuration (exit 2), and a
    // stop timeout longer than floe's own shutdown timeout.
    let value = |key: &str| -> Vec<&str> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .collect()
    };
    for (key, expected) in [
        ("DynamicUser", "yes"),
        ("StateDirectory", "floe"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("NoNewPrivileges", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("CapabilityBoundingSet", ""),
        ("Restart", "on-failure"),
        ("KillSignal", "SIGTERM"),
        ("RestartPreventExitStatus", "2"),
    ] {
        assert!(
            value(key).contains(&expected),
            "{key}={expected}: {:?}",
            value(key)
        );
    }
    assert!(value("SystemCallFilter").contains(&"@system-service"));
    assert!(!value("LimitNOFILE").is_empty());
    let shutdown: u64 = ok(run(&["serve", "--print-config"]))
        .lines()
        .find_map(|l| l.strip_prefix("shutdown_timeout_secs = "))
        .unwrap()
        .parse()
        .unwrap();
    let stop: u64 = value("TimeoutStopSec")[0].parse().unwrap();
    assert!(stop > shutdown, "TimeoutStopSec {stop} <= {shutdown}");
}
