//! The container image, built and run for real: packaging/image.sh builds it with buildah
//! from no base image (this machine pulls nothing from docker.io), podman runs it. Its
//! configuration agrees with the Containerfile's runtime stage (which needs docker.io's
//! images and is not built here); it prints its version, generates, serves on a published
//! port, answers its own HEALTHCHECK, and stops cleanly on SIGTERM. Storage is vfs in a
//! throw-away directory; the runtime is runc with the limits lowered, so that it runs where
//! the kernel mounts cgroups in hybrid mode and root lacks CAP_SYS_RESOURCE (a VM such as
//! this one: crun refuses both). scripts/lib/platform.sh installs buildah, podman and runc.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use crate::serving::http;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tool on the PATH; a missing one fails the test.
fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{name} not found: scripts/lib/platform.sh installs it"))
}

/// podman on the test's own storage.
struct Podman {
    storage: Vec<String>,
}

impl Podman {
    fn cmd(&self) -> Command {
        let mut c = Command::new(tool("podman"));
        c.args(&self.storage).args(["--runtime", "runc"]);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// A container that is removed (stopped first, at once, with its volumes) however the test
/// ends: a panic must not leave a server running, nor its published port forwarded.
struct Container<'a> {
    podman: &'a Podman,
    id: String,
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self
            .podman
            .run(&["rm", "--force", "--time", "0", "--volumes", &self.id]);
    }
}

/// The runtime stage's instructions of the Containerfile, `\` continuations joined.
fn runtime_stage() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("Containerfile")).unwrap();
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if current.is_empty() && (line.starts_with('#') || line.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(&format!("{part} ")),
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    lines[last_from..]
        .iter()
        .map(|l| {
            let (word, rest) = l.split_once(' ').unwrap();
            (word.to_string(), rest.trim().to_string())
        })
        .collect()
}

/// `KEY=VALUE` pairs of ENV and LABEL lines (values quoted or not, none with `=` inside a
/// quoted space).
fn pairs(rest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = rest.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"').unwrap();
                (&quoted[..end], &quoted[end + 1..])
            }
            None => after.split_at(after.find(' ').unwrap_or(after.len())),
        };
        out.push((key.trim().to_string(), value.to_string()));
        rest = next.trim();
    }
    out
}

#[test]
fn the_image_builds_from_no_base_agrees_with_the_containerfile_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let storage = vec![
        "--storage-driver".to_string(),
        "vfs".into(),
        "--root".into(),
        dir.path().join("root").display().to_string(),
        "--runroot".into(),
        dir.path().join("runroot").display().to_string(),
    ];
    // The binary under test, without its debug information (vfs copies every layer whole).
    let floe = common::cmd().get_program().to_owned();
    let binary = dir.path().join("floe");
    let strip = Command::new(tool("strip"))
        .arg("-o")
        .arg(&binary)
        .arg(&floe)
        .status()
        .unwrap();
    assert!(strip.success());
    let image = format!("localhost/floe-test:{}", common::nanos());
    let built = Command::new(repo().join("packaging/image.sh"))
        .arg(&binary)
        .arg(&image)
        .env("BUILDAH_OPTS", storage.join(" "))
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "packaging/image.sh: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let podman = Podman { storage };

    // The configuration, as the Containerfile's runtime stage has it.
    let inspected: Value = serde_json::from_str(&podman.ok(&["image", "inspect", &image])).unwrap();
    let config = &inspected[0]["Config"];
    let stage = runtime_stage();
    let all = |word: &str| -> Vec<&String> {
        stage
            .iter()
            .filter(|(w, _)| w == word)
            .map(|(_, r)| r)
            .collect()
    };
    let one = |word: &str| -> &String {
        let found = all(word);
        assert_eq!(
            found.len(),
            1,
            "one {word} in the Containerfile's runtime stage"
        );
        found[0]
    };
    let env: Vec<String> = all("ENV")
        .iter()
        .flat_map(|r| pairs(r))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let image_env: Vec<String> = config["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .filter(|v| v.starts_with("FLOE_"))
        .collect();
    assert_eq!(image_env, env);
    let mut exposed: Vec<String> = one("EXPOSE").split_whitespace().map(String::from).collect();
    exposed.sort();
    let mut ports: Vec<String> = config["ExposedPorts"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    ports.sort();
    assert_eq!(ports, exposed);
    let json = |text: &str| -> Value { serde_json::from_str(text).unwrap() };
    assert_eq!(config["Entrypoint"], json(one("ENTRYPOINT")));
    assert_eq!(
        config["Cmd"].as_array().map_or(0, Vec::len),
        json(one("CMD")).as_array().unwrap().len()
    );
    assert_eq!(config["WorkingDir"].as_str().unwrap(), one("WORKDIR"));
    assert_eq!(config["StopSignal"].as_str().unwrap(), one("STOPSIGNAL"));
    assert!(config["Volumes"].get(one("VOLUME")).is_some(), "{config}");
    // USER floe:floe there, the same uid and gid (10001) here.
    assert_eq!(one("USER"), "floe:floe");
    let created = all("RUN")
        .iter()
        .any(|r| r.contains("--gid 10001") && r.contains("--uid 10001"));
    assert!(created, "the Containerfile's floe user is 10001:10001");
    assert_eq!(config["User"], "10001:10001");
    let check = one("HEALTHCHECK");
    let (options, cmd) = check.split_once("CMD ").unwrap();
    let mut test = vec![Value::from("CMD")];
    test.extend(json(cmd).as_array().unwrap().iter().cloned());
    let health = &inspected[0]["Healthcheck"];
    assert_eq!(health["Test"], Value::from(test), "{health}");
    for (option, field, nanos) in [
        ("--interval=30s", "Interval", 30_000_000_000u64),
        ("--timeout=5s", "Timeout", 5_000_000_000),
        ("--start-period=10s", "StartPeriod", 10_000_000_000),
    ] {
        assert!(options.contains(option), "{check}");
        assert_eq!(health[field].as_u64(), Some(nanos), "{health}");
    }
    assert!(
        options.contains("--retries=3") && health["Retries"] == 3,
        "{health}"
    );
    let labels = &config["Labels"];
    for (key, value) in all("LABEL").iter().flat_map(|r| pairs(r)) {
        if key == "org.opencontainers.image.revision" {
            assert!(
                labels[&key].as_str().is_some_and(|c| !c.is_empty()),
                "{labels}"
            );
        } else {
            assert_eq!(
                labels[&key].as_str(),
                Some(value.as_str()),
                "{key}: {labels}"
            );
        }
    }

    // It runs: the version of the binary it was built from, and a UUIDv7.
    let limits = [
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
    ];
    let in_image = |args: &[&str]| -> String {
        let mut all = vec!["run", "--rm", "--network", "none", "--no-healthcheck"];
        all.extend(limits);
        all.extend(["--entrypoint", "/usr/local/bin/floe", &image]);
        all.extend(args);
        podman.ok(&all).trim().to_string()
    };
    let version = common::ok(Command::new(&floe).arg("--version").output().unwrap());
    assert_eq!(in_image(&["--version"]), version.trim());
    let uuid = in_image(&["gen", "uuid7"]);
    assert!(
        uuid.len() == 36 && uuid.as_bytes()[14] == b'7',
        "a UUIDv7: {uuid}"
    );

    // It serves: `floe serve` on the image's defaults, HTTP published on a loopback port, with
    // a read-only root filesystem and no tmpfs (as deploy/kubernetes runs it): only the volume
    // is written.
    let port = floe_testkit::free_port();
    let publish = format!("127.0.0.1:{port}:34903");
    let mut args = vec![
        "run",
        "-d",
        "--read-only",
        "--read-only-tmpfs=false",
        "-p",
        &publish,
    ];
    args.extend(limits);
    args.push(&image);
    let guard = Container {
        podman: &podman,
        id: podman.ok(&args).trim().to_string(),
    };
    let container = guard.id.clone();
    let addr = format!("127.0.0.1:{port}");
    let started = Instant::now();
    loop {
        match http(&addr, "GET", "/readyz") {
            Ok((200, _)) => break,
            other => {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "not ready after 30 s: {other:?}: {}",
                    podman.ok(&["logs", &container])
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let (code, body) = http(&addr, "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(code, 200, "{body}");
    // The image's own HEALTHCHECK, run by podman inside the container.
    let health = podman.run(&["healthcheck", "run", &container]);
    assert!(
        health.status.success(),
        "{}{}",
        String::from_utf8_lossy(&health.stdout),
        String::from_utf8_lossy(&health.stderr)
    );
    // As user floe (the image's /etc/passwd), uid 10001: the state it wrote in its volume
    // is that uid's.
    let top = podman.ok(&["top", &container, "user", "comm"]);
    assert!(
        top.lines()
            .any(|l| l.split_whitespace().eq(["floe", "floe"])),
        "{top}"
    );
    let mounts: Value =
        serde_json::from_str(&podman.ok(&["inspect", "--format", "{{json .Mounts}}", &container]))
            .unwrap();
    let volume = mounts
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Destination"] == "/var/lib/floe")
        .unwrap_or_else(|| panic!("no volume at /var/lib/floe: {mounts}"));
    let source = PathBuf::from(volume["Source"].as_str().unwrap());
    let owners: Vec<u32> = std::fs::read_dir(&source)
        .unwrap()
        .map(|e| {
            use std::os::unix::fs::MetadataExt;
            e.unwrap().metadata().unwrap().uid()
        })
        .collect();
    assert!(!owners.is_empty(), "nothing in {}", source.display());
    assert!(owners.iter().all(|&uid| uid == 10001), "{owners:?}");
    // SIGTERM (its STOPSIGNAL): a clean stop, exit 0.
    podman.ok(&["stop", "--time", "20", &container]);
    let code = podman.ok(&["inspect", "--format", "{{.State.ExitCode}}", &container]);
    let logs = podman.ok(&["logs", &container]);
    assert_eq!(code.trim(), "0", "{logs}");
    assert!(
        logs.contains("floe serving grpc=0.0.0.0:34904 http=0.0.0.0:34903"),
        "{logs}"
    );
    drop(guard);
    podman.ok(&["rmi", &image]);
}
