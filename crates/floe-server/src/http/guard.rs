//! The HTTP listener's guard against browsers, before any route runs (one per listener, made
//! from the [`HostPolicy`]).
//!
//! - **Cross-site requests.** A browser can be made to send a request to any server it can
//!   reach from any page it shows. A request carrying an `Origin` that is not this server's
//!   own (`http://` or `https://` and the request's `Host`), or a `Sec-Fetch-Site` other than
//!   `same-origin` or `none`, is refused with 403, on every listener and route.
//! - **Foreign `Host`s (DNS rebinding).** A page can rebind its own host name to 127.0.0.1 and
//!   so send requests that look same-origin to a server on the browser's own machine. Where
//!   that can happen, a request whose `Host` is not an IP address, `localhost` or an allowed
//!   name is refused with 403. By default ([`HostCheck::Auto`]) that is on a listener bound to
//!   a loopback address (127.0.0.0/8, ::1) only: a server reached by a DNS name in a cluster
//!   (`floe.default.svc.cluster.local`, a Prometheus target by name) is not refused for it.
//!   `on` checks every listener, `off` none. Allowed names (`--allow-host`) are exact names
//!   (without case), `*.SUFFIX` (any name ending in `.SUFFIX`) or `*` (any name).
//!   `/healthz`, `/readyz` and `/metrics` are never refused for their `Host`.
//!
//! Refusals are floe's JSON error (`{"error":"forbidden",...}`), except on Leaf's two ID
//! routes, which answer as Leaf answers every failure: 500, the message as text, the kind in
//! `x-floe-error`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::params::HttpError;
pub use crate::config::HostCheck;
use crate::{echo, MAX_ECHO};

/// Which `Host`s the HTTP listeners answer to: the check's setting and the allowed names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPolicy {
    /// Where the `Host` is checked.
    pub check: HostCheck,
    /// Names answered to besides IP addresses and `localhost`: exact, `*.SUFFIX` or `*`.
    pub allowed: Vec<String>,
}

impl HostPolicy {
    /// `auto`, answering to `allowed` too.
    pub fn allowing(allowed: Vec<String>) -> HostPolicy {
        HostPolicy {
            check: HostCheck::Auto,
            allowed,
        }
    }

    /// The guard of a listener bound to `listener` (unknown: checked, as on loopback) that
    /// serves the admin API or not ([`crate::admin::allowed`]).
    pub(crate) fn guard(&self, listener: Option<SocketAddr>, admin: bool) -> Arc<Guard> {
        let check = match self.check {
            HostCheck::On => true,
            HostCheck::Off => false,
            HostCheck::Auto => listener.is_none_or(|a| a.ip().is_loopback()),
        };
        Arc::new(Guard {
            hosts: check.then(|| self.allowed.clone()),
            admin,
        })
    }
}

/// Whether `pattern` (an allowed name: exact, `*.SUFFIX` or `*`) allows the host name `name`.
pub(crate) fn allows(pattern: &str, name: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            name.len() > suffix.len() + 1
                && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
                && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        }
        None => pattern.eq_ignore_ascii_case(name),
    }
}

/// Checks an allowed name as configured: `*`, or a host name whose first label may be `*`.
///
/// # Errors
/// What is wrong with it, for the configuration's error.
pub(crate) fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern == "*" {
        return Ok(());
    }
    let name = pattern.strip_prefix("*.").unwrap_or(pattern);
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected a host name, *.SUFFIX or *, found \"{}\"",
            echo(pattern, MAX_ECHO)
        ))
    }
}

/// A listener's guard (see the module docs).
#[derive(Debug)]
pub(crate) struct Guard {
    /// The allowed names when `Host` is checked on this listener.
    hosts: Option<Vec<String>>,
    /// Whether this listener serves the admin API (`/v1/admin/...`).
    admin: bool,
}

/// The routes never refused for their `Host`: a probe or a scrape by any name.
const OPS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Leaf's ID routes: a refusal answers as Leaf answers every failure of theirs.
fn leafs(path: &str) -> bool {
    path.starts_with("/api/segment/get/") || path.starts_with("/api/snowflake/get/")
}

impl Guard {
    /// The refusal of a request to `path` with `headers`, if it is refused.
    pub(crate) fn refused(&self, path: &str, headers: &HeaderMap) -> Option<Response> {
        if !self.admin && path.starts_with("/v1/admin/") {
            return Some(
                HttpError {
                    status: StatusCode::FORBIDDEN,
                    error: "forbidden",
                    message: crate::admin::REFUSED.into(),
                }
                .into_response(),
            );
        }
        let foreign = match &self.hosts {
            Some(allowed) if !OPS.contains(&path) => foreign_host(headers, allowed),
            _ => None,
        };
        let why = foreign.or_else(|| cross_site(headers))?;
        let message = format!("cross-site browser requests are refused: {why}");
        Some(if leafs(path) {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; charset=utf-8"),
                    ),
                    (
                        header::HeaderName::from_static("x-floe-error"),
                        HeaderValue::from_static("forbidden"),
                    ),
                ],
                message,
            )
                .into_response()
        } else {
            HttpError {
                status: StatusCode::FORBIDDEN,
                error: "forbidden",
                message,
            }
            .into_response()
        })
    }
}

/// Why a request is a cross-site browser request, if it is one.
fn cross_site(headers: &HeaderMap) -> Option<String> {
    for site in headers.get_all("sec-fetch-site") {
        let same = site.as_bytes().eq_ignore_ascii_case(b"same-origin")
            || site.as_bytes().eq_ignore_ascii_case(b"none");
        if !same {
            return Some(format!(
                "Sec-Fetch-Site is \"{}\"",
                echo(&String::from_utf8_lossy(site.as_bytes()), MAX_ECHO)
            ));
        }
    }
    let host = headers.get(header::HOST).map(HeaderValue::as_bytes);
    for origin in headers.get_all(header::ORIGIN) {
        let o = origin.as_bytes();
        let own = host.is_some_and(|host| {
            [&b"http://"[..], b"https://"].iter().any(|scheme| {
                o.len() == scheme.len() + host.len()
                    && o[..scheme.len()].eq_ignore_ascii_case(scheme)
                    && o[scheme.len()..].eq_ignore_ascii_case(host)
            })
        });
        if !own {
            return Some(format!(
                "Origin \"{}\" is not this server's",
                echo(&String::from_utf8_lossy(o), MAX_ECHO)
            ));
        }
    }
    None
}

/// Why a request's `Host` is not one this server answers to, if it is not: an IP address,
/// `localhost`, or a name `allowed` allows (the port is not compared).
fn foreign_host(headers: &HeaderMap, allowed: &[String]) -> Option<String> {
    let host = headers.get(header::HOST)?;
    let text = String::from_utf8_lossy(host.as_bytes());
    let name = match text.strip_prefix('[') {
        // [IPv6]:port
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => text.rsplit_once(':').map_or(&*text, |(name, _)| name),
    };
    let ok = name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| allows(a, name));
    (!ok).then(|| {
        format!(
            "Host \"{}\" is not an IP address, localhost or an allowed name (floe serve --allow-host NAME, *.SUFFIX or *; --host-check off)",
            echo(&text, MAX_ECHO)
        )
    })
}

/// Refuses cross-site browser requests and foreign `Host`s (see the module docs) before any
/// route runs.
pub(super) async fn same_origin(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    match guard.refused(request.uri().path(), request.headers()) {
        Some(refusal) => refusal,
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_allow_exact_names_suffixes_and_all() {
        for (pattern, name, ok) in [
            ("floe.internal", "FLOE.internal", true),
            ("floe.internal", "x.floe.internal", false),
            (
                "*.svc.cluster.local",
                "floe.default.svc.cluster.local",
                true,
            ),
            ("*.svc.cluster.local", "svc.cluster.local", false),
            ("*.svc.cluster.local", "evilsvc.cluster.local", false),
            ("*.svc.cluster.local", ".svc.cluster.local", false),
            ("*", "anything.example", true),
        ] {
            assert_eq!(allows(pattern, name), ok, "{pattern} {name}");
        }
        for good in ["*", "floe", "*.svc.cluster.local", "floe-1.internal"] {
            check_pattern(good).unwrap();
        }
        for bad in ["", "*.", "a..b", "*x.y", "a b", "**.x", "a.*.b", "http://x"] {
            assert!(check_pattern(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn auto_checks_loopback_listeners_only() {
        let p = HostPolicy::allowing(vec![]);
        let on = |addr: &str| p.guard(Some(addr.parse().unwrap()), false).hosts.is_some();
        assert!(on("127.0.0.1:1") && on("127.9.9.9:1") && on("[::1]:1"));
        assert!(!on("0.0.0.0:1") && !on("10.0.0.5:1") && !on("[::]:1"));
        assert!(p.guard(None, false).hosts.is_some());
        let always = HostPolicy {
            check: HostCheck::On,
            allowed: vec![],
        };
        assert!(always
            .guard(Some("10.0.0.5:1".parse().unwrap()), false)
            .hosts
            .is_some());
        let never = HostPolicy {
            check: HostCheck::Off,
            allowed: vec![],
        };
        assert!(never
            .guard(Some("127.0.0.1:1".parse().unwrap()), false)
            .hosts
            .is_none());
    }
}
