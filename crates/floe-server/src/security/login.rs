//! The status page in a browser when tokens are on: `GET /login` shows a form, `POST /login`
//! takes one of the server's tokens from it (the request body: never a URL, so never in a
//! proxy's log or a browser's history) and answers with a session cookie (`HttpOnly`,
//! `SameSite=Strict`, `Secure` over TLS, 12 hours) that opens the read-only status pages
//! (`/` and `/v1/status`) and nothing else. A browser sent to `/` without either is sent to
//! the form.
//!
//! A session is a random 256-bit value (ring's system random) kept as its SHA-256 digest, at
//! most [`MAX_SESSIONS`] at once (the oldest ends first). A reload of the token file ends every
//! session: a token taken away takes its sessions with it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use ring::rand::SecureRandom;
use sha2::{Digest, Sha256};

use super::auth::Tokens;

/// Why no session was opened when the tokens changed during the sign-in.
const STALE: &str = "the tokens changed while signing in: sign in again";

/// The cookie's name.
pub const COOKIE: &str = "floe_session";
/// How long a session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The most sessions held at once.
pub const MAX_SESSIONS: usize = 1024;
/// The paths a session opens: the read-only status pages.
pub(crate) const STATUS_PAGES: &[&str] = &["/", "/v1/status"];
/// The form's path (open without a token).
pub(crate) const LOGIN: &str = "/login";

/// The live sessions, by the digest of their cookie value, with when each was made.
#[derive(Debug, Default)]
pub struct Sessions {
    made: Mutex<HashMap<[u8; 32], Instant>>,
    /// How many times every session was ended ([`end_all`](Self::end_all)): a sign-in that
    /// checked its token before a reload opens no session after it.
    ended: AtomicU64,
}

impl Sessions {
    /// The count of [`end_all`](Self::end_all)s, read before a token is checked.
    fn generation(&self) -> u64 {
        self.ended.load(Ordering::SeqCst)
    }

    /// A new session, unless every session was ended since `generation` (the tokens it was
    /// checked against may be gone): its cookie value (64 hex digits).
    ///
    /// # Errors
    /// When the system gives no random bytes, or the tokens changed meanwhile.
    fn open(&self, generation: u64) -> Result<String, String> {
        let mut bytes = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| "no random bytes from the system".to_string())?;
        let value: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if self.ended.load(Ordering::SeqCst) != generation {
            return Err(STALE.to_string());
        }
        made.retain(|_, at| now.duration_since(*at) < SESSION_LIFETIME);
        if made.len() >= MAX_SESSIONS {
            if let Some(oldest) = made.iter().min_by_key(|(_, at)| **at).map(|(k, _)| *k) {
                made.remove(&oldest);
            }
        }
        made.insert(Sha256::digest(value.as_bytes()).into(), now);
        Ok(value)
    }

    /// Whether `value` is a live session's.
    pub(crate) fn accepts(&self, value: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(value).into();
        let made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        made.get(&digest)
            .is_some_and(|at| at.elapsed() < SESSION_LIFETIME)
    }

    /// Ends every session.
    pub(crate) fn end_all(&self) {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        self.ended.fetch_add(1, Ordering::SeqCst);
        made.clear();
    }

    /// How many sessions are held.
    pub fn len(&self) -> usize {
        self.made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session cookies' values in a request's `Cookie` headers (a browser may send more than
/// one of that name, e.g. one set for a parent domain: each is tried).
pub(crate) fn session_cookies(headers: &hyper::HeaderMap) -> impl Iterator<Item = &[u8]> {
    headers
        .get_all(hyper::header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b';'))
        .filter_map(|pair| {
            let pair = pair.trim_ascii();
            let (name, value) = pair.split_at(pair.iter().position(|b| *b == b'=')?);
            (name == COOKIE.as_bytes()).then(|| &value[1..])
        })
        // A bound on the work a request can ask for.
        .take(8)
}

/// What the login route needs: the tokens it checks, the sessions it opens, and whether the
/// listener speaks TLS (the cookie is then `Secure`).
#[derive(Debug, Clone)]
pub struct Login {
    pub(crate) tokens: Arc<ArcSwap<Tokens>>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) secure: bool,
}

/// The form, with `note` above it (escaped by the caller: only fixed text is passed).
fn form(note: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>floe: sign in</title>\
         <meta name=\"referrer\" content=\"same-origin\"></head><body>\
         <h1>floe</h1><p>This server needs a token to show its status.</p>{note}\
         <form method=\"post\" action=\"/login\" autocomplete=\"off\">\
         <label>Token <input type=\"password\" name=\"token\" autofocus></label> \
         <button type=\"submit\">Sign in</button></form>\
         <p>The session lasts 12 hours and opens the status page only.</p></body></html>"
    )
}

/// An HTML answer with `status`, never cached.
fn html(status: hyper::StatusCode, body: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        status,
        [
            (hyper::header::CACHE_CONTROL, "no-store"),
            (hyper::header::CONTENT_TYPE, "text/html; charset=utf-8"),
        ],
        body,
    )
        .into_response()
}

impl Login {
    /// `GET /login`: the form.
    pub(crate) fn page(&self) -> axum::response::Response {
        html(hyper::StatusCode::OK, form(""))
    }

    /// `POST /login` with the form's body (`token=...`): 303 to `/` with a session cookie, or
    /// 401 with the form again. The token is never logged.
    pub(crate) fn submit(&self, body: &[u8]) -> axum::response::Response {
        // Before the tokens are read: a reload in between ends this sign-in too.
        let generation = self.sessions.generation();
        let token = form_urlencoded::parse(body)
            .find(|(name, _)| name == "token")
            .map(|(_, value)| value.trim().to_string());
        let accepted = token
            .as_deref()
            .is_some_and(|t| !t.is_empty() && self.tokens.load().accepts(t.as_bytes()));
        if !accepted {
            crate::warn(
                crate::Topic::Auth,
                format_args!("refused a sign-in to the status page: the token is not accepted"),
            );
            return html(
                hyper::StatusCode::UNAUTHORIZED,
                form("<p><strong>That token is not accepted.</strong></p>"),
            );
        }
        let value = match self.sessions.open(generation) {
            Ok(v) => v,
            Err(e) if e == STALE => {
                return html(
                    hyper::StatusCode::UNAUTHORIZED,
                    form(&format!("<p><strong>{STALE}.</strong></p>")),
                )
            }
            Err(e) => {
                return html(
                    hyper::StatusCode::INTERNAL_SERVER_ERROR,
                    format!("<p>No session: {e}</p>"),
                )
            }
        };
        let cookie = format!(
            "{COOKIE}={value}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
            SESSION_LIFETIME.as_secs(),
            if self.secure { "; Secure" } else { "" }
        );
        axum::response::Response::builder()
            .status(hyper::StatusCode::SEE_OTHER)
            .header(hyper::header::LOCATION, "/")
            .header(hyper::header::SET_COOKIE, cookie)
            .header(hyper::header::CACHE_CONTROL, "no-store")
            .body(axum::body::Body::empty())
            .unwrap_or_else(|_| axum::response::Response::new(axum::body::Body::empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login() -> Login {
        Login {
            tokens: Arc::new(ArcSwap::from_pointee(Tokens::parse("alpha\n").unwrap())),
            sessions: Arc::new(Sessions::default()),
            secure: true,
        }
    }

    #[test]
    fn a_good_token_opens_a_session_and_a_bad_one_does_not() {
        let login = login();
        let answer = login.submit(b"token=nope");
        assert_eq!(answer.status(), 401);
        assert!(login.sessions.is_empty());
        let answer = login.submit(b"token=alpha");
        assert_eq!(answer.status(), 303);
        let cookie = answer.headers()["set-cookie"].to_str().unwrap();
        assert!(
            cookie.contains("HttpOnly")
                && cookie.contains("SameSite=Strict")
                && cookie.contains("Secure"),
            "{cookie}"
        );
        let value = cookie
            .strip_prefix("floe_session=")
            .and_then(|c| c.split(';').next())
            .unwrap();
        assert_eq!(value.len(), 64);
        assert!(login.sessions.accepts(value.as_bytes()));
        assert!(!login.sessions.accepts(b"alpha"));
        let mut headers = hyper::HeaderMap::new();
        headers.insert(
            hyper::header::COOKIE,
            format!("a=b; {COOKIE}={value}; c=d").parse().unwrap(),
        );
        assert_eq!(session_cookies(&headers).next(), Some(value.as_bytes()));
        headers.insert(
            hyper::header::COOKIE,
            format!("{COOKIE}=bogus; {COOKIE}={value}").parse().unwrap(),
        );
        assert!(session_cookies(&headers).any(|v| login.sessions.accepts(v)));
        login.sessions.end_all();
        assert!(!login.sessions.accepts(value.as_bytes()));
    }

    #[test]
    fn sessions_are_bounded() {
        let sessions = Sessions::default();
        for _ in 0..MAX_SESSIONS + 10 {
            sessions.open(0).unwrap();
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        // A sign-in that began before the sessions were ended opens none.
        let before = sessions.generation();
        sessions.end_all();
        assert!(sessions.open(before).is_err());
        assert!(sessions.is_empty());
        sessions.open(sessions.generation()).unwrap();
    }
}
