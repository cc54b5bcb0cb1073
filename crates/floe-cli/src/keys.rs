//! `floe seq keys`: what an operator sees and changes of a store's keys, on a store opened here
//! (`--store URL`) or on a running server (`--server`, its `floe.v1.Admin`): `list` (a page of
//! keys with their values), `show KEY` (a key's state, no ID taken), `raise KEY --above N`
//! (every ID afterwards above N), `register KEY` / `unregister KEY` (registered-keys mode) and
//! `registered` (a page of registered keys).
//!
//! A key's state is one line, tab-separated: `KEY VALUE NEXT_WEAK NEXT_STRONG REGISTERED`, `-`
//! where there is none (`--json`: one object a line, numbers as strings).

use std::io::Write;

use clap::{Args, Subcommand};
use floe_sequencer::{Key, KeyState};
use floe_server::proto_floe as pb;

use crate::connect::{status, Client};
use crate::Failure;

/// `floe seq keys`.
#[derive(Debug, Args)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    action: Action,
    /// Store URL (see `floe serve --help`) [default: embedded, a file in --state-dir]. With
    /// --server: the name of one of the server's stores [default: its only store].
    #[arg(long, global = true)]
    store: Option<String>,
    /// Directory of the embedded store.
    #[arg(long, default_value = ".floe", global = true)]
    state_dir: std::path::PathBuf,
    /// Ask a running `floe serve` (its gRPC address) instead of opening the store here. Its
    /// admin API is served with bearer tokens (--token-file), or on a loopback listener.
    #[arg(long, value_name = "URL", global = true)]
    server: Option<String>,
    /// One JSON object a line.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    client: crate::connect::ClientArgs,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// A page of the store's keys in byte order, each with its state.
    List(Page),
    /// A key's state, no ID taken: its value, this server's next WEAK ID, the next STRONG ID.
    Show {
        /// The key.
        key: String,
    },
    /// Every ID issued afterwards is above N: by this server at once, by every other server of
    /// the store within 5 s.
    Raise {
        /// The key.
        key: String,
        /// The floor.
        #[arg(long, allow_negative_numbers = true)]
        above: i64,
    },
    /// Registers a key (for stores that serve registered keys only).
    Register {
        /// The key.
        key: String,
    },
    /// Unregisters a key; its value is kept (registered again, it goes on above it).
    Unregister {
        /// The key.
        key: String,
    },
    /// A page of the registered keys.
    Registered(Page),
}

#[derive(Debug, Args)]
struct Page {
    /// Keys after this one.
    #[arg(long)]
    after: Option<String>,
    /// At most this many (1 to 1,000).
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

/// What an action printed: key states, keys, or whether a registration changed.
enum Answer {
    States(Vec<KeyState>),
    Keys(Vec<String>),
    Changed(bool),
}

pub(crate) fn run(args: &KeysArgs) -> Result<(), Failure> {
    let answer = match &args.server {
        Some(url) => remote(url, args)?,
        None => local(args)?,
    };
    let mut out = std::io::stdout().lock();
    match answer {
        Answer::States(states) => {
            for s in &states {
                writeln!(out, "{}", line(s, args.json))?;
            }
        }
        Answer::Keys(keys) => {
            for k in keys {
                if args.json {
                    writeln!(out, "{}", serde_json::json!({ "key": k }))?;
                } else {
                    writeln!(out, "{k}")?;
                }
            }
        }
        Answer::Changed(changed) => {
            if args.json {
                writeln!(out, "{}", serde_json::json!({ "changed": changed }))?;
            } else {
                writeln!(out, "{}", if changed { "changed" } else { "unchanged" })?;
            }
        }
    }
    Ok(())
}

fn line(s: &KeyState, json: bool) -> String {
    let text = |n: Option<i64>| n.map_or_else(|| "-".to_string(), |n| n.to_string());
    if json {
        let n = |n: Option<i64>| n.map(|n| n.to_string());
        serde_json::json!({
            "key": s.key.as_str(),
            "value": n(s.value),
            "next_weak": n(s.next_weak),
            "next_strong": n(s.next_strong),
            "registered": s.registered,
        })
        .to_string()
    } else {
        let registered = s
            .registered
            .map_or("-", |r| if r { "registered" } else { "unregistered" });
        format!(
            "{}\t{}\t{}\t{}\t{registered}",
            s.key.as_str(),
            text(s.value),
            text(s.next_weak),
            text(s.next_strong)
        )
    }
}

fn key(text: &str) -> Result<Key, Failure> {
    Key::new(text).map_err(|e| Failure::Usage(e.to_string()))
}

fn limit(page: &Page) -> Result<usize, Failure> {
    usize::try_from(page.limit)
        .ok()
        .filter(|n| (1..=floe_sequencer::MAX_PAGE).contains(n))
        .ok_or_else(|| {
            Failure::Usage(format!(
                "--limit: expected 1 to {}, found {}",
                floe_sequencer::MAX_PAGE,
                page.limit
            ))
        })
}

/// On a store opened here.
fn local(args: &KeysArgs) -> Result<Answer, Failure> {
    let rt = crate::runtime().map_err(Failure::Other)?;
    rt.block_on(async {
        let url = args.store.as_deref().unwrap_or("embedded");
        let store = floe_sequencer::open(url, &args.state_dir).await?;
        let h = floe_sequencer::StoreHandle::new("cli", store, Default::default());
        let answer = match &args.action {
            Action::List(p) => {
                let after = p.after.as_deref().map(key).transpose()?;
                Answer::States(h.key_states(after.as_ref(), limit(p)?).await?)
            }
            Action::Show { key: k } => Answer::States(vec![h.key_state(&key(k)?).await?]),
            Action::Raise { key: k, above } => {
                let k = key(k)?;
                h.raise_floor(&k, *above).await?;
                Answer::States(vec![h.key_state(&k).await?])
            }
            Action::Register { key: k } => Answer::Changed(h.register(&key(k)?).await?),
            Action::Unregister { key: k } => Answer::Changed(h.unregister(&key(k)?).await?),
            Action::Registered(p) => {
                let after = p.after.as_deref().map(key).transpose()?;
                let keys = h.registered_keys(after.as_ref(), limit(p)?).await?;
                Answer::Keys(keys.iter().map(|k| k.as_str().to_string()).collect())
            }
        };
        h.store().close().await;
        Ok(answer)
    })
}

fn from_pb(s: pb::KeyState) -> Result<KeyState, Failure> {
    Ok(KeyState {
        key: Key::new(s.key).map_err(|e| Failure::Other(format!("the server answered {e}")))?,
        value: s.value,
        next_strong: s.next_strong,
        next_weak: s.next_weak,
        registered: s.registered,
    })
}

/// On a server, through its admin API.
fn remote(url: &str, args: &KeysArgs) -> Result<Answer, Failure> {
    let mut c = Client::connect(url, &args.client)?;
    let store = args.store.clone().unwrap_or_default();
    let req = |k: &str| pb::KeyRequest {
        store: store.clone(),
        key: k.to_string(),
    };
    let page = |p: &Page| -> Result<pb::ListKeysRequest, Failure> {
        limit(p)?;
        Ok(pb::ListKeysRequest {
            store: store.clone(),
            after: p.after.clone().unwrap_or_default(),
            limit: p.limit,
        })
    };
    let rt = &c.rt;
    let admin = &mut c.admin;
    Ok(match &args.action {
        Action::List(p) => {
            let r = rt.block_on(admin.list_keys(page(p)?)).map_err(status)?;
            let states = r.into_inner().keys.into_iter().map(from_pb);
            Answer::States(states.collect::<Result<_, _>>()?)
        }
        Action::Show { key: k } => {
            let r = rt.block_on(admin.get_key(req(k))).map_err(status)?;
            Answer::States(vec![from_pb(r.into_inner())?])
        }
        Action::Raise { key: k, above } => {
            let request = pb::RaiseKeyRequest {
                store: store.clone(),
                key: k.clone(),
                above: *above,
            };
            let r = rt.block_on(admin.raise_key(request)).map_err(status)?;
            Answer::States(vec![from_pb(r.into_inner())?])
        }
        Action::Register { key: k } => {
            let r = rt.block_on(admin.register_key(req(k))).map_err(status)?;
            Answer::Changed(r.into_inner().changed)
        }
        Action::Unregister { key: k } => {
            let r = rt.block_on(admin.unregister_key(req(k))).map_err(status)?;
            Answer::Changed(r.into_inner().changed)
        }
        Action::Registered(p) => {
            let r = rt
                .block_on(admin.list_registered(page(p)?))
                .map_err(status)?;
            Answer::Keys(r.into_inner().keys)
        }
    })
}
