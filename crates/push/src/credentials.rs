//! Push credentials (api.md, "Push credentials"): the headers a queue's
//! push target sends with every request, and the rule that credentials
//! never ride in the URL. Checked here once, by the server at `PUT` and by
//! the worker when it builds its target.

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::deliver::HOP_BY_HOP;

/// Why a push target's credentials are refused (HTTP 400 at `PUT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    #[error("push.url must not carry user info (credentials go in push.headers)")]
    UserInfo,
    #[error("push.headers: at most {max} headers, got {got}")]
    TooMany { max: usize, got: usize },
    #[error("push.headers: {name:?} is not a valid HTTP header name")]
    InvalidName { name: String },
    #[error("push.headers: {name:?} cannot be set (delayd-* and connection headers are delayd's)")]
    Reserved { name: String },
    #[error("push.headers: the value of {name:?} is not a valid HTTP header value")]
    InvalidValue { name: String },
}

/// Refuses a push URL with user info (`https://user:pw@host/`). Only new
/// configurations are checked: a stored URL keeps working.
pub fn check_url_userinfo(url: &str) -> Result<(), CredentialsError> {
    match url::Url::parse(url) {
        Ok(parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            Err(CredentialsError::UserInfo)
        }
        // A URL that does not parse is the allowlist check's to name.
        _ => Ok(()),
    }
}

/// The push headers as an HTTP header map, or why they are refused: at
/// most [`delayd_core::PushConfig::MAX_HEADERS`], valid names and values,
/// none of the `delayd-*` or hop-by-hop headers.
pub fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, CredentialsError> {
    let max = delayd_core::PushConfig::MAX_HEADERS;
    if headers.len() > max {
        return Err(CredentialsError::TooMany {
            max,
            got: headers.len(),
        });
    }
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("delayd-") || HOP_BY_HOP.contains(&lower.as_str()) {
            return Err(CredentialsError::Reserved { name: name.clone() });
        }
        let header = HeaderName::from_bytes(lower.as_bytes())
            .map_err(|_| CredentialsError::InvalidName { name: name.clone() })?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| CredentialsError::InvalidValue { name: name.clone() })?;
        map.insert(header, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn userinfo_is_refused() {
        assert_eq!(
            check_url_userinfo("https://user:pw@example.com/hook"),
            Err(CredentialsError::UserInfo)
        );
        assert_eq!(
            check_url_userinfo("https://user@example.com/hook"),
            Err(CredentialsError::UserInfo)
        );
        assert_eq!(check_url_userinfo("https://example.com/hook?a=b@c"), Ok(()));
    }

    #[test]
    fn headers_are_checked() {
        let ok = header_map(&headers(&[("Authorization", "Bearer t"), ("x-key", "1")]))
            .expect("valid headers");
        assert_eq!(
            ok.get("authorization").map(|v| v.as_bytes()),
            Some(&b"Bearer t"[..])
        );
        let cases = [
            headers(&[("delayd-id", "x")]),
            headers(&[("Host", "evil")]),
            headers(&[("bad name", "x")]),
            headers(&[("x", "line\nbreak")]),
        ];
        for case in cases {
            assert!(header_map(&case).is_err(), "{case:?}");
        }
        let many: BTreeMap<String, String> = (0..17)
            .map(|i| (format!("x-{i}"), "v".to_owned()))
            .collect();
        assert!(matches!(
            header_map(&many),
            Err(CredentialsError::TooMany { .. })
        ));
    }
}
