//! `floe man`: clap_mangen's sections (name, synopsis, description, options, commands,
//! version) with floe's own after them: EXAMPLES, ENVIRONMENT (every `FLOE_*` variable of the
//! command's flags, from clap's `env =`, and the few read besides), FILES and EXIT STATUS.

use std::io::{self, Write};

use clap_mangen::roff::{bold, italic, roman, Roff};

use crate::failure::EXIT_CODES;

/// Variables floe reads that are no flag's `env =`: (name, the pages that read it, what).
pub(crate) const OTHER_VARIABLES: &[(&str, &[&str], &str)] = &[
    (
        "FLOE_SCRAMBLE_KEY",
        &[
            "floe-serve",
            "floe-scramble",
            "floe-unscramble",
            "floe-gen",
            "floe-seq",
        ],
        "The scramble keys when no key file is given: the text of a key file (`ID:HEX` lines, \
         or commas between entries). Never printed or logged.",
    ),
    (
        "RUST_LOG",
        &["floe-serve"],
        "The log filter (tracing's EnvFilter). The default is warn, and info for the floe, \
         floe_server, floe_registry and floe_sequencer targets; a RUST_LOG replaces it whole. \
         For a line per request that keeps the start-up line, give warn, info for floe, \
         floe_registry and floe_sequencer, and debug for floe_server (docs/operate.md shows \
         the filter). A filter floe cannot parse exits 2.",
    ),
];

/// The EXAMPLES of each page, by file name without `.1`: (command line, what it does). Each
/// command parses with floe's own CLI (tested below).
pub(crate) fn examples(page: &str) -> &'static [(&'static str, &'static str)] {
    match page {
        "floe" => &[
            ("floe serve", "Serve every ID kind and per-key sequences on 127.0.0.1:34904 (gRPC) and 127.0.0.1:34903 (HTTP), from the state directory .floe."),
            ("floe gen snowflake -n 3", "Three Snowflake IDs (the leaf layout) on standard output, no server involved."),
            ("floe gen snowflake --server 127.0.0.1:34904", "A Snowflake ID from a running floe serve."),
            ("floe inspect 515264788402536448", "The time, worker and sequence of an ID."),
            ("floe seq orders -n 5 --increment strong", "Five IDs of the key orders from the embedded store."),
            ("floe man --out-dir /usr/share/man/man1", "Write every manual page."),
        ],
        "floe-gen" => &[
            ("floe gen snowflake", "One Snowflake ID in the leaf layout (decimal)."),
            ("floe gen snowflake --layout twitter --datacenter 3 --worker 9 -n 3", "Three IDs in Twitter's layout."),
            ("floe gen snowflake --layout flake-idgen --id 100 --epoch 2020-01-01T00:00:00Z -o hex", "flake-idgen's layout on an epoch of your own, in hex."),
            ("floe gen sno --meta 7 --partition 0x410a -n 10", "Ten sno IDs with a metabyte and a partition."),
            ("floe gen uuid7 -n 1000000", "A million UUIDv7s."),
            ("floe gen snowflake --registry file:///var/lib/floe --service orders --port 8080 -n 3", "A worker ID leased from a file registry: the same identity gets the same ID back."),
            ("floe gen snowflake --registry zk://127.0.0.1:2181/floe --service orders --port 8080", "A worker ID from ZooKeeper."),
            ("floe gen sno -n 5 --server 127.0.0.1:34904", "Five sno IDs from a running floe serve."),
        ],
        "floe-inspect" => &[
            ("floe inspect 515033464970412032 brpk4q72xwf2m63l", "Decode a Snowflake ID and a sno ID (the format is read from the text)."),
            ("floe inspect --json -", "Decode IDs from standard input, one a line, as JSON objects."),
            ("floe inspect --layout twitter 1541815603606036480", "Decode with another layout."),
        ],
        "floe-serve" => &[
            ("floe serve", "The embedded defaults: no other server needed."),
            ("floe serve --config /etc/floe/floe.toml", "Read a configuration file (flags and FLOE_* variables override it)."),
            ("floe serve --config /etc/floe/floe.toml --print-config", "Print the effective configuration (passwords as ****) and exit."),
            ("floe serve --registry zk://10.0.0.1:2181/floe --store main=postgres://floe@db:5432/app --grpc 0.0.0.0:34904", "One node of a fleet: worker IDs from ZooKeeper, sequences in PostgreSQL."),
            ("floe serve --tls-cert cert.pem --tls-key key.pem --token-file tokens", "TLS on both listeners and bearer tokens (SIGHUP reads the files again)."),
        ],
        "floe-seq" => &[
            ("floe seq orders -n 5 --increment strong", "Five strictly increasing IDs of the key orders from the embedded store."),
            ("floe seq orders --segment 1000", "Reserve 1,000 IDs and print START END."),
            ("floe seq orders -n 3 --increment strong --template ORD-{seq:06}", "ORD-000001, ORD-000002, ORD-000003."),
            ("floe seq orders -n 3 --increment strong --server 127.0.0.1:34904", "From a running floe serve."),
        ],
        "floe-seq-keys" | "floe-seq-keys-list" => &[
            ("floe seq keys list --store embedded", "The keys of the embedded store in .floe."),
        ],
        "floe-seq-keys-show" => &[
            ("floe seq keys show orders", "The key orders' value and next IDs, no ID taken."),
            ("floe seq keys show orders --server 127.0.0.1:34904 --json", "The same from a running floe serve, as JSON."),
        ],
        "floe-seq-keys-raise" => &[
            ("floe seq keys raise orders --above 1000000", "Every ID of orders issued afterwards is above 1,000,000 (e.g. after a migration)."),
        ],
        "floe-seq-keys-register" => &[
            ("floe seq keys register orders", "Register orders, for a store that serves registered keys only."),
        ],
        "floe-seq-keys-registered" => &[
            ("floe seq keys registered --limit 10", "The first ten registered keys."),
            ("floe seq keys registered --after orders", "The registered keys after orders."),
        ],
        "floe-seq-keys-unregister" => &[
            ("floe seq keys unregister orders", "Unregister orders (its value is kept)."),
        ],
        "floe-worker" | "floe-worker-list" => &[
            ("floe worker list --registry zk://127.0.0.1:2181/floe --service orders", "Who holds which worker ID, and when each was last alive."),
        ],
        "floe-worker-register" => &[
            ("floe worker register --registry file:///var/lib/floe --service orders --host web-01 --port 8080", "Register an identity (or find its ID again) and print its ID."),
        ],
        "floe-worker-release" => &[
            ("floe worker release --registry file:///var/lib/floe --service orders --host web-01 --port 8080", "Release a gone holder's ID (refused while a live process holds it)."),
        ],
        "floe-scramble" => &[
            ("floe scramble --key-file scramble.keys 1 2 3", "Scramble three numbers with the first key of the file."),
        ],
        "floe-unscramble" => &[
            ("floe unscramble --key-file scramble.keys 10957730421986640529", "Read a scrambled ID back into its number."),
        ],
        "floe-completions" => &[
            ("floe completions bash", "A bash completion script (e.g. into /etc/bash_completion.d/floe)."),
        ],
        "floe-man" => &[
            ("floe man gen", "The page of floe gen."),
            ("floe man --out-dir /usr/share/man/man1", "Write every page."),
        ],
        _ => &[],
    }
}

/// The FILES of each page: (path, what).
fn files(page: &str) -> Vec<(&'static str, &'static str)> {
    let state = (
        ".floe (--state-dir, FLOE_STATE_DIR)",
        "The state directory, kept across restarts: sequences.redb (the embedded store) and \
         its .lock, registry.json (the file registry), cache-*.json (the worker IDs' local \
         cache), horizon-*.json (the durable time bounds) and held-*.lock (the worker IDs in \
         use), sequencer-tails (the unused WEAK IDs a graceful stop keeps), sequencer-ledger \
         (the node's ID and each store's epoch: a store that went back is refused).",
    );
    let registry = (
        "file:///DIR (--registry)",
        "The file registry: DIR/registry.json and its lock.",
    );
    let keys = (
        "--key-file FILE",
        "Scramble keys: ID:HEX lines (a key ID 0-9, 64 hex digits of AES-256 key), the \
         current key first. Keep it private.",
    );
    let client = (
        "--token-file FILE, --ca-cert FILE",
        "With --server: the token sent (its first line) and a CA certificate (PEM) to trust.",
    );
    match page {
        "floe" | "floe-serve" => vec![
            (
                "floe.toml (--config, FLOE_CONFIG)",
                "The configuration file; none by default. A commented example is docs/floe.toml \
                 in floe's sources; floe serve --print-config prints the effective one.",
            ),
            state,
            (
                "--tls-cert FILE, --tls-key FILE, --token-file FILE",
                "The TLS certificate chain and key (PEM) and the bearer tokens (one a line), \
                 read at start and again on SIGHUP.",
            ),
            keys,
            (
                "/etc/default/floe",
                "The FLOE_* variables of the systemd unit (packaging/floe.service, \
                 packaging/floe.env).",
            ),
        ],
        "floe-gen" => vec![state, registry, keys, client],
        "floe-seq" | "floe-seq-keys" => vec![state, keys, client],
        p if p.starts_with("floe-seq-keys-") => vec![state, client],
        p if p.starts_with("floe-worker") => vec![state, registry],
        "floe-scramble" | "floe-unscramble" => vec![keys],
        _ => Vec::new(),
    }
}

/// The `FLOE_*` variables of `cmd`'s own flags (clap's `env =`), with their flag and help.
fn variables(cmd: &clap::Command) -> Vec<(String, String)> {
    let mut vars = Vec::new();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if let Some(name) = arg.get_env() {
            let flag = arg
                .get_long()
                .map_or_else(|| arg.get_id().to_string(), |l| format!("--{l}"));
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            vars.push((
                name.to_string_lossy().into_owned(),
                format!("As {flag}: {help}"),
            ));
        }
    }
    vars
}

/// Every variable a page documents: its command's flags', and [`OTHER_VARIABLES`] of the page;
/// floe's own page lists every command's, naming the commands.
pub(crate) fn environment(
    page: &str,
    cmd: &clap::Command,
    root: &clap::Command,
) -> Vec<(String, String)> {
    let mut vars = if page == "floe" {
        let mut all: Vec<(String, String)> = Vec::new();
        walk(root, "floe", &mut |name, c| {
            for (var, _) in variables(c) {
                match all.iter_mut().find(|(v, _)| *v == var) {
                    Some((_, used)) => used.push_str(&format!(", {}", name.replace('-', " "))),
                    None => all.push((var, format!("Read by {}", name.replace('-', " ")))),
                }
            }
        });
        for (_, used) in &mut all {
            used.push_str(" (see its page).");
        }
        for (var, pages, help) in OTHER_VARIABLES {
            let used: Vec<String> = pages.iter().map(|p| p.replace('-', " ")).collect();
            all.push((
                var.to_string(),
                format!("{help} Read by {}.", used.join(", ")),
            ));
        }
        all
    } else {
        let mut vars = variables(cmd);
        for (var, pages, help) in OTHER_VARIABLES {
            if pages.contains(&page) {
                vars.push((var.to_string(), help.to_string()));
            }
        }
        vars
    };
    vars.sort();
    vars
}

/// Calls `f` with every command's page name (`floe`, `floe-gen`, `floe-worker-list`...).
pub(crate) fn walk(cmd: &clap::Command, name: &str, f: &mut dyn FnMut(&str, &clap::Command)) {
    f(name, cmd);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        walk(sub, &format!("{name}-{}", sub.get_name()), f);
    }
}

/// Text for roff: its backquotes as quotes (man pages have no code spans).
fn plain(text: &str) -> String {
    text.replace('`', "'")
}

/// The page of `cmd` (named `page`, e.g. `floe-gen`), `root` being floe's whole command.
pub(crate) fn render(
    page: &str,
    cmd: &clap::Command,
    root: &clap::Command,
    w: &mut dyn Write,
) -> io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    // floe's after_help is the exit codes: EXIT STATUS below says them.
    let mut roff = Roff::new();
    let examples = examples(page);
    if !examples.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        for (line, what) in examples {
            roff.control("TP", []);
            roff.text([bold(*line)]);
            roff.text([roman(plain(what))]);
        }
    }
    let vars = environment(page, cmd, root);
    if !vars.is_empty() {
        roff.control("SH", ["ENVIRONMENT"]);
        roff.text([roman(
            "Flags win over variables, which win over the configuration file.",
        )]);
        for (var, what) in vars {
            roff.control("TP", []);
            roff.text([bold(var)]);
            roff.text([roman(plain(&what))]);
        }
    }
    let files = files(page);
    if !files.is_empty() {
        roff.control("SH", ["FILES"]);
        for (path, what) in files {
            roff.control("TP", []);
            roff.text([italic(path)]);
            roff.text([roman(plain(what))]);
        }
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (code, what) in EXIT_CODES {
        roff.control("TP", []);
        roff.text([bold(code.to_string())]);
        roff.text([roman(plain(what))]);
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut see: Vec<String> = Vec::new();
    if page != "floe" {
        see.push("floe(1)".into());
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        see.push(format!("{page}-{}(1)", sub.get_name()));
    }
    see.push("the manual in floe's sources: docs/README.md".into());
    roff.text([roman(see.join(", "))]);
    roff.to_writer(w)?;
    man.render_version_section(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built() -> clap::Command {
        let mut cmd = crate::command().disable_help_subcommand(true);
        cmd.build();
        cmd
    }

    fn pages() -> Vec<(String, clap::Command)> {
        let root = built();
        let mut pages = Vec::new();
        walk(&root, "floe", &mut |name, c| {
            pages.push((name.to_string(), c.clone()))
        });
        pages
    }

    /// Every EXAMPLES command parses with floe's own command line.
    #[test]
    fn every_example_parses() {
        let mut seen = 0;
        for (page, _) in pages() {
            for (line, _) in examples(&page) {
                let words = shlex::split(line).expect("an example splits as shell words");
                assert_eq!(words[0], "floe", "{page}: {line}");
                let parsed = crate::command().try_get_matches_from(&words);
                assert!(parsed.is_ok(), "{page}: `{line}`: {}", parsed.unwrap_err());
                let sub: Vec<&str> = page.split('-').skip(1).collect();
                assert!(
                    words[1..].starts_with(&sub.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                        || page == "floe",
                    "{page}: `{line}` is another command's example"
                );
                seen += 1;
            }
        }
        assert!(seen >= 30, "{seen} examples");
    }

    /// Every command a user runs has examples (the groups' pages lead to their commands').
    #[test]
    fn every_command_has_examples() {
        for (page, cmd) in pages() {
            let group =
                cmd.get_subcommands().next().is_some() && page != "floe" && page != "floe-seq";
            let exempt = page.starts_with("floe-seq-keys-");
            if !group && !exempt {
                assert!(!examples(&page).is_empty(), "{page} has no EXAMPLES");
            }
        }
    }

    /// The variables the pages list besides the flags' are no flag's (else listed twice), and
    /// every flag's variable is on floe's own page.
    #[test]
    fn the_environment_is_the_cli_s() {
        let root = built();
        let mut flags = Vec::new();
        walk(&root, "floe", &mut |_, c| {
            flags.extend(variables(c).into_iter().map(|(v, _)| v));
        });
        for (var, _, _) in OTHER_VARIABLES {
            assert!(!flags.contains(&var.to_string()), "{var} is a flag's too");
        }
        let on_floe: Vec<String> = environment("floe", &root, &root)
            .into_iter()
            .map(|(v, _)| v)
            .collect();
        for var in &flags {
            assert!(on_floe.contains(var), "{var} is not on floe(1)");
        }
        assert!(flags.contains(&"FLOE_CONFIG".to_string()));
    }
}
