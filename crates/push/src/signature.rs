//! The `delayd-signature` header: `v1=<lowercase hex HMAC-SHA256(secret,
//! timestamp + "." + body)>`, where `timestamp` is the `delayd-timestamp`
//! header (Unix seconds, decimal). Signing the timestamp with the body lets a
//! receiver refuse replays older than its tolerance.
//!
//! A receiver checks a request like this (see docs/push.md for the full
//! example, with the replay window, and a Python version):
//!
//! ```
//! use delayd_push::{sign, verify_signature};
//!
//! let body = br#"{"order":42}"#;
//! // What delayd sent: the `delayd-timestamp` and `delayd-signature` headers.
//! let timestamp: u64 = 1_700_000_000;
//! let signature = sign(b"shared secret", timestamp, body);
//!
//! assert!(verify_signature(b"shared secret", timestamp, body, &signature));
//! assert!(!verify_signature(b"shared secret", timestamp, b"tampered", &signature));
//! ```

use hmac::{Mac, SimpleHmac};
use sha2::Sha256;

/// The version prefix of the signature header value.
pub const SIGNATURE_VERSION: &str = "v1";

type HmacSha256 = SimpleHmac<Sha256>;

/// The MAC state after absorbing `timestamp "." body`. `None` cannot happen
/// (HMAC takes keys of every length; long keys are hashed first), but the
/// constructor is fallible in general, and a signature helper must not panic.
fn mac(secret: &[u8], timestamp: u64, body: &[u8]) -> Option<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(secret).ok()?;
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(mac)
}

/// The full `delayd-signature` header value for a delivery:
/// `v1=<64 lowercase hex digits>`.
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let tag = mac(secret, timestamp, body)
        .map(|mac| hex::encode(mac.finalize().into_bytes()))
        .unwrap_or_default();
    format!("{SIGNATURE_VERSION}={tag}")
}

/// Whether `header_value` (the `delayd-signature` header as received) is a
/// valid signature of `timestamp` (the `delayd-timestamp` header, parsed) and
/// `body` under `secret`. The comparison is constant-time. Receivers should
/// also reject timestamps too far from their own clock (say 5 minutes) to
/// refuse replays.
///
/// Several comma-separated signatures are accepted (any one may match), so a
/// future secret rotation can send old and new signatures side by side.
pub fn verify_signature(secret: &[u8], timestamp: u64, body: &[u8], header_value: &str) -> bool {
    let Some(expected) = mac(secret, timestamp, body) else {
        return false;
    };
    header_value.split(',').any(|part| {
        let Some(hex_tag) = part.trim().strip_prefix("v1=") else {
            return false;
        };
        let Ok(tag) = hex::decode(hex_tag) else {
            return false;
        };
        // `verify_slice` compares in constant time.
        expected.clone().verify_slice(&tag).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // Computed independently: python3 -c 'import hmac,hashlib;
        // print(hmac.new(b"key", b"1700000000.hello", hashlib.sha256).hexdigest())'
        assert_eq!(
            sign(b"key", 1_700_000_000, b"hello"),
            "v1=4d583a269f4f276a3fa80ff31b5a01879a848096983222a17893d198418939aa"
        );
    }

    #[test]
    fn verifies_own_signature_only() {
        let header = sign(b"secret", 42, b"body");
        assert!(verify_signature(b"secret", 42, b"body", &header));
        assert!(!verify_signature(b"other", 42, b"body", &header));
        assert!(!verify_signature(b"secret", 43, b"body", &header));
        assert!(!verify_signature(b"secret", 42, b"bodz", &header));
        assert!(!verify_signature(b"secret", 42, b"body", ""));
        assert!(!verify_signature(b"secret", 42, b"body", "v1=zz"));
        assert!(!verify_signature(b"secret", 42, b"body", &header[..20]));
        let upper = header.to_uppercase().replacen("V1=", "v1=", 1);
        assert!(verify_signature(b"secret", 42, b"body", &upper));
        let rotated = format!("v1=00, {header}");
        assert!(verify_signature(b"secret", 42, b"body", &rotated));
    }

    #[test]
    fn empty_secret_and_body() {
        let header = sign(b"", 0, b"");
        assert!(verify_signature(b"", 0, b"", &header));
    }
}
