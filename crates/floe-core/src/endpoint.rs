//! Server URLs as the registries and stores take them: `scheme://host:port[,host:port...][/root]`
//! with optional `?name=value` options. Pure parsing, shared so that every backend accepts and
//! refuses the same URLs with the same words. Errors are messages for the caller to prefix with
//! the field (`registry:`, `store:`).

/// `text` quoted for a one-line error message: escaped as Rust debug text (no raw newline or
/// control character), and cut after 64 characters with its length in bytes, so that a
/// megabyte of garbage stays a short line. Shared by floe-core's parsers.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(64) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &text[..end], text.len()),
    }
}

/// Checks a server list `host:port[,host:port...]` (ports 1 to 65535 in decimal digits, hosts
/// of no spaces or control characters) of a `kind` of server (`ZooKeeper`, `etcd`: named in
/// the message).
pub fn check_addresses(kind: &str, list: &str) -> Result<(), String> {
    for server in list.split(',') {
        let valid = server.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && !host.chars().any(|c| c.is_whitespace() || c.is_control())
                // Digits only: u16::from_str would also take `+80`.
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !valid {
            return Err(format!(
                "bad {kind} address {} in {}: expected host:port[,host:port...]",
                quoted(server),
                quoted(list)
            ));
        }
    }
    Ok(())
}

/// Checks a `kind` of server's root path: absolute, not `/` alone, no trailing or doubled `/`.
pub fn check_root(kind: &str, root: &str) -> Result<(), String> {
    // An option floe does not read is left in the URL's query: it must not become part of the
    // root (a misspelled option would give a node a namespace of its own, IDs and all).
    if let Some((path, query)) = root.split_once(['?', '#']) {
        return Err(format!(
            "unknown option {} in the {kind} URL after the root {}: check its spelling (it would have been part of the root)",
            quoted(query),
            quoted(path)
        ));
    }
    if !root.starts_with('/') || root.len() < 2 || root.ends_with('/') || root.contains("//") {
        return Err(format!(
            "the {kind} root must be an absolute path such as /floe, found {}",
            quoted(root)
        ));
    }
    Ok(())
}

/// `url` with the password of its `user:password@` (if any) shown as `****`, for messages and
/// printed configurations.
///
/// # Examples
/// ```
/// use floe_core::endpoint::redacted;
///
/// assert_eq!(redacted("postgres://floe:s3cret@db:5432/floe"), "postgres://floe:****@db:5432/floe");
/// assert_eq!(redacted("rediss://:s3cret@cache:6380/0"), "rediss://:****@cache:6380/0");
/// assert_eq!(redacted("redis://cache:6379/0"), "redis://cache:6379/0");
/// ```
pub fn redacted(url: &str) -> String {
    mask_query_passwords(&replace_password(url, Some("****")))
}

/// The query options that carry a password in some clients' URLs (PostgreSQL's and MySQL's
/// `password=`, Redis's `pass=`...).
const PASSWORD_OPTIONS: [&str; 4] = ["password", "pass", "passwd", "pwd"];

/// `url` with the value of each query option named in [`PASSWORD_OPTIONS`] (any case) shown
/// as `****`.
fn mask_query_passwords(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let masked: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _))
                if PASSWORD_OPTIONS
                    .iter()
                    .any(|p| name.eq_ignore_ascii_case(p)) =>
            {
                format!("{name}=****")
            }
            _ => pair.to_string(),
        })
        .collect();
    format!("{base}?{}", masked.join("&"))
}

/// `url` with the password of its `user:password@` replaced by `with`, or dropped
/// (`user@host`) when `with` is `None`. A URL with no password is returned as it is. A
/// password written with a raw `/`, `?` or `#` (which end a URL's authority) is still found:
/// everything up to the last `@` counts as the user's, so that it is masked rather than shown.
pub fn replace_password(url: &str, with: Option<&str>) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority_end = match rest.rfind('@') {
        // `user:pa/ss@host`: the authority reaches past the `/`.
        Some(at) if at >= authority_end => {
            at + rest[at..].find(['/', '?', '#']).unwrap_or(rest.len() - at)
        }
        _ => authority_end,
    };
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_string();
    };
    match (userinfo.split_once(':'), with) {
        (Some((user, _)), Some(shown)) => format!("{scheme}://{user}:{shown}@{host}{tail}"),
        (Some((user, _)), None) => format!("{scheme}://{user}@{host}{tail}"),
        (None, _) => url.to_string(),
    }
}

/// Splits `scheme://servers[/root]` (no query) of a `kind` of server into its checked servers
/// and root, `default_root` when the URL names none.
///
/// # Examples
/// ```
/// use floe_core::endpoint::servers_and_root;
///
/// assert_eq!(servers_and_root("zk", "zk://a:1,b:2/x", "/floe"), Ok(("a:1,b:2", "/x")));
/// assert_eq!(servers_and_root("zk", "etcd://a:1", "/floe"), Ok(("a:1", "/floe")));
/// assert!(servers_and_root("zk", "zk:/a:1", "/floe").is_err());
/// ```
pub fn servers_and_root<'a>(
    kind: &str,
    url: &'a str,
    default_root: &'a str,
) -> Result<(&'a str, &'a str), String> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .filter(|r| !r.is_empty() && !r.starts_with('/'))
        .ok_or_else(|| {
            format!(
                "expected scheme://host:port[,host:port...][/root], found {}",
                quoted(url)
            )
        })?;
    if rest.contains('@') {
        // Not echoed: what stands before '@' may be a password, one with a raw '/', '?' or
        // '#' that ended the authority early.
        return Err(format!(
            "a user:password@ in the {kind} URL that could not be read: write a '/', '?', '#', '@' or ':' of a password as %2F, %3F, %23, %40, %3A"
        ));
    }
    let (servers, root) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, default_root),
    };
    if let Some((_, query)) = servers.split_once(['?', '#']) {
        return Err(format!(
            "unknown option {} in the {kind} URL: check its spelling",
            quoted(query)
        ));
    }
    check_addresses(kind, servers)?;
    check_root(kind, root)?;
    Ok((servers, root))
}

/// Takes floe's own `name=value` options (those in `names`) out of a URL's query: the URL
/// without them (other options are left for the client library), and them in order.
///
/// # Examples
/// ```
/// use floe_core::endpoint::take_options;
///
/// let (url, own) = take_options("redis://h:1/0?prefix=x:&timeout=3", &["prefix"]);
/// assert_eq!(url, "redis://h:1/0?timeout=3");
/// assert_eq!(own, vec![("prefix", "x:".to_string())]);
/// ```
pub fn take_options<'n>(url: &str, names: &[&'n str]) -> (String, Vec<(&'n str, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut own = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match names.iter().find(|n| **n == k) {
            Some(n) => own.push((*n, v.to_string())),
            None => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, own)
}

/// A `user:password` a server URL carries (`scheme://user:password@host:port/...`), or that a
/// `password_file=` option completes. Its `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name, percent-decoded.
    pub user: String,
    /// The password, percent-decoded (empty when the URL gives a user alone).
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"****")
            .finish()
    }
}

/// `text` with its `%XX` escapes decoded, or `None` for a bad escape or bytes that are not
/// UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Takes the `user[:password]@` out of a server URL's authority: the URL without it, and the
/// credentials (percent-decoded, as in any URL: a `@` or `:` in a password is written `%40`,
/// `%3A`), if any. An empty user is refused (`:password@` names nobody). Messages never echo
/// the password.
///
/// # Examples
/// ```
/// use floe_core::endpoint::take_credentials;
///
/// let (url, c) = take_credentials("etcd://floe:s%40cret@a:1,b:2/root?ttl=3").unwrap();
/// assert_eq!(url, "etcd://a:1,b:2/root?ttl=3");
/// let c = c.unwrap();
/// assert_eq!((c.user.as_str(), c.password.as_str()), ("floe", "s@cret"));
/// assert_eq!(take_credentials("zk://a:1/x").unwrap(), ("zk://a:1/x".to_string(), None));
/// assert!(take_credentials("zk://:pw@a:1").is_err());
/// ```
pub fn take_credentials(url: &str) -> Result<(String, Option<Credentials>), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok((url.to_string(), None));
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return Ok((url.to_string(), None));
    };
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let shown = quoted(&redacted(url));
    let user = percent_decoded(user)
        .ok_or_else(|| format!("the user name in {shown} has a bad %-escape"))?;
    let password = percent_decoded(password)
        .ok_or_else(|| format!("the password in {shown} has a bad %-escape"))?;
    if user.is_empty() {
        return Err(format!(
            "no user name before the password in {shown}: expected user:password@host:port"
        ));
    }
    Ok((
        format!("{scheme}://{host}{tail}"),
        Some(Credentials { user, password }),
    ))
}

/// The password a `password_file=` holds: its text without one trailing newline (`\n` or
/// `\r\n`), or `None` when that leaves nothing. Every backend reads its file its own way (on
/// the blocking pool, or when it logs in) and takes the password with this.
///
/// # Examples
/// ```
/// use floe_core::endpoint::password_in_file;
///
/// assert_eq!(password_in_file("s3cret\r\n"), Some("s3cret"));
/// assert_eq!(password_in_file("two\nlines\n"), Some("two\nlines"));
/// assert_eq!(password_in_file("\n"), None);
/// ```
pub fn password_in_file(text: &str) -> Option<&str> {
    let text = text
        .strip_suffix('\n')
        .map_or(text, |t| t.strip_suffix('\r').unwrap_or(t));
    (!text.is_empty()).then_some(text)
}

/// `url` with the password of its `password_env=NAME` option (the environment variable NAME,
/// read by `lookup`) written into it, so that the password is in neither argv nor a
/// configuration file: `url` as it is without the option. Every registry and store URL goes
/// through this first; `password_file=` is each backend's own (a file is read off the
/// executor, and some read it again later).
///
/// # Errors
/// The option given twice or empty, the variable not set or empty, or a URL that also writes
/// a password. Never the password.
///
/// # Examples
/// ```
/// use floe_core::endpoint::with_password_env;
///
/// let lookup = |name: &str| (name == "PG_PW").then(|| "s3cret".to_string());
/// assert_eq!(
///     with_password_env("postgres://floe@db/floe?password_env=PG_PW&sslmode=require", lookup),
///     Ok("postgres://floe:s3cret@db/floe?sslmode=require".to_string())
/// );
/// assert!(with_password_env("postgres://floe@db/floe?password_env=NOPE", lookup).is_err());
/// ```
pub fn with_password_env(
    url: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let (bare, own) = take_options(url, &["password_env"]);
    let name = match own.as_slice() {
        [] => return Ok(url.to_string()),
        [(_, name)] if !name.is_empty() => name,
        [_] => return Err("password_env= needs the name of an environment variable".into()),
        _ => return Err("the option password_env is given twice".into()),
    };
    if !take_options(&bare, &["password_file"]).1.is_empty() {
        return Err("give password_file= or password_env=, not both".into());
    }
    let password = lookup(name).filter(|p| !p.is_empty()).ok_or_else(|| {
        format!("password_env: the environment variable {name} is not set, or is empty")
    })?;
    match take_credentials(&bare)? {
        (_, Some(c)) if !c.password.is_empty() => Err(format!(
            "the URL writes the password of {} and names password_env= too: give one of them",
            quoted(&c.user)
        )),
        _ => Ok(with_password(&bare, &password)),
    }
}

/// `url` with `password` as its password (percent-encoded), replacing the one it has: its user
/// is kept (`user@host` becomes `user:password@host`); a URL with no `user@` gets
/// `:password@` (Redis's form). A URL with no `scheme://` is returned as it is.
///
/// # Examples
/// ```
/// use floe_core::endpoint::with_password;
///
/// assert_eq!(with_password("postgres://floe@db:5432/x", "p@ss"), "postgres://floe:p%40ss@db:5432/x");
/// assert_eq!(with_password("redis://cache:6379/0", "pw"), "redis://:pw@cache:6379/0");
/// ```
pub fn with_password(url: &str, password: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let encoded: String = password
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let (user, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => (userinfo.split_once(':').map_or(userinfo, |(u, _)| u), host),
        None => ("", authority),
    };
    format!("{scheme}://{user}:{encoded}@{host}{tail}")
}

/// The credentials of a server URL whose `user[:password]@` was taken out by
/// [`take_credentials`], completed by a `password_file=PATH` option (the password is the
/// file's content, one trailing newline trimmed), so that no password need be in a command
/// line. A user and a password, both needed: a password in the URL and a file, a file with no
/// user, a user with no password, an empty password or a user name with a `:` (which digest
/// and basic authentication cannot tell from the password) are refused. Messages never echo
/// the password.
pub fn with_password_file(
    credentials: Option<Credentials>,
    password_file: Option<&str>,
) -> Result<Option<Credentials>, String> {
    let credentials = match (credentials, password_file) {
        (None, None) => return Ok(None),
        (None, Some(_)) => return Err(
            "password_file= names no user: expected scheme://USER@host:port/...?password_file=PATH"
                .to_string(),
        ),
        (Some(c), Some(_)) if !c.password.is_empty() => {
            return Err(format!(
                "the URL gives the password of {} and password_file= too: give one of them",
                quoted(&c.user)
            ))
        }
        (Some(mut c), Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("password_file {}: cannot read it: {e}", quoted(path)))?;
            c.password = password_in_file(&text)
                .ok_or_else(|| format!("password_file {} is empty", quoted(path)))?
                .to_string();
            c
        }
        (Some(c), None) => c,
    };
    if credentials.user.contains(':') {
        return Err(format!(
            "the user name {} has a ':', which cannot be told from the password",
            quoted(&credentials.user)
        ));
    }
    if credentials.password.is_empty() {
        return Err(format!(
            "user {} has no password: expected USER:PASSWORD@host:port, or USER@host:port with ?password_file=PATH",
            quoted(&credentials.user)
        ));
    }
    Ok(Some(credentials))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_query_options_are_masked() {
        assert_eq!(
            redacted("postgres://u@h:1/db?sslmode=require&password=s3cret"),
            "postgres://u@h:1/db?sslmode=require&password=****"
        );
        assert_eq!(
            redacted("redis+unix:///tmp/x.sock?PASS=s3cret&db=1"),
            "redis+unix:///tmp/x.sock?PASS=****&db=1"
        );
        assert_eq!(
            redacted("zk://h:1/x?password_file=/p"),
            "zk://h:1/x?password_file=/p"
        );
    }

    /// A password written with a raw `/`, `?` or `#` is never shown: masked by `redacted`, and
    /// refused by `servers_and_root` without the URL.
    #[test]
    fn a_password_with_a_raw_slash_is_never_echoed() {
        for url in [
            "zk://floe:ab/cd@h:1/floe",
            "zk://floe:12/x@h:1/floe",
            "zk://floe:ab?cd@h:1/floe",
            "etcd://floe:ab#cd@h:1",
        ] {
            let shown = redacted(url);
            assert!(
                !shown.contains("ab") && !shown.contains("12/x"),
                "{url}: {shown}"
            );
            let e = servers_and_root("zk", url, "/floe").unwrap_err();
            assert!(
                !e.contains("ab") && !e.contains("cd") && !e.contains("12"),
                "{url}: {e}"
            );
            assert!(e.contains("%2F"), "{e}");
        }
        // A root with an '@' is masked too: more than needed, never less.
        assert_eq!(redacted("zk://h:1/a@b"), "zk://h:****@b");
        assert_eq!(redacted("zk://h:1/a"), "zk://h:1/a");
    }

    #[test]
    fn a_password_from_elsewhere_goes_into_the_url_encoded() {
        let url = with_password("mysql://root:old@h:1/db?x=1", "n:e/w@ ");
        assert_eq!(url, "mysql://root:n%3Ae%2Fw%40%20@h:1/db?x=1");
        let (_, c) = take_credentials(&url).unwrap();
        assert_eq!(c.unwrap().password, "n:e/w@ ");
        let lookup = |name: &str| (name == "PW").then(|| "p w".to_string());
        assert_eq!(
            with_password_env("redis://h:1/0?password_env=PW&x=1", lookup).unwrap(),
            "redis://:p%20w@h:1/0?x=1"
        );
        assert_eq!(
            with_password_env("zk://floe@h:1/r?password_env=PW", lookup).unwrap(),
            "zk://floe:p%20w@h:1/r"
        );
        for bad in [
            "redis://h:1?password_env=PW&password_env=PW",
            "redis://h:1?password_env=",
            "redis://h:1?password_env=OTHER",
            "zk://floe:inline@h:1?password_env=PW",
            "zk://floe@h:1?password_env=PW&password_file=/p",
        ] {
            let e = with_password_env(bad, lookup).unwrap_err();
            assert!(!e.contains("inline") && !e.contains("p w"), "{bad}: {e}");
        }
    }

    #[test]
    fn credentials_are_taken_out_decoded_and_never_echoed() {
        let (url, c) = take_credentials("zk://u%3Ax:p%3Aw%40@h:1,g:2").unwrap();
        assert_eq!(url, "zk://h:1,g:2");
        let c = c.unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("u:x", "p:w@"));
        assert!(!format!("{c:?}").contains("p:w"), "{c:?}");
        let (_, c) = take_credentials("etcd://root@h:1/x").unwrap();
        assert_eq!(c.unwrap().password, "");
        for bad in [
            "zk://:secret@h:1",
            "zk://u:sec%zzret@h:1",
            "zk://u:sec%ff@h:1",
        ] {
            let e = take_credentials(bad).unwrap_err();
            assert!(!e.contains("sec"), "{bad}: {e}");
        }
        // An `@` after the authority is not a user's.
        assert_eq!(
            take_credentials("zk://h:1/a@b").unwrap(),
            ("zk://h:1/a@b".to_string(), None)
        );
    }

    #[test]
    fn a_password_file_completes_a_user_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("floe-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let path = file.to_str().unwrap();
        let user = |p: &str| {
            Some(Credentials {
                user: "floe".into(),
                password: p.into(),
            })
        };
        assert_eq!(with_password_file(None, None), Ok(None));
        assert_eq!(with_password_file(user(""), Some(path)), Ok(user("s3cret")));
        assert_eq!(with_password_file(user("pw"), None), Ok(user("pw")));
        assert!(with_password_file(None, Some(path))
            .unwrap_err()
            .contains("names no user"));
        let e = with_password_file(user("other"), Some(path)).unwrap_err();
        assert!(
            e.contains("password_file= too") && !e.contains("other"),
            "{e}"
        );
        assert!(with_password_file(user(""), None)
            .unwrap_err()
            .contains("has no password"));
        std::fs::write(&file, "\n").unwrap();
        assert!(with_password_file(user(""), Some(path))
            .unwrap_err()
            .contains("is empty"));
        let missing = dir.join("missing");
        assert!(with_password_file(user(""), missing.to_str())
            .unwrap_err()
            .contains("cannot read it"));
        let colon = Credentials {
            user: "a:b".into(),
            password: "pw".into(),
        };
        assert!(with_password_file(Some(colon), None)
            .unwrap_err()
            .contains("has a ':'"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn options_left_in_a_url_are_never_part_of_the_root() {
        for url in [
            "zk://a:5/fleet?ttl=3",
            "zk://a:5/fleet?session_timeout=10&ttl=3",
            "etcd://a:5/g1?zzz=1",
            "zk://a:5/fleet#x",
        ] {
            let e = servers_and_root("zk", url, "/floe").unwrap_err();
            assert!(e.contains("unknown option"), "{url}: {e}");
        }
        assert_eq!(
            servers_and_root("zk", "zk://a:5/fleet", "/floe").unwrap(),
            ("a:5", "/fleet")
        );
    }

    #[test]
    fn servers_and_roots_are_checked() {
        assert!(servers_and_root("zk", "zk://a:0", "/f")
            .unwrap_err()
            .contains("bad zk address"));
        assert!(servers_and_root("zk", "zk://:5", "/f")
            .unwrap_err()
            .contains("bad zk address"));
        assert!(servers_and_root("zk", "zk://a:5/", "/f")
            .unwrap_err()
            .contains("root"));
        assert!(servers_and_root("zk", "zk://a:5/x//y", "/f")
            .unwrap_err()
            .contains("root"));
        assert!(servers_and_root("zk", "zk://", "/f")
            .unwrap_err()
            .contains("expected scheme://"));
        assert_eq!(
            servers_and_root("zk", "zk://a:5/x/y", "/f"),
            Ok(("a:5", "/x/y"))
        );
        for bad in [
            "zk://a:+5",
            "zk://a:",
            "zk://a b:5",
            "zk://a\n:5",
            "zk://a:65536",
            "zk://a:5,",
        ] {
            assert!(
                servers_and_root("zk", bad, "/f")
                    .unwrap_err()
                    .contains("bad zk address"),
                "{bad}"
            );
        }
        assert_eq!(
            servers_and_root("zk", "zk://[::1]:2181,b:00080", "/f"),
            Ok(("[::1]:2181,b:00080", "/f"))
        );
        let e = servers_and_root("zk", &format!("zk://{}", "a".repeat(100_000)), "/f").unwrap_err();
        assert!(e.len() < 400 && e.contains("(100000 bytes)"), "{e}");
        assert_eq!(
            take_options("x://a:1", &["t"]),
            ("x://a:1".to_string(), vec![])
        );
    }
}
