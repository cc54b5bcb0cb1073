//! The client against the real etcd that scripts/test.sh starts on https with client
//! certificates and RBAC (FLOE_TEST_ETCD_SECURE, its files in FLOE_TEST_ETCD_SECURE_DIR: see
//! start_etcd_secure in scripts/lib/services.sh). Tokens there last 3 s unused.

use std::time::Duration;

use floe_etcd::{Client, Compare, CompareOp, ConnectOptions, Error, Security, Txn, TxnOp};
use floe_testkit::proxy::{Cut, Proxy};
use floe_testkit::{env, unique};

fn dir() -> String {
    env("FLOE_TEST_ETCD_SECURE_DIR")
}

/// The URL options of the test CA and client certificate.
fn tls() -> String {
    let d = dir();
    format!("cacert={d}/ca.pem&cert={d}/client.pem&key={d}/client.key")
}

fn password() -> String {
    std::fs::read_to_string(format!("{}/password", dir()))
        .unwrap()
        .trim_end()
        .to_string()
}

async fn client_of(url: &str) -> Result<Client, Error> {
    let (rest, security) = Security::from_url(url).map_err(Error::Config)?;
    let (_, endpoints) = rest.split_once("://").unwrap();
    let endpoints = endpoints.split(['/', '?']).next().unwrap();
    Client::connect_secure(endpoints.split(','), ConnectOptions::default(), security).await
}

fn secure_url() -> String {
    format!(
        "etcds://floe@{}?{}&password_file={}/password",
        env("FLOE_TEST_ETCD_SECURE"),
        tls(),
        dir()
    )
}

#[tokio::test]
async fn mtls_and_a_password_give_kv_transactions_and_leases() {
    let c = client_of(&secure_url()).await.unwrap();
    let key = format!("/floe-etcd-test/{}", unique("secure"));
    c.put(key.as_str(), "1", 0).await.unwrap();
    assert_eq!(c.get(key.as_str()).await.unwrap().kvs[0].value, b"1");
    let swap = Txn::new()
        .when([Compare::value(key.as_str(), CompareOp::Equal, "1")])
        .and_then([TxnOp::put(key.as_str(), "2", 0)]);
    assert!(c.txn(swap).await.unwrap().succeeded);
    let lease = c.lease_grant(5).await.unwrap();
    c.put(key.as_str(), "held", lease.id).await.unwrap();
    let alive = c.lease_keep_alive_once(lease.id).await.unwrap().unwrap();
    assert_eq!(alive.ttl, 5);
    c.lease_revoke(lease.id).await.unwrap();
    assert!(c.get(key.as_str()).await.unwrap().kvs.is_empty());
    // The password in the URL itself, percent-encoded as any URL's.
    let inline = format!(
        "etcds://floe:{}@{}?{}",
        password(),
        env("FLOE_TEST_ETCD_SECURE"),
        tls()
    );
    let c = client_of(&inline).await.unwrap();
    assert!(c.get(key.as_str()).await.unwrap().kvs.is_empty());
}

/// etcd forgets a token unused for 3 s (--auth-token-ttl): the next call is refused with
/// "invalid auth token", and the client authenticates again and sends it once more, unary
/// calls and the keep-alive stream alike.
#[tokio::test]
async fn an_expired_token_is_renewed_and_the_call_sent_again() {
    let c = client_of(&secure_url()).await.unwrap();
    let key = format!("/floe-etcd-test/{}", unique("token"));
    c.put(key.as_str(), "1", 0).await.unwrap();
    let lease = c.lease_grant(30).await.unwrap();
    for round in 0..2 {
        tokio::time::sleep(Duration::from_millis(4500)).await;
        c.put(key.as_str(), format!("after {round}"), 0)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(4500)).await;
        let alive = c.lease_keep_alive_once(lease.id).await.unwrap().unwrap();
        assert!(alive.ttl > 0, "{alive:?}");
    }
    assert_eq!(c.get(key.as_str()).await.unwrap().kvs[0].value, b"after 1");
    c.lease_revoke(lease.id).await.unwrap();
}

#[tokio::test]
async fn a_key_outside_the_users_role_is_refused_as_configuration() {
    let c = client_of(&secure_url()).await.unwrap();
    let e = c.put("/elsewhere/x", "1", 0).await.unwrap_err();
    assert!(e.is_config(), "{e}");
    assert!(e.to_string().contains("user \"floe\" may not"), "{e}");
}

/// Each mistake fails at the first call, as a configuration error saying what to check, on
/// one line, without the password.
#[tokio::test]
async fn wrong_settings_fail_with_one_clear_line() {
    let server = env("FLOE_TEST_ETCD_SECURE");
    let d = dir();
    let pw = format!("{d}/password");
    let cases = [
        (
            format!("etcds://floe:not-it@{server}?{}", tls()),
            "wrong user name or password",
        ),
        (
            format!("etcds://nobody:x@{server}?{}", tls()),
            "wrong user name or password",
        ),
        (
            format!("etcds://floe@{server}?cacert={d}/ca.pem&password_file={pw}"),
            "check cert= and key=",
        ),
        (
            format!(
                "etcds://floe@{server}?cacert={d}/ca.pem&cert={d}/other-client.pem&key={d}/other-client.key&password_file={pw}"
            ),
            "check cert= and key=",
        ),
        (
            format!(
                "etcds://floe@{server}?cacert={d}/other-ca.pem&cert={d}/client.pem&key={d}/client.key&password_file={pw}"
            ),
            "check cacert=",
        ),
        (
            format!("etcd://floe@{server}?password_file={pw}"),
            "use an etcds:// URL",
        ),
        (
            format!("etcds://{server}?{}", tls()),
            "give a user",
        ),
    ];
    let mut wrong = Vec::new();
    for (url, words) in cases {
        let e = match client_of(&url).await {
            Ok(c) => c.get("/floe/x").await.unwrap_err(),
            Err(e) => e,
        };
        let text = e.to_string();
        if !e.is_config() || !text.contains(words) || text.contains('\n') {
            wrong.push(format!("{url}: {text}"));
        }
        assert!(!text.contains(&password()), "{url}: {text}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The certificate files are read again for every new connection (the connection is cut here
/// with a proxy that resets it): a renewed certificate is used from then on; while the files
/// cannot be read, the last ones read well are used and the reason is kept.
#[tokio::test]
async fn certificate_files_are_read_again_for_each_new_connection() {
    let d = dir();
    let copy = std::env::temp_dir().join(unique("floe-etcd-certs"));
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["ca.pem", "client.pem", "client.key"] {
        std::fs::copy(format!("{d}/{f}"), copy.join(f)).unwrap();
    }
    let proxy = Proxy::start(&env("FLOE_TEST_ETCD_SECURE"));
    let c = copy.display();
    let url = format!(
        "etcds://floe@{}?cacert={c}/ca.pem&cert={c}/client.pem&key={c}/client.key&password_file={d}/password",
        proxy.addr()
    );
    let client = client_of(&url).await.unwrap();
    client.get("/floe/x").await.unwrap();
    assert_eq!(client.reload_error(), None);
    let reconnect = || async {
        proxy.cut(Cut::Refuse);
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.heal();
        // The call that finds the connection broken fails; the next one connects again
        // (within 15 s, on a loaded machine).
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut last = String::new();
        while std::time::Instant::now() < deadline {
            match client.get("/floe/x").await {
                Ok(_) => return,
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no new connection: {last}");
    };
    // Unreadable: the new connection uses the last ones read, and says why.
    std::fs::remove_file(copy.join("client.pem")).unwrap();
    // A call may still find a connection the cut left standing (no new one, nothing read):
    // cut again, a few times, until a new connection has been made.
    for _ in 0..5 {
        reconnect().await;
        if client.reload_error().is_some() {
            break;
        }
    }
    let why = client.reload_error().expect("the failed reload is kept");
    assert!(
        why.starts_with("cert=") && why.contains("cannot read"),
        "{why}"
    );
    // A client certificate of another CA now: read at the next connection, refused by etcd.
    std::fs::copy(format!("{d}/other-client.pem"), copy.join("client.pem")).unwrap();
    std::fs::copy(format!("{d}/other-client.key"), copy.join("client.key")).unwrap();
    proxy.cut(Cut::Refuse);
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.heal();
    // Within 15 s: on a loaded machine the first calls may time out before the handshake
    // that tells why.
    let (mut refused, mut last) = (None, String::new());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        match client.get("/floe/x").await {
            Err(e) if e.is_config() => {
                refused = Some(e);
                break;
            }
            other => {
                last = format!("{:?}", other.map(drop));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let refused = refused.unwrap_or_else(|| panic!("the new certificate was not used: {last}"));
    assert!(refused.to_string().contains("check cert="), "{refused}");
    assert_eq!(client.reload_error(), None);
    // The right one back (renewed): used at the next connection.
    std::fs::copy(format!("{d}/client.pem"), copy.join("client.pem")).unwrap();
    std::fs::copy(format!("{d}/client.key"), copy.join("client.key")).unwrap();
    reconnect().await;
    assert_eq!(client.reload_error(), None);
    // A client made while a file is missing fails at once, naming the option.
    std::fs::remove_file(copy.join("client.key")).unwrap();
    let e = client_of(&url).await.unwrap_err();
    assert!(e.is_config() && e.to_string().starts_with("key="), "{e}");
    std::fs::remove_dir_all(&copy).unwrap();
}

/// Over TLS too, a dead endpoint beside a live one is passed over, whichever comes first.
#[tokio::test]
async fn a_dead_endpoint_beside_a_live_one_is_passed_over_over_tls() {
    let dead = format!("127.0.0.1:{}", floe_testkit::free_port());
    let live = env("FLOE_TEST_ETCD_SECURE");
    for endpoints in [format!("{dead},{live}"), format!("{live},{dead}")] {
        let d = dir();
        let url = format!(
            "etcds://floe@{endpoints}?cacert={d}/ca.pem&cert={d}/client.pem&key={d}/client.key&password_file={d}/password"
        );
        let c = client_of(&url).await.unwrap();
        let key = format!("/floe-etcd-test/{}", unique("two-tls"));
        for i in 0..5 {
            c.put(key.as_str(), i.to_string(), 0).await.unwrap();
            assert_eq!(
                c.get(key.as_str()).await.unwrap().kvs[0].value,
                i.to_string().into_bytes()
            );
        }
    }
}
