//! deploy/kubernetes: every overlay rendered by a real kustomize (Debian's kubectl, 1.20:
//! the oldest kustomize the files keep to), validated offline against Kubernetes' own schemas
//! (`kubernetes-validate --strict`, from PyPI), and held to what floe needs: the ports, probes
//! and state directory of the floe.toml the overlay ships, a grace period above floe's
//! shutdown, a ServiceMonitor that selects the Service's metrics port. The floe.toml of every
//! overlay is read by the real `floe serve --print-config`; those that need no other server
//! (single, ordinal) are started from it. scripts/lib/platform.sh installs both tools and sets
//! FLOE_TEST_KUBECTL and FLOE_TEST_KUBERNETES_VALIDATE.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::serving::{self, http};

/// The Kubernetes version validated against (one kubernetes-validate bundles).
const KUBERNETES: &str = "1.30.0";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tool named by the variable scripts/lib/platform.sh sets, else found on the PATH; a
/// missing one fails the test.
fn tool(var: &str, name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!("{name} not found: scripts/lib/platform.sh installs it and sets {var}")
        })
}

fn run_tool(mut command: Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every overlay's directory.
fn overlays() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/kubernetes/overlays"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("kustomization.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// An overlay rendered by kustomize: its YAML, and its objects as JSON (PyYAML, from
/// kubernetes-validate's own environment).
fn render(overlay: &Path) -> (String, Vec<Value>) {
    let mut kustomize = Command::new(tool("FLOE_TEST_KUBECTL", "kubectl"));
    kustomize.arg("kustomize").arg(overlay);
    let yaml = run_tool(kustomize);
    let validate = tool("FLOE_TEST_KUBERNETES_VALIDATE", "kubernetes-validate");
    let python = validate.with_file_name("python3");
    let mut child = Command::new(&python)
        .args([
            "-c",
            "import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    (yaml, serde_json::from_slice(&out.stdout).unwrap())
}

/// The one object of `kind` named `name` (a generated ConfigMap: `name` and kustomize's hash).
fn the<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let named = |n: &str| {
        n == name
            || (kind == "ConfigMap"
                && n.strip_prefix(name)
                    .and_then(|h| h.strip_prefix('-'))
                    .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric())))
    };
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == kind && o["metadata"]["name"].as_str().is_some_and(named))
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {name}: {found:?}");
    found[0]
}

/// The floe.toml an overlay's ConfigMap holds, written to `dir`.
fn floe_toml(objects: &[Value], dir: &Path) -> (PathBuf, toml::Table) {
    let text = the(objects, "ConfigMap", "floe-config")["data"]["floe.toml"]
        .as_str()
        .unwrap()
        .to_string();
    let path = dir.join("floe.toml");
    std::fs::write(&path, &text).unwrap();
    (path, text.parse().unwrap())
}

fn port_of(addr: &str) -> u64 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn every_overlay_renders_and_validates_against_the_kubernetes_schemas() {
    let overlays = overlays();
    let names: Vec<String> = overlays
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["etcd", "ordinal", "single", "zookeeper"]);
    for overlay in &overlays {
        let dir = tempfile::tempdir().unwrap();
        let (yaml, objects) = render(overlay);
        let rendered = dir.path().join("rendered.yaml");
        std::fs::write(&rendered, yaml).unwrap();
        let mut validate =
            Command::new(tool("FLOE_TEST_KUBERNETES_VALIDATE", "kubernetes-validate"));
        validate.args(["--strict", "-k", KUBERNETES]).arg(&rendered);
        let report = run_tool(validate);
        // Each object of Kubernetes' own API passed its schema; the ServiceMonitor (a CRD of
        // the Prometheus Operator, no schema bundled) is the only one skipped, and is checked
        // against the Service below instead.
        let mut kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                "ConfigMap",
                "PodDisruptionBudget",
                "Service",
                "Service",
                "ServiceMonitor",
                "StatefulSet"
            ],
            "{}",
            overlay.display()
        );
        let passed = report
            .lines()
            .filter(|l| l.starts_with("INFO ") && l.contains(" passed "))
            .count();
        assert_eq!(passed, 5, "{}: {report}", overlay.display());
        let other: Vec<&str> = report.lines().filter(|l| !l.starts_with("INFO ")).collect();
        assert_eq!(other.len(), 1, "{}: {report}", overlay.display());
        assert!(
            other[0].starts_with("WARN ")
                && other[0].contains("ServiceMonitor with api version monitoring.coreos.com/v1"),
            "{}: {report}",
            overlay.display()
        );
        agrees_with_floe(overlay, &objects, dir.path());
    }
}

/// The objects hold together and with the floe.toml they ship.
fn agrees_with_floe(overlay: &Path, objects: &[Value], dir: &Path) {
    let at = overlay.display();
    let (config, toml) = floe_toml(objects, dir);
    // The real parser: the file starts (as far as its configuration goes) on floe itself.
    let printed = common::ok(
        common::cmd()
            .args(["serve", "--print-config", "--config"])
            .arg(&config)
            .env("FLOE_HOST", "floe-1")
            .output()
            .unwrap(),
    );
    let effective: toml::Table = printed.parse().unwrap();
    let listen = &effective["listen"];
    let grpc = port_of(listen["grpc"].as_str().unwrap());
    let http_port = port_of(listen["http"].as_str().unwrap());
    let state_dir = effective["state_dir"].as_str().unwrap();
    assert_eq!(state_dir, toml["state_dir"].as_str().unwrap(), "{at}");
    let limits = &effective["limits"];
    let shutdown = limits["shutdown_delay_secs"].as_integer().unwrap()
        + limits["shutdown_timeout_secs"].as_integer().unwrap();
    // The identity: a fixed port, the host from the pod's name.
    assert_eq!(
        effective["registry"]["port"].as_integer(),
        Some(grpc as i64),
        "{at}"
    );

    let set = the(objects, "StatefulSet", "floe");
    let pod = &set["spec"]["template"]["spec"];
    assert!(
        pod["terminationGracePeriodSeconds"].as_i64().unwrap() > shutdown,
        "{at}: the grace period must outlast floe's shutdown ({shutdown} s)"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{at}");
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{at}");
    assert_eq!(
        c["securityContext"]["allowPrivilegeEscalation"], false,
        "{at}"
    );
    let env = |name: &str| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{at}: no {name}"))
            .clone()
    };
    assert_eq!(
        env("FLOE_HOST")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    let config_path = env("FLOE_CONFIG")["value"].as_str().unwrap().to_string();
    let port_named = |name: &str| {
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{at}: no port {name}"))["containerPort"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        (port_named("grpc"), port_named("http")),
        (grpc, http_port),
        "{at}"
    );
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{at}: {probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "http", "{at}: {probe}");
    }
    // The config file where FLOE_CONFIG says, from the generated ConfigMap; the state
    // directory on the claim template's volume.
    let mounts = c["volumeMounts"].as_array().unwrap();
    let mount = |path: &str| {
        mounts
            .iter()
            .find(|m| Path::new(path).starts_with(m["mountPath"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{at}: nothing mounted at {path}"))["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let config_volume = mount(&config_path);
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == config_volume.as_str())
        .unwrap();
    let config_map = the(objects, "ConfigMap", "floe-config");
    assert_eq!(
        volume["configMap"]["name"], config_map["metadata"]["name"],
        "{at}"
    );
    assert!(config_path.ends_with("/floe.toml"), "{at}");
    let claims = set["spec"]["volumeClaimTemplates"].as_array().unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(
        mount(state_dir),
        claims[0]["metadata"]["name"].as_str().unwrap(),
        "{at}"
    );

    // The Services reach the pods' ports; the headless one is the StatefulSet's.
    let labels = &pod_labels(set);
    for name in ["floe", "floe-headless"] {
        let service = the(objects, "Service", name);
        assert!(
            selects(&service["spec"]["selector"], labels),
            "{at}: {name}"
        );
        for p in service["spec"]["ports"].as_array().unwrap() {
            port_named(p["targetPort"].as_str().unwrap());
        }
    }
    let headless = the(objects, "Service", "floe-headless");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(
        set["spec"]["serviceName"], headless["metadata"]["name"],
        "{at}"
    );
    let pdb = the(objects, "PodDisruptionBudget", "floe");
    assert!(
        selects(&pdb["spec"]["selector"]["matchLabels"], labels),
        "{at}"
    );
    // The ServiceMonitor scrapes /metrics on a port of the client Service it selects, and of no
    // other Service (the headless one too would scrape each pod twice: alerts fire twice).
    let monitor = the(objects, "ServiceMonitor", "floe");
    let service = the(objects, "Service", "floe");
    let selected: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Service")
        .filter(|o| {
            selects(
                &monitor["spec"]["selector"]["matchLabels"],
                &o["metadata"]["labels"],
            )
        })
        .map(|o| o["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        selected,
        ["floe"],
        "{at}: the Services the ServiceMonitor selects"
    );
    for e in monitor["spec"]["endpoints"].as_array().unwrap() {
        assert_eq!(e["path"], "/metrics", "{at}");
        let port = e["port"].as_str().unwrap();
        let target = service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == port)
            .unwrap_or_else(|| panic!("{at}: the ServiceMonitor's port {port}"));
        assert_eq!(
            port_named(target["targetPort"].as_str().unwrap()),
            http_port,
            "{at}"
        );
    }
}

fn pod_labels(set: &Value) -> Value {
    let labels = set["spec"]["template"]["metadata"]["labels"].clone();
    assert!(selects(&set["spec"]["selector"]["matchLabels"], &labels));
    labels
}

/// Whether a selector's labels are all among `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().unwrap();
    !selector.is_empty() && selector.iter().all(|(k, v)| &labels[k] == v)
}

/// The overlays that need no other server start from their own floe.toml (listening on
/// loopback ports and a state directory of the test's, the rest as shipped), as pod
/// `floe-2`: ready, and, with the ordinal, serving worker 2's IDs and its sequences.
#[test]
fn the_single_and_ordinal_overlays_serve_from_their_floe_toml() {
    for name in ["single", "ordinal"] {
        let dir = tempfile::tempdir().unwrap();
        let (_, objects) = render(&repo().join("deploy/kubernetes/overlays").join(name));
        let (config, _) = floe_toml(&objects, dir.path());
        let state = dir.path().join("state");
        let config = config.display().to_string();
        let state = state.display().to_string();
        let server = serving::start_with_env(
            "127.0.0.1:0",
            "127.0.0.1:0",
            &["--config", &config, "--state-dir", &state],
            &[("FLOE_HOST", "floe-2")],
        );
        let (code, body) = http(&server.http, "GET", "/readyz").unwrap();
        assert_eq!((code, body.trim()), (200, "ready"), "{name}");
        let (code, body) = http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
        assert_eq!(code, 200, "{name}: {body}");
        let worker = crate::platform::worker_of(&body);
        if name == "ordinal" {
            assert_eq!(worker, 2, "{name}");
        }
        let (code, body) = http(&server.http, "GET", "/v1/sequencer/default/orders").unwrap();
        assert_eq!(code, 200, "{name}: {body}");
        server.term();
        let (status, err, _) = server.wait(Duration::from_secs(30));
        assert!(status.success(), "{name}: {err}");
    }
}
