//! Every example of README.md and docs/*.md, run or checked against the `floe` under test
//! (the rules are in docs/README.md, "Examples"):
//!
//! - `sh` blocks run line by line with bash, `floe` first on the PATH, in a scratch directory
//!   per block; `floe serve` lines are checked with `--print-config`, and started for real
//!   (on free ports) when the block goes on to talk to a server; the documented addresses are
//!   rewritten to the test's servers;
//! - `toml` blocks load with `floe serve --config FILE --print-config`; `json` blocks parse;
//!   `yaml` alert rules pass `promtool check rules`; `rust` blocks are doctests (the page must
//!   be included by a `#[cfg(doctest)]` item); `text` blocks are not code;
//! - a block marked `<!-- not run: REASON -->` on the line before its fence is skipped, and
//!   counted. Any other failure fails the test naming the file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::serving::{start_on, Serve};

/// The documented default addresses, rewritten to the test's servers.
const DOC_HTTP: &str = "127.0.0.1:34903";
const DOC_GRPC: &str = "127.0.0.1:34904";
/// The documented ZooKeeper and etcd addresses, and the variables scripts/test.sh exports
/// with the test's servers (scripts/lib/services.sh).
const DOC_REGISTRIES: [(&str, &str); 2] = [
    ("127.0.0.1:2181", "FLOE_TEST_ZOOKEEPER"),
    ("127.0.0.1:2379", "FLOE_TEST_ETCD"),
];
/// How long one line of an example may run.
const LINE_LIMIT_SECS: u32 = 60;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fenced code block of a markdown file.
#[derive(Debug)]
struct Block {
    /// The file, relative to the repository (README.md, docs/run.md).
    file: String,
    /// The line of the opening fence (1-based).
    line: usize,
    /// The info string's first word (`sh`, `toml`, `rust`...), empty when none.
    lang: String,
    /// The block's lines with their line numbers, the fence's indentation removed.
    body: Vec<(usize, String)>,
    /// The reason of a `<!-- not run: REASON -->` marker just before the fence.
    not_run: Option<String>,
    /// `<!-- output of: floe serve -->` before a `text` block: lines the command prints.
    output_of: Option<String>,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    fn text(&self) -> String {
        let mut s = String::new();
        for (_, l) in &self.body {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// Every fenced block of `text` (the file `file`). A fence is three backticks, possibly
/// indented (in a list); the block ends at the next fence of the same indentation.
fn blocks_of(file: &str, text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if !trimmed.starts_with("```") {
            i += 1;
            continue;
        }
        let indent = line.len() - trimmed.len();
        let lang = trimmed[3..]
            .split([',', ' ', '{'])
            .next()
            .unwrap_or("")
            .to_string();
        // The marker: the last non-blank line before the fence.
        let before = lines[..i].iter().rev().find(|l| !l.trim().is_empty());
        let not_run = before.and_then(|l| {
            let l = l.trim();
            l.strip_prefix("<!-- not run:")
                .and_then(|r| r.strip_suffix("-->"))
                .map(|r| r.trim().to_string())
        });
        let output_of = before.and_then(|l| {
            l.trim()
                .strip_prefix("<!-- output of:")
                .and_then(|r| r.strip_suffix("-->"))
                .map(|r| r.trim().to_string())
        });
        if not_run.as_deref() == Some("") {
            return Err(format!(
                "{file}:{}: a `not run` marker without its reason",
                i + 1
            ));
        }
        let start = i;
        let mut body = Vec::new();
        i += 1;
        loop {
            let Some(l) = lines.get(i) else {
                return Err(format!(
                    "{file}:{}: a fence that is never closed",
                    start + 1
                ));
            };
            if l.trim_start().starts_with("```") && l.len() - l.trim_start().len() == indent {
                break;
            }
            let cut = l
                .char_indices()
                .take_while(|&(n, c)| n < indent && c == ' ')
                .count();
            body.push((i + 1, l[cut..].to_string()));
            i += 1;
        }
        i += 1;
        out.push(Block {
            file: file.to_string(),
            line: start + 1,
            lang,
            body,
            not_run,
            output_of,
        });
    }
    Ok(out)
}

/// README.md and every docs/*.md, in name order.
fn markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The lines of a shell block as bash reads them: continuations (`\` at the end) joined,
/// comments and blank lines dropped; each with the line number it starts on.
fn shell_lines(block: &Block) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (n, raw) in &block.body {
        let line = strip_comment(raw);
        let (start, mut joined) = pending.take().unwrap_or((*n, String::new()));
        let trimmed = if joined.is_empty() {
            line.trim_end()
        } else {
            line.trim()
        };
        if let Some(head) = trimmed.strip_suffix('\\') {
            joined.push_str(head.trim_end());
            joined.push(' ');
            pending = Some((start, joined));
            continue;
        }
        joined.push_str(trimmed);
        if !joined.trim().is_empty() {
            out.push((start, joined.trim().to_string()));
        }
    }
    if let Some((start, joined)) = pending {
        out.push((start, joined.trim().to_string()));
    }
    out
}

/// `line` without its `# comment`: a `#` that starts a word, outside quotes.
fn strip_comment(line: &str) -> String {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return line[..i].to_string(),
            _ => {}
        }
        prev = c;
    }
    line.to_string()
}

/// The words of a command line, split on whitespace (enough to see what a line runs).
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `floe serve ...` that serves (not `--print-config` or `--help`), maybe after variables
/// (`RUST_LOG=... floe serve`).
fn is_serving(line: &str) -> bool {
    let w: Vec<&str> = words(line)
        .into_iter()
        .skip_while(|w| w.contains('=') && !w.starts_with('-'))
        .collect();
    w.len() >= 2
        && w[0] == "floe"
        && w[1] == "serve"
        && !w
            .iter()
            .any(|a| matches!(*a, "--print-config" | "--help" | "-h"))
}

/// Whether a line talks to a running server.
fn talks_to_a_server(line: &str) -> bool {
    line.contains(DOC_HTTP) || line.contains(DOC_GRPC)
}

/// Everything the blocks share: the scratch directories, the servers, the tallies.
struct Run {
    bin_dir: PathBuf,
    scratch: tempfile::TempDir,
    /// A `floe serve` on its defaults, for blocks that talk to one without starting it.
    shared: Option<Serve>,
    /// A unique prefix for registry roots, so examples never meet other tests' workers.
    unique: String,
    failures: Vec<String>,
    skipped: Vec<String>,
    counted: BTreeMap<String, usize>,
}

impl Run {
    fn new() -> Run {
        let bin = floe_testkit::process::floe_bin(assert_cmd::cargo::cargo_bin("floe"));
        let scratch = tempfile::tempdir().unwrap();
        // curl fails on an HTTP error, and prints only errors besides the body.
        std::fs::write(scratch.path().join(".curlrc"), "fail\nsilent\nshow-error\n").unwrap();
        Run {
            bin_dir: bin.parent().unwrap().to_path_buf(),
            scratch,
            shared: None,
            unique: format!("docs-{}", crate::common::nanos()),
            failures: Vec::new(),
            skipped: Vec::new(),
            counted: BTreeMap::new(),
        }
    }

    fn count(&mut self, what: &str) {
        *self.counted.entry(what.to_string()).or_default() += 1;
    }

    fn fail(&mut self, at: String, why: String) {
        self.failures.push(format!("{at}: {why}"));
    }

    /// A scratch directory of its own for `block`.
    fn dir_for(&self, block: &Block) -> PathBuf {
        let dir = self.scratch.path().join(format!(
            "{}-{}",
            block.file.replace(['/', '.'], "_"),
            block.line
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `line` with the documented registries' addresses replaced by the test's servers (and a
    /// root of this run's own under them), or why it cannot run.
    fn with_registries(&self, line: &str) -> Result<String, String> {
        // In two steps, so that a test server's address that starts with the documented one
        // (127.0.0.1:21810) is not rewritten again.
        let mut line = line.to_string();
        let mut found = Vec::new();
        for (i, (doc, var)) in DOC_REGISTRIES.iter().enumerate() {
            if line.contains(doc) {
                let addr = std::env::var(var).map_err(|_| {
                    format!(
                        "the example needs {var}: run it under scripts/test.sh, or start the \
                         server with scripts/lib/services.sh and export {var}"
                    )
                })?;
                let mark = format!("\u{0}{i}\u{0}");
                line = line.replace(&format!("{doc}/"), &format!("{mark}/{}/", self.unique));
                line = line.replace(doc, &mark);
                found.push((mark, addr));
            }
        }
        for (mark, addr) in found {
            line = line.replace(&mark, &addr);
        }
        Ok(line)
    }

    /// Runs `line` with bash in `dir`, `floe` first on the PATH; its output, or why it failed.
    fn bash(&self, dir: &Path, line: &str) -> Result<String, String> {
        let path = format!(
            "{}:{}",
            self.bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("timeout")
            .arg(LINE_LIMIT_SECS.to_string())
            .args(["bash", "-o", "pipefail", "-c", line])
            .current_dir(dir)
            .env("PATH", path)
            .env("CURL_HOME", self.scratch.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("bash and coreutils' timeout");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() {
            Ok(stdout)
        } else {
            let code = out.status.code();
            Err(format!(
                "`{line}` failed ({}): {}{}",
                match code {
                    Some(124) => format!("still running after {LINE_LIMIT_SECS} s"),
                    Some(c) => format!("exit {c}"),
                    None => "killed".to_string(),
                },
                String::from_utf8_lossy(&out.stderr).trim(),
                if stdout.is_empty() {
                    String::new()
                } else {
                    format!("\nstandard output: {}", stdout.trim())
                }
            ))
        }
    }

    /// The shared server's addresses, started on first use.
    fn shared(&mut self) -> (String, String) {
        let server = self
            .shared
            .get_or_insert_with(|| start_on("127.0.0.1:0", "127.0.0.1:0", &[]));
        (server.grpc.clone(), server.http.clone())
    }

    fn shell(&mut self, block: &Block) {
        let lines = shell_lines(block);
        let dir = self.dir_for(block);
        let needs_server = lines.iter().any(|(_, l)| talks_to_a_server(l));
        let mut own: Option<Serve> = None;
        for (n, line) in lines {
            let at = format!("{}:{n}", block.file);
            // `cargo run ... -p floe-cli --` is the floe under test.
            let line = line
                .replace("cargo run --release -p floe-cli -- ", "floe ")
                .replace("cargo run -p floe-cli -- ", "floe ");
            // The state directory of the packaging (/var/lib/floe) is the block's own.
            let line = line.replace("/var/lib/floe", &format!("{}/var/lib/floe", dir.display()));
            let line = match self.with_registries(&line) {
                Ok(l) => l,
                Err(why) => {
                    self.fail(at, why);
                    return;
                }
            };
            if is_serving(&line) {
                let line = line.trim_end_matches('&').trim().to_string();
                // The flags and the configuration are accepted...
                let check = format!("{line} --print-config");
                if let Err(why) = self.bash(&dir, &check) {
                    self.fail(at, why);
                    return;
                }
                // ...and it serves, when the block goes on to talk to it.
                if needs_server && own.is_none() {
                    match start_documented(&dir, &self.bin_dir, &line) {
                        Ok(server) => own = Some(server),
                        Err(why) => {
                            self.fail(at, why);
                            return;
                        }
                    }
                }
                continue;
            }
            let line = if talks_to_a_server(&line) {
                let (grpc, http) = match &own {
                    Some(s) => (s.grpc.clone(), s.http.clone()),
                    None => self.shared(),
                };
                line.replace(DOC_HTTP, &http).replace(DOC_GRPC, &grpc)
            } else {
                line
            };
            if let Err(why) = self.bash(&dir, &line) {
                self.fail(at, why);
                return;
            }
        }
    }

    /// A block of what `floe serve` prints on standard error (`<!-- output of: floe serve -->`):
    /// each line is one the shared server printed, its time aside, with the documented
    /// addresses for the server's, and `(...)` standing for any text.
    fn output(&mut self, block: &Block) {
        if block.output_of.as_deref() != Some("floe serve") {
            self.fail(
                block.at(),
                "only `<!-- output of: floe serve -->` is checked: mark it `not run`".into(),
            );
            return;
        }
        let (grpc, http) = self.shared();
        let server = self.shared.as_ref().unwrap();
        // The start-up line comes on standard error just after the one on standard output.
        let started = std::time::Instant::now();
        while !server.log().iter().any(|l| l.contains("floe started: ")) {
            if started.elapsed() > std::time::Duration::from_secs(10) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let log: Vec<String> = self
            .shared
            .as_ref()
            .unwrap()
            .log()
            .iter()
            .map(|l| l.replace(&grpc, DOC_GRPC).replace(&http, DOC_HTTP))
            .collect();
        for (n, line) in &block.body {
            // `2026-11-28T09:39:36.244962Z  INFO ...`: the time is the run's.
            let doc = line.split_once(' ').map_or(line.as_str(), |(_, rest)| rest);
            let parts: Vec<&str> = doc.split("(...)").collect();
            let matches = |real: &String| {
                let real = real.split_once(' ').map_or(real.as_str(), |(_, rest)| rest);
                let (first, last) = (parts[0], parts[parts.len() - 1]);
                if parts.len() == 1 {
                    return real == first;
                }
                if !real.starts_with(first) || !real.ends_with(last) {
                    return false;
                }
                // The middle parts in order, between the first and the last.
                let end = real.len() - last.len();
                let mut at = first.len();
                for part in &parts[1..parts.len() - 1] {
                    match real.get(at..end).and_then(|r| r.find(part)) {
                        Some(f) => at += f + part.len(),
                        None => return false,
                    }
                }
                at <= end
            };
            if !log.iter().any(matches) {
                self.fail(
                    format!("{}:{n}", block.file),
                    format!(
                        "`floe serve` printed no such line; it printed:\n{}",
                        log.join("\n")
                    ),
                );
            }
        }
    }

    fn toml(&mut self, block: &Block) {
        let dir = self.dir_for(block);
        let file = dir.join("example.toml");
        std::fs::write(&file, block.text()).unwrap();
        let line = format!("floe serve --config {} --print-config", file.display());
        if let Err(why) = self.bash(&dir, &line) {
            self.fail(block.at(), why);
        }
    }

    fn json(&mut self, block: &Block) {
        if let Err(e) = serde_json::from_str::<serde_json::Value>(&block.text()) {
            self.fail(block.at(), format!("not JSON: {e}"));
        }
    }

    /// Alert rules (a list of rules, or whole groups): `promtool check rules`.
    fn yaml(&mut self, block: &Block) {
        let text = block.text();
        let rules = if text.trim_start().starts_with("groups:") {
            text
        } else {
            let mut rules = String::from("groups:\n- name: docs\n  rules:\n");
            for line in text.lines() {
                rules.push_str(&format!("  {line}\n"));
            }
            rules
        };
        let dir = self.dir_for(block);
        std::fs::write(dir.join("rules.yml"), rules).unwrap();
        let out = Command::new("promtool")
            .args(["check", "rules", "rules.yml"])
            .current_dir(&dir)
            .output()
            .expect("promtool (Debian: prometheus) is installed by scripts/test.sh");
        if !out.status.success() {
            self.fail(
                block.at(),
                format!(
                    "promtool check rules: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            );
        }
    }

    /// A page with Rust blocks must be compiled as doctests: some crate's
    /// `#[doc = include_str!(".../FILE")]`.
    fn rust(&mut self, block: &Block, doctested: &[String]) {
        if !doctested.contains(&block.file) {
            self.fail(
                block.at(),
                format!(
                    "a rust block of a page no crate includes as doctests (add \
                     `#[cfg(doctest)] #[doc = include_str!(\"../../../{}\")]` to a crate, \
                     or mark the block `<!-- not run: REASON -->`)",
                    block.file
                ),
            );
        }
    }
}

/// Starts the documented `floe serve` line with bash, in `dir`, its listeners moved to free
/// ports: the documented ones (`HOST:34903`/`HOST:34904`) become `127.0.0.1:0`, and
/// `--grpc`/`--http` are added when the line has none.
fn start_documented(dir: &Path, bin_dir: &Path, line: &str) -> Result<Serve, String> {
    let mut line = line.to_string();
    for host in ["127.0.0.1", "0.0.0.0", "localhost"] {
        for port in ["34903", "34904"] {
            line = line.replace(&format!("{host}:{port}"), "127.0.0.1:0");
        }
    }
    for flag in ["--grpc", "--http"] {
        if !line.contains(flag) {
            line.push_str(&format!(" {flag} 127.0.0.1:0"));
        }
    }
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .args(["-c", &format!("exec {line}")])
        .current_dir(dir)
        .env("PATH", path);
    let mut server = Serve::spawn(command);
    server
        .wait_serving(floe_testkit::process::START_WITHIN)
        .map(|()| server)
        .map_err(|e| format!("`{line}`: {e}"))
}

/// The pages some crate compiles as doctests (`#[doc = include_str!("../../../docs/X.md")]`).
fn doctested_pages() -> Vec<String> {
    let mut pages = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src/lib.rs");
        let Ok(text) = std::fs::read_to_string(&src) else {
            continue;
        };
        let mut after_doctest = false;
        for line in text.lines() {
            let line = line.trim();
            if line == "#[cfg(doctest)]" {
                after_doctest = true;
                continue;
            }
            if after_doctest {
                if let Some(path) = line
                    .strip_prefix("#[doc = include_str!(\"")
                    .and_then(|r| r.strip_suffix("\")]"))
                {
                    pages.push(path.trim_start_matches("../").to_string());
                    continue;
                }
            }
            after_doctest = false;
        }
    }
    pages
}

/// Every fenced block of README.md and docs/*.md runs or is checked, or is marked as not run
/// with its reason; the counts are printed (`--nocapture`).
#[test]
fn every_example_in_the_docs_runs() {
    let doctested = doctested_pages();
    let mut run = Run::new();
    let mut all = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        match blocks_of(&file, &text) {
            Ok(blocks) => all.extend(blocks),
            Err(e) => run.failures.push(e),
        }
    }
    for block in &all {
        if let Some(reason) = &block.not_run {
            run.skipped
                .push(format!("{} ({}): {reason}", block.at(), block.lang));
            continue;
        }
        match block.lang.as_str() {
            "sh" | "bash" | "shell" => run.shell(block),
            "toml" => run.toml(block),
            "json" => run.json(block),
            "yaml" | "yml" => run.yaml(block),
            "rust" => run.rust(block, &doctested),
            "text" if block.output_of.is_some() => run.output(block),
            "text" => {}
            other => run.fail(
                block.at(),
                format!(
                    "a block of language {other:?}, which this test cannot check: give it one \
                     of sh, toml, json, yaml, rust, text, or mark it `<!-- not run: REASON -->`"
                ),
            ),
        }
        run.count(if block.lang.is_empty() {
            "(none)"
        } else {
            &block.lang
        });
    }
    eprintln!(
        "docs examples: {} blocks in {} files; checked by language: {:?}; not run: {}",
        all.len(),
        markdown_files().len(),
        run.counted,
        run.skipped.len()
    );
    for s in &run.skipped {
        eprintln!("  not run: {s}");
    }
    assert!(
        run.failures.is_empty(),
        "{} example(s) of the docs failed:\n{}",
        run.failures.len(),
        run.failures.join("\n\n")
    );
}

/// The block reader: fences (indented too), markers, continuations and comments.
#[test]
fn the_block_reader_sees_fences_markers_and_comments() {
    let md = "text\n<!-- not run: needs a cluster -->\n\n```sh\nkubectl apply\n```\n\n  ```sh\n  floe gen sno \\\n    -n 2   # two\n  echo '#not a comment'\n  ```\n";
    let blocks = blocks_of("x.md", md).unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].not_run.as_deref(), Some("needs a cluster"));
    assert_eq!(blocks[0].line, 4);
    assert_eq!(blocks[1].not_run, None);
    assert_eq!(
        shell_lines(&blocks[1]),
        vec![
            (9, "floe gen sno -n 2".to_string()),
            (11, "echo '#not a comment'".to_string())
        ]
    );
    assert!(blocks_of("x.md", "<!-- not run: -->\n```sh\nx\n```\n").is_err());
    assert!(blocks_of("x.md", "```sh\nx\n").is_err());
    assert!(is_serving("floe serve --store a=memory"));
    assert!(!is_serving("floe serve --print-config"));
    assert!(is_serving("RUST_LOG=warn floe serve"));
}

/// The `RUST_LOG` docs/operate.md advises for a line per request adds those lines and keeps
/// the start-up line (`RUST_LOG=floe_server=debug` alone once hid it).
#[test]
fn the_documented_rust_log_keeps_the_start_up_line() {
    let text = std::fs::read_to_string(root().join("docs/operate.md")).unwrap();
    let filter = text
        .lines()
        .find_map(|l| l.strip_prefix("RUST_LOG=")?.strip_suffix(" floe serve"))
        .expect("docs/operate.md shows `RUST_LOG=... floe serve`");
    let server =
        crate::serving::start_with_env("127.0.0.1:0", "127.0.0.1:0", &[], &[("RUST_LOG", filter)]);
    let (status, _) = crate::serving::http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(status, 200);
    // The request's line is written after the answer: wait for it (at most 10 s).
    let started = std::time::Instant::now();
    while !server.log().iter().any(|l| l.contains("DEBUG request")) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "no request line with RUST_LOG={filter}: {:?}",
            server.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let log = server.log();
    assert!(
        log.iter().any(|l| l.contains("INFO floe started: ")),
        "RUST_LOG={filter} hides the start-up line: {log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("INFO snowflake default: worker ")),
        "{log:?}"
    );
}
