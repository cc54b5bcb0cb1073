//! Templates and scrambled IDs served by the real `floe serve`: HTTP (floe's routes and
//! Leaf's), gRPC NextSequence with `floe-meta-*` metadata, and Layotto's GetNextId unchanged.
//! The server's clock is pinned by libfaketime, so the dated keys are known.

use crate::common;
use crate::serving;

use floe_server::proto::runtime_client::RuntimeClient;
use floe_server::proto::sequencer_options::AutoIncrement;
use floe_server::proto::{GetNextIdRequest, SequencerOptions};
use floe_server::proto_floe::floe_client::FloeClient;
use floe_server::proto_floe::{Increment, NextSequenceRequest};
use serde_json::Value;
use serving::{http, Serve};

const KEY: &str = "2:a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

fn json(addr: &str, path: &str) -> (u16, Value) {
    let (code, body) = http(addr, "POST", path).unwrap();
    (
        code,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn start(dir: &tempfile::TempDir) -> Serve {
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("{KEY}\n")).unwrap();
    let state = dir.path().join("state");
    serving::start_with_env(
        "127.0.0.1:0",
        "127.0.0.1:0",
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "--template",
            "orders=ORD-{date:%Y%m%d}-{seq:06}",
            "--template",
            "uid={meta.uid:08}{seq:08}",
            "--template",
            "tiny=T{seq:01}",
            "--template",
            "pub=P{seq:scrambled}",
            "--template",
            "sf=S{date:%Y}-{id}{luhn}",
            "--scramble-key-file",
            keys.to_str().unwrap(),
            "--scramble-domain",
            "digits:10",
        ],
        &[
            ("LD_PRELOAD", &common::faults::faketime_lib()),
            ("FAKETIME", "@2026-11-23 10:00:00"),
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
    )
}

#[test]
fn templates_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(&dir);
    let h = &s.http;
    let (code, v) = json(
        h,
        "/v1/sequencer/default/orders?template=orders&increment=strong",
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v,
        serde_json::json!({"next_id": "1", "text": "ORD-20261123-000001"})
    );
    let (_, v) = json(
        h,
        "/v1/sequencer/default/orders?template=orders&increment=strong&count=2",
    );
    assert_eq!(
        v["texts"],
        serde_json::json!(["ORD-20261123-000002", "ORD-20261123-000003"])
    );
    assert_eq!(v["ids"], serde_json::json!(["2", "3"]));
    // The day's key is an ordinary key; the plain key was never touched.
    let (_, v) = json(h, "/v1/sequencer/default/orders@20261123?increment=strong");
    assert_eq!(v["next_id"], "4");
    let (_, v) = json(h, "/v1/sequencer/default/orders?increment=strong");
    assert_eq!(v["next_id"], "1");

    // meta from the query; a missing or bad one is refused before an ID is spent.
    let (code, v) = json(h, "/v1/sequencer/default/u?template=uid&increment=strong");
    assert_eq!(
        (code, v["error"].as_str()),
        (400, Some("invalid_argument")),
        "{v}"
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("meta.uid: no value given"),
        "{v}"
    );
    let (code, v) = json(
        h,
        "/v1/sequencer/default/u?template=uid&increment=strong&meta.uid=12x",
    );
    assert_eq!(code, 400, "{v}");
    // Too wide for its width: bad input too (not a sequence run out), and nothing spent.
    let (code, v) = json(
        h,
        "/v1/sequencer/default/u?template=uid&increment=strong&meta.uid=123456789",
    );
    assert_eq!(
        (code, v["error"].as_str()),
        (400, Some("invalid_argument")),
        "{v}"
    );
    // Names are exact: meta.UID is not meta.uid.
    let (code, _) = json(
        h,
        "/v1/sequencer/default/u?template=uid&increment=strong&meta.UID=1",
    );
    assert_eq!(code, 400);
    let (_, v) = json(
        h,
        "/v1/sequencer/default/u?template=uid&increment=strong&meta.uid=1234",
    );
    assert_eq!(v["text"], "0000123400000001");
    // A meta value the template does not read would be ignored: refused (HTTP and gRPC).
    let (code, v) = json(h, "/v1/sequencer/default/u?template=orders&meta.x1=1");
    assert_eq!(code, 400, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("has no {meta.x1}"),
        "{v}"
    );
    // meta values without a template would be ignored: refused.
    let (code, v) = json(h, "/v1/sequencer/default/u?meta.uid=1234");
    assert_eq!(code, 400, "{v}");
    // A segment is numbers: template and scramble are refused there.
    assert_eq!(
        json(h, "/v1/sequencer/default/u/segment?template=uid").0,
        400
    );
    // A key too long once its period is added says so.
    let long = "k".repeat(250);
    let (code, v) = json(h, &format!("/v1/sequencer/default/{long}?template=orders"));
    assert_eq!(code, 400);
    assert!(
        v["message"].as_str().unwrap().contains("with its period"),
        "{v}"
    );
    // A template too narrow for today's Snowflake IDs: 400, and no ID spent.
    let (code, v) = json(h, "/v1/ids/snowflake?template=tiny");
    assert_eq!(code, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("widen it"), "{v}");

    // Unknown template, both options, bad scramble value.
    let (code, v) = json(h, "/v1/sequencer/default/u?template=nope");
    assert_eq!(code, 400);
    let m = v["message"].as_str().unwrap();
    assert!(
        m.contains("no template is named \"nope\"") && m.contains("orders, pub, sf, tiny, uid"),
        "{m}"
    );
    assert_eq!(
        json(h, "/v1/sequencer/default/u?template=pub&scramble=true").0,
        400
    );
    assert_eq!(json(h, "/v1/sequencer/default/u?scramble=maybe").0, 400);

    // A number too wide for its width: 409, never cut.
    for i in 1..=9 {
        let (_, v) = json(h, "/v1/sequencer/default/t?template=tiny&increment=strong");
        assert_eq!(v["text"], format!("T{i}"));
    }
    let (code, v) = json(h, "/v1/sequencer/default/t?template=tiny&increment=strong");
    assert_eq!((code, v["error"].as_str()), (409, Some("exhausted")), "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("refusing to cut it"),
        "{v}"
    );

    // Scrambled: decodes back with `floe unscramble` and the same key file.
    let (_, v) = json(
        h,
        "/v1/sequencer/default/p?scramble=true&increment=strong&count=3",
    );
    let texts: Vec<String> = v["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().into())
        .collect();
    assert!(
        texts.iter().all(|t| t.len() == 11 && t.starts_with('2')),
        "{texts:?}"
    );
    let (_, v) = json(h, "/v1/sequencer/default/p?template=pub&increment=strong");
    let public = v["text"]
        .as_str()
        .unwrap()
        .strip_prefix('P')
        .unwrap()
        .to_string();
    let keys = dir.path().join("keys");
    let mut args = vec![
        "unscramble",
        "--key-file",
        keys.to_str().unwrap(),
        "--domain",
        "digits:10",
    ];
    args.extend(texts.iter().map(String::as_str));
    args.push(&public);
    let back = common::ok(common::run(&args));
    assert_eq!(back.lines().collect::<Vec<_>>(), ["1", "2", "3", "4"]);

    // Snowflake IDs through a template, dated by their own time.
    let (code, v) = json(h, "/v1/ids/snowflake?template=sf&count=3");
    assert_eq!(code, 200, "{v}");
    for (id, text) in v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .zip(v["texts"].as_array().unwrap())
    {
        let text = text.as_str().unwrap();
        assert_eq!(text, {
            let id = id.as_str().unwrap();
            let body = format!("S2026-{id}");
            format!("{body}{}", floe_core::template::luhn_digit(&body))
        });
    }
    assert_eq!(json(h, "/v1/ids/sno?template=sf").0, 400);

    // Leaf's segment route writes the text instead of the number.
    let (code, body) = http(h, "GET", "/api/segment/get/leafkey?template=orders").unwrap();
    assert_eq!((code, body.as_str()), (200, "ORD-20261123-000001"));
    let (code, body) = http(h, "GET", "/api/segment/get/leafkey").unwrap();
    assert_eq!(
        (code, body.as_str()),
        (200, "1"),
        "the plain key is another sequence"
    );
}

#[test]
fn templates_over_grpc_and_layotto_stays_numeric() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(&dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", s.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut floe = FloeClient::new(channel.clone());
        let mut req = tonic::Request::new(NextSequenceRequest {
            key: "g".into(),
            increment: Increment::Strong as i32,
            count: 2,
            template: "uid".into(),
            ..Default::default()
        });
        req.metadata_mut()
            .insert("floe-meta-uid", "77".parse().unwrap());
        // Other metadata never reaches a template.
        req.metadata_mut().insert("uid", "99".parse().unwrap());
        let mut unread = tonic::Request::new(NextSequenceRequest {
            key: "g".into(),
            template: "orders".into(),
            ..Default::default()
        });
        unread
            .metadata_mut()
            .insert("floe-meta-uid", "77".parse().unwrap());
        let e = floe.next_sequence(unread).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        let r = floe.next_sequence(req).await.unwrap().into_inner();
        assert_eq!(r.ids, [1, 2]);
        assert_eq!(r.texts, ["0000007700000001", "0000007700000002"]);
        let missing = floe
            .next_sequence(NextSequenceRequest {
                key: "g".into(),
                template: "uid".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), tonic::Code::InvalidArgument, "{missing:?}");
        let dated = floe
            .next_sequence(NextSequenceRequest {
                key: "orders".into(),
                template: "orders".into(),
                increment: Increment::Strong as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(dated.texts, ["ORD-20261123-000001"]);
        let plain = floe
            .next_sequence(NextSequenceRequest {
                key: "g".into(),
                increment: Increment::Strong as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((plain.ids, plain.texts.len()), (vec![3], 0));
        let unknown = floe
            .next_sequence(NextSequenceRequest {
                key: "g".into(),
                template: "nope".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::InvalidArgument);
        // An empty key is refused before its period is added to it.
        let empty = floe
            .next_sequence(NextSequenceRequest {
                key: String::new(),
                template: "orders".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(empty.code(), tonic::Code::InvalidArgument, "{empty:?}");
        // Layotto's GetNextId: an int64, whatever the metadata.
        let mut layotto = RuntimeClient::new(channel);
        let r = layotto
            .get_next_id(GetNextIdRequest {
                store_name: "default".into(),
                key: "g".into(),
                options: Some(SequencerOptions {
                    increment: AutoIncrement::Strong as i32,
                }),
                metadata: [("template".to_string(), "uid".to_string())].into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.next_id, 4);
    });
}

/// Bad templates and keys stop the server at start, exit 2, naming the field.
#[test]
fn bad_templates_fail_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for (args, why) in [
        (
            vec!["--template", "x=ORD-{nope}"],
            "templates.x.pattern: template: unknown placeholder {nope}",
        ),
        (
            vec!["--template", "x=P{seq:scrambled}"],
            "{seq:scrambled} needs keys",
        ),
        (vec!["--template", "x"], "expected NAME=TEMPLATE"),
        (vec!["--template", "a b={seq}"], "a template name is"),
        (vec!["--scramble-domain", "digits:3"], "scramble.domain"),
        (
            vec!["--scramble-key-file", "/nonexistent/keys"],
            "scramble.key_file: /nonexistent/keys",
        ),
        (
            vec!["--scramble-key-file", "/dev/zero"],
            "more than 65536 bytes",
        ),
    ] {
        let out = common::serve_output(std::path::Path::new(d), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

/// `$FLOE_SCRAMBLE_KEY` that is not UTF-8 stops the server at start (it once started with no
/// keys at all).
#[test]
fn a_key_variable_that_is_not_utf8_fails_at_start() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let out = common::serve_command(dir.path(), &["--template", "p=P{seq:scrambled}"])
        .env(
            "FLOE_SCRAMBLE_KEY",
            std::ffi::OsStr::from_bytes(b"\xff\xfe"),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("$FLOE_SCRAMBLE_KEY: expected ID:HEX entries, found text that is not UTF-8"),
        "{err}"
    );
}
