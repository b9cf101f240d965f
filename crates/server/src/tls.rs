//! [`TlsConfig`]: HTTPS for the HTTP listener (rustls with the `ring`
//! provider). The caller reads the PEM files, so error messages can name
//! them; this module only parses and checks that the key fits the chain.

use std::fmt;
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("no PEM certificate found in the certificate file")]
    NoCertificate,
    #[error("the certificate file is not valid PEM: {0}")]
    BadCertificate(String),
    #[error("no PEM private key (PKCS#8, PKCS#1 or SEC1) found in the key file: {0}")]
    BadKey(String),
    #[error("the certificate and key cannot be used together: {0}")]
    Rejected(#[source] rustls::Error),
}

/// A certificate chain and its private key, ready to accept connections.
#[derive(Clone)]
pub struct TlsConfig {
    acceptor: TlsAcceptor,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsConfig { .. }")
    }
}

impl TlsConfig {
    /// From the PEM text of a certificate chain (leaf first) and of its
    /// private key.
    pub fn from_pem(cert_chain: &[u8], key: &[u8]) -> Result<Self, TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| TlsError::BadCertificate(err.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate);
        }
        let key =
            PrivateKeyDer::from_pem_slice(key).map_err(|err| TlsError::BadKey(err.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Rejected)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(TlsError::Rejected)?;
        // The listener speaks both; ALPN lets HTTP/2 clients pick it.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}
