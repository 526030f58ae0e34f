//! Who may use plan-cli's local HTTP servers (the dashboard, `mcp serve --http`): the holder of
//! a token, calling the server by a name of its own. One piece for both servers, so that their
//! guards cannot drift apart.

use std::net::{IpAddr, SocketAddr};

/// The token a server was given cannot be used, or none could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AccessError(String);

/// A local server's guard: its token, and the `Host` names a request may use.
#[derive(Debug, Clone)]
pub struct Access {
    token: String,
    hosts: Vec<String>,
    /// Bound to every address: the machine's other names are not known, so any `Host` is
    /// taken, and the token is the guard.
    any_host: bool,
    reachable: String,
}

impl Access {
    /// For a server bound to `address` (its port known): `token` if given, else 32 random
    /// bytes in hex. A given token goes into URLs as it is and is the only guard, so it must be
    /// at least 16 characters of letters, digits, `-`, `_`, `.` or `~`.
    pub fn new(address: SocketAddr, token: Option<String>) -> Result<Access, AccessError> {
        let token = match token.filter(|token| !token.is_empty()) {
            Some(token)
                if token.len() < 16
                    || !token
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b)) =>
            {
                return Err(AccessError(
                    "a token must be at least 16 characters of letters, digits, `-`, `_`, `.` or `~`".to_owned(),
                ));
            }
            Some(token) => token,
            None => random_hex(32).map_err(AccessError)?,
        };
        let port = address.port();
        let any_host = address.ip().is_unspecified();
        let shown = match address.ip() {
            IpAddr::V6(ip) => format!("[{ip}]"),
            IpAddr::V4(ip) => ip.to_string(),
        };
        let mut hosts = vec![format!("127.0.0.1:{port}"), format!("localhost:{port}")];
        if !any_host && !hosts.contains(&format!("{shown}:{port}")) {
            hosts.push(format!("{shown}:{port}"));
        }
        let reachable = if any_host || shown == "127.0.0.1" {
            "127.0.0.1".to_owned()
        } else {
            shown
        };
        Ok(Access {
            token,
            hosts,
            any_host,
            reachable: format!("{reachable}:{port}"),
        })
    }

    /// The token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// `HOST:PORT` to reach the server at (loopback when it is bound to every address).
    pub fn reachable(&self) -> &str {
        &self.reachable
    }

    /// Whether a request's `Host` names this server (against DNS rebinding: a page of another
    /// site whose name now points here).
    pub fn allows_host(&self, host: &str) -> bool {
        self.any_host || self.hosts.iter().any(|allowed| allowed == host)
    }

    /// Whether a request's `Origin` is this server's own (a page of another site, in the
    /// browser of someone on this machine, is refused).
    pub fn allows_origin(&self, origin: &str) -> bool {
        self.hosts
            .iter()
            .any(|allowed| origin.strip_prefix("http://") == Some(allowed))
    }

    /// Whether an `Authorization` header carries the token as `Bearer TOKEN`, compared in
    /// constant time.
    pub fn allows_bearer(&self, authorization: Option<&str>) -> bool {
        let given = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .unwrap_or("");
        same(given.as_bytes(), self.token.as_bytes())
    }
}

/// Equal, in a time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `bytes` random bytes as lowercase hex: a token, a session id.
pub fn random_hex(bytes: usize) -> Result<String, String> {
    let mut random = vec![0u8; bytes];
    getrandom::fill(&mut random).map_err(|e| e.to_string())?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"", b"a"));
    }

    #[test]
    fn a_server_is_called_by_its_own_names_with_its_token() {
        let token = "0123456789abcdef-token".to_owned();
        let access = Access::new(
            "127.0.0.1:8808".parse().expect("address"),
            Some(token.clone()),
        )
        .expect("usable");
        assert!(access.allows_host("127.0.0.1:8808") && access.allows_host("localhost:8808"));
        assert!(!access.allows_host("127.0.0.1:8808.evil") && !access.allows_host("evil:8808"));
        assert!(access.allows_origin("http://localhost:8808"));
        assert!(!access.allows_origin("null") && !access.allows_origin("https://127.0.0.1:8808"));
        assert!(access.allows_bearer(Some(&format!("Bearer {token}"))));
        assert!(
            !access.allows_bearer(Some(&format!("bearer {token}"))) && !access.allows_bearer(None)
        );
        assert_eq!(access.reachable(), "127.0.0.1:8808");
        let every = Access::new("0.0.0.0:9".parse().expect("address"), None).expect("usable");
        assert!(every.allows_host("machine.example:9"));
        assert_eq!(every.token().len(), 64);
        assert!(
            Access::new(
                "127.0.0.1:1".parse().expect("address"),
                Some("short".into())
            )
            .is_err()
        );
    }
}
