//! Bearer tokens: when a token file is configured, every request on both listeners must carry
//! one of its tokens (HTTP: `Authorization: Bearer TOKEN`, else 401 with
//! `WWW-Authenticate: Bearer`; gRPC: `authorization: Bearer TOKEN` metadata, else
//! `UNAUTHENTICATED`): floe.v1, Layotto's Runtime, reflection, floe's and Leaf's HTTP routes.
//! Health (`/healthz`, `/readyz`, `/metrics`, `grpc.health.v1.Health`) and the API's description
//! (`/openapi.json`) are open unless
//! `auth.health_needs_token` is set.
//!
//! A token file holds one token a line; blank lines and lines starting with `#` are left out,
//! and the whitespace around a token is not part of it. Tokens are kept as their SHA-256
//! digests: a presented token is hashed and compared with every digest in constant time
//! (`subtle`), without stopping at a match, so neither which token matched nor how much of one
//! matched shows in the time taken; a presented token's length shows only as far as hashing it
//! takes longer (header values are bounded by the server's header limits). Tokens never appear
//! in logs, error messages or `Debug` output.
//!
//! With no token file the guard is not there at all (`Guarded` holds `None`): one branch per
//! request.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{Either, Ready};
use hyper::{Request, Response};
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

/// The accepted tokens, as SHA-256 digests.
#[derive(Clone)]
pub struct Tokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} accepted)", self.digests.len())
    }
}

/// The tokens of a token file's text: one a line, trimmed; blank lines and `#` comments left
/// out. In order.
pub fn token_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

impl Tokens {
    /// The tokens of a token file's text (see [`token_lines`]).
    ///
    /// # Errors
    /// When it holds no token.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let digests: Vec<[u8; 32]> = token_lines(text)
            .map(|t| Sha256::digest(t.as_bytes()).into())
            .collect();
        if digests.is_empty() {
            return Err(
                "holds no token (one token a line; blank lines and # comments are left out)".into(),
            );
        }
        Ok(Tokens { digests })
    }

    /// The tokens of the file at `path` (blocking I/O: call it off the async executor).
    ///
    /// # Errors
    /// One line naming `auth.token_file`, the file and what is wrong; never a token.
    pub fn load(path: &Path) -> Result<Tokens, String> {
        let bytes = super::read_file("auth.token_file", path)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("auth.token_file: {}: not UTF-8 text", path.display()))?;
        Tokens::parse(&text).map_err(|e| format!("auth.token_file: {}: {e}", path.display()))
    }

    /// Whether `other` accepts the same tokens (in any order).
    pub fn same_as(&self, other: &Tokens) -> bool {
        let (mut a, mut b) = (self.digests.clone(), other.digests.clone());
        a.sort_unstable();
        a.dedup();
        b.sort_unstable();
        b.dedup();
        a == b
    }

    /// How many tokens are accepted.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether no token is accepted (never, for tokens made by [`parse`](Self::parse)).
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Whether `presented` is one of the tokens: compared with every one in constant time.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        let mut any = Choice::from(0);
        for d in &self.digests {
            any |= d.ct_eq(&digest);
        }
        any.into()
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A bearer token that is not one of the tokens.
    Wrong,
    /// No token, on the status page of a listener with a sign-in form: sent there.
    SignIn,
}

impl Refused {
    /// The message: never the token.
    pub fn message(self) -> &'static str {
        match self {
            Refused::Missing => {
                "this server needs a bearer token: send Authorization: Bearer TOKEN"
            }
            Refused::Wrong => "the bearer token is not accepted",
            Refused::SignIn => {
                "this server needs a token: sign in at /login, or send Authorization: Bearer TOKEN"
            }
        }
    }
}

/// What the guard checks: the tokens, and which paths are open without one.
#[derive(Debug)]
pub(crate) struct Guard {
    pub(crate) tokens: Arc<arc_swap::ArcSwap<Tokens>>,
    /// The paths open without a token (health), by prefix.
    pub(crate) open: &'static [&'static str],
    /// The status page's sign-in sessions, on the HTTP listener: `/login` is open, and a
    /// session's cookie opens the status pages.
    pub(crate) sessions: Option<Arc<super::login::Sessions>>,
}

/// The paths of the HTTP listener open without a token: health, metrics, and the API's
/// description (it describes the routes, not their IDs).
pub(crate) const HTTP_HEALTH: &[&str] = &["/healthz", "/readyz", "/metrics", "/openapi.json"];
/// The health paths of the gRPC listener.
pub(crate) const GRPC_HEALTH: &[&str] = &["/grpc.health.v1.Health/"];

impl Guard {
    /// Whether `request` may pass.
    fn check<T>(&self, request: &Request<T>) -> Result<(), Refused> {
        let path = request.uri().path();
        if self.open.iter().any(|p| {
            if p.ends_with('/') {
                path.starts_with(p)
            } else {
                path == *p
            }
        }) {
            return Ok(());
        }
        let status_page = self
            .sessions
            .as_ref()
            .filter(|_| super::login::STATUS_PAGES.contains(&path));
        if let Some(sessions) = status_page {
            if super::login::session_cookies(request.headers()).any(|value| sessions.accepts(value))
            {
                return Ok(());
            }
        }
        if self.sessions.is_some() && path == super::login::LOGIN {
            return Ok(());
        }
        let mut values = request
            .headers()
            .get_all(hyper::header::AUTHORIZATION)
            .iter();
        let Some(value) = values.next().map(|v| v.as_bytes()) else {
            // A person at the status page: to the form.
            return Err(if status_page.is_some() && path == "/" {
                Refused::SignIn
            } else {
                Refused::Missing
            });
        };
        if values.next().is_some() {
            // Which one would count is a proxy's guess: neither does.
            return Err(Refused::Wrong);
        }
        // `Bearer` is case-insensitive (RFC 6750 and 9110), followed by one or more spaces.
        let token = match value.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => value[7..].trim_ascii(),
            _ => return Err(Refused::Missing),
        };
        if self.tokens.load().accepts(token) {
            Ok(())
        } else {
            Err(Refused::Wrong)
        }
    }
}

/// A listener's service behind the guard (or not, with no tokens configured).
pub(crate) struct Guarded<S, B> {
    pub(crate) inner: S,
    pub(crate) guard: Option<Arc<Guard>>,
    /// The answer to a refused request (401, or `UNAUTHENTICATED`).
    pub(crate) refuse: fn(Refused) -> Response<B>,
}

impl<S: Clone, B> Clone for Guarded<S, B> {
    fn clone(&self) -> Self {
        Guarded {
            inner: self.inner.clone(),
            guard: self.guard.clone(),
            refuse: self.refuse,
        }
    }
}

impl<S, T, B> tower::Service<Request<T>> for Guarded<S, B>
where
    S: tower::Service<Request<T>, Response = Response<B>, Error = Infallible>,
{
    type Response = Response<B>;
    type Error = Infallible;
    type Future = Either<Ready<Result<Response<B>, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<T>) -> Self::Future {
        if let Some(guard) = &self.guard {
            if let Err(refused) = guard.check(&request) {
                crate::warn(
                    crate::Topic::Auth,
                    format_args!(
                        "refused a request to {}: {}",
                        crate::observe::route_label(request.uri().path()),
                        refused.message()
                    ),
                );
                return Either::Left(futures_util::future::ready(Ok((self.refuse)(refused))));
            }
        }
        Either::Right(self.inner.call(request))
    }
}

/// The HTTP answer to a refused request: 401 with `WWW-Authenticate: Bearer` and floe's JSON
/// error.
pub(crate) fn refuse_http(refused: Refused) -> Response<axum::body::Body> {
    let challenge = match refused {
        Refused::Missing => "Bearer",
        Refused::Wrong => "Bearer error=\"invalid_token\"",
        Refused::SignIn => {
            return Response::builder()
                .status(hyper::StatusCode::SEE_OTHER)
                .header(hyper::header::LOCATION, super::login::LOGIN)
                .header(hyper::header::CACHE_CONTROL, "no-store")
                .body(axum::body::Body::empty())
                .unwrap_or_else(|_| Response::new(axum::body::Body::empty()));
        }
    };
    let body = serde_json::json!({ "error": "unauthenticated", "message": refused.message() });
    Response::builder()
        .status(hyper::StatusCode::UNAUTHORIZED)
        .header(hyper::header::WWW_AUTHENTICATE, challenge)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap_or_else(|_| Response::new(axum::body::Body::empty()))
}

/// The gRPC answer to a refused request: `UNAUTHENTICATED`.
pub(crate) fn refuse_grpc(refused: Refused) -> Response<tonic::body::Body> {
    tonic::Status::unauthenticated(refused.message()).into_http()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, auth: Option<&str>) -> Request<()> {
        let mut b = Request::builder().uri(path);
        if let Some(a) = auth {
            b = b.header("authorization", a);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn token_files_skip_blank_lines_and_comments() {
        let t = Tokens::parse("# ops\n\n  alpha  \nbeta\n#gamma\n").unwrap();
        assert_eq!(t.len(), 2);
        assert!(t.accepts(b"alpha"));
        assert!(t.accepts(b"beta"));
        assert!(!t.accepts(b"gamma"));
        assert!(!t.accepts(b"#gamma"));
        assert!(!t.accepts(b""));
        assert!(!t.accepts(b"alph"));
        assert!(Tokens::parse("").is_err());
        assert!(Tokens::parse("# only a comment\n\n").is_err());
    }

    #[test]
    fn debug_never_shows_a_token() {
        let t = Tokens::parse("s3cret-token\n").unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(shown, "Tokens(1 accepted)");
    }

    #[test]
    fn the_guard_reads_bearer_tokens_and_leaves_health_open() {
        let guard = Guard {
            tokens: Arc::new(arc_swap::ArcSwap::from_pointee(
                Tokens::parse("alpha\nbeta\n").unwrap(),
            )),
            open: HTTP_HEALTH,
            sessions: None,
        };
        assert_eq!(
            guard.check(&request("/v1/ids/ulid", Some("Bearer beta"))),
            Ok(())
        );
        assert_eq!(
            guard.check(&request("/v1/ids/ulid", Some("bearer  alpha"))),
            Ok(())
        );
        assert_eq!(
            guard.check(&request("/v1/ids/ulid", None)),
            Err(Refused::Missing)
        );
        assert_eq!(
            guard.check(&request("/v1/ids/ulid", Some("Basic YWxwaGE="))),
            Err(Refused::Missing)
        );
        assert_eq!(
            guard.check(&request("/v1/ids/ulid", Some("Bearer gamma"))),
            Err(Refused::Wrong)
        );
        assert_eq!(guard.check(&request("/healthz", None)), Ok(()));
        assert_eq!(guard.check(&request("/metrics", None)), Ok(()));
        // Only the exact paths.
        assert_eq!(
            guard.check(&request("/healthz/x", None)),
            Err(Refused::Missing)
        );
        let grpc = Guard {
            tokens: Arc::new(arc_swap::ArcSwap::from_pointee(
                Tokens::parse("alpha\n").unwrap(),
            )),
            open: GRPC_HEALTH,
            sessions: None,
        };
        assert_eq!(
            grpc.check(&request("/grpc.health.v1.Health/Check", None)),
            Ok(())
        );
        assert_eq!(
            grpc.check(&request("/floe.v1.Floe/NextIds", None)),
            Err(Refused::Missing)
        );
    }

    #[test]
    fn refusals_never_repeat_the_token() {
        for r in [Refused::Missing, Refused::Wrong, Refused::SignIn] {
            assert!(!r.message().contains("gamma"));
        }
        let answer = refuse_http(Refused::Wrong);
        assert_eq!(answer.status(), 401);
        assert!(answer.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer"));
    }
}
