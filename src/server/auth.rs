//! Basic auth (`--enable_auth`): the one credential check both transports
//! ask, each reading the `Authorization` header or metadata its own way.

/// Basic auth, for HTTP and gRPC alike: the expected `user:password`, compared in constant time.
pub struct BasicAuth {
    credentials: Vec<u8>,
}

impl BasicAuth {
    pub fn new(user: &str, password: &str) -> BasicAuth {
        BasicAuth {
            credentials: format!("{user}:{password}").into_bytes(),
        }
    }

    /// Whether an `Authorization` value (HTTP header or gRPC metadata) carries the credentials.
    pub fn allows_header(&self, header: Option<&str>) -> bool {
        use base64::Engine;
        use subtle::ConstantTimeEq;
        let Some((scheme, encoded)) = header.and_then(|h| h.split_once(' ')) else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return false;
        }
        match base64::engine::general_purpose::STANDARD.decode(encoded.trim()) {
            Ok(given) => given.ct_eq(&self.credentials).into(),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn only_the_configured_credentials_pass() {
        let auth = BasicAuth::new("user", "secret");
        let header = |text: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(text));
        assert!(auth.allows_header(Some(&header("user:secret"))));
        assert!(auth.allows_header(Some(&format!("basic {}", &header("user:secret")[6..]))));
        assert!(!auth.allows_header(Some(&header("user:wrong"))));
        assert!(!auth.allows_header(Some("Bearer token")));
        assert!(!auth.allows_header(Some("Basic !!!")));
        assert!(!auth.allows_header(None));
    }
}
