//! The tokens a server accepts and who each one is: full-access tokens
//! (`--token`) and the scoped tokens of `--token-file` ([`TokenFile`],
//! swapped whole on reload through [`ScopedTokens`]).
//!
//! Only SHA-256 digests are kept. A request's token is hashed once and
//! looked up by the digest's first 8 bytes; within that bucket every stored
//! digest is compared in constant time with no early exit
//! ([`select_constant_time`]). Timing can thus tell at most whether the
//! *digest* of what was sent shares 8 bytes with a stored one, which says
//! nothing about how much of a token matched; and a request costs one hash
//! and a few comparisons whether the file holds 1 token or 1,000 (a scan
//! of every digest in constant time would cost a comparison per token per
//! request).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use subtle::{ConditionallySelectable as _, ConstantTimeEq as _};

use crate::access::{Grant, Scope};

/// A SHA-256 digest.
pub type Sha256Digest = [u8; 32];

/// The SHA-256 of a token, as `--token-file` stores it.
pub fn token_digest(token: &[u8]) -> Sha256Digest {
    Sha256::digest(token).into()
}

/// Who sent a request: the token's name and what it may do.
#[derive(Debug, PartialEq, Eq)]
pub struct Principal {
    /// The `name` of its `[[token]]` table; `None` for a `--token` token.
    pub name: Option<String>,
    pub grant: Grant,
}

/// Stored digests by their first 8 bytes.
#[derive(Debug, Default)]
struct DigestIndex {
    buckets: HashMap<[u8; 8], Vec<(Sha256Digest, Arc<Principal>)>>,
}

impl DigestIndex {
    fn insert(&mut self, digest: Sha256Digest, principal: Arc<Principal>) {
        self.buckets
            .entry(bucket_key(&digest))
            .or_default()
            .push((digest, principal));
    }

    fn lookup(&self, digest: &Sha256Digest) -> Option<Arc<Principal>> {
        let bucket = self.buckets.get(&bucket_key(digest))?;
        select_constant_time(bucket, digest).cloned()
    }
}

fn bucket_key(digest: &Sha256Digest) -> [u8; 8] {
    let mut key = [0; 8];
    key.copy_from_slice(&digest[..8]);
    key
}

/// The entry whose digest equals `digest`: every entry is compared with
/// `subtle`'s `ct_eq` and the match is selected without a branch, so the
/// time taken depends on the number of entries only.
pub(crate) fn select_constant_time<'a, T>(
    entries: &'a [(Sha256Digest, T)],
    digest: &Sha256Digest,
) -> Option<&'a T> {
    // 0: none yet; i + 1: entry i.
    let mut found: u64 = 0;
    for (i, (stored, _)) in entries.iter().enumerate() {
        let equal = stored.as_slice().ct_eq(digest.as_slice());
        found.conditional_assign(&(i as u64 + 1), equal);
        #[cfg(test)]
        tests::count_comparison();
    }
    let index = usize::try_from(found.checked_sub(1)?).ok()?;
    entries.get(index).map(|(_, value)| value)
}

/// The full-access tokens (`--token`), fixed for the server's life.
#[derive(Debug, Default)]
pub(crate) struct FullTokens(DigestIndex);

impl FullTokens {
    pub(crate) fn new(tokens: &[String]) -> Self {
        let full = Arc::new(Principal {
            name: None,
            grant: Grant::Full,
        });
        let mut index = DigestIndex::default();
        for token in tokens {
            index.insert(token_digest(token.as_bytes()), full.clone());
        }
        Self(index)
    }

    pub(crate) fn lookup(&self, digest: &Sha256Digest) -> Option<Arc<Principal>> {
        self.0.lookup(digest)
    }
}

/// A parsed `--token-file`.
#[derive(Debug, Default)]
pub struct TokenFile {
    index: DigestIndex,
    names: Vec<String>,
}

/// Why a token file was refused: the 1-based line and what is wrong there.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {reason}")]
pub struct TokenFileError {
    pub line: usize,
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDocument {
    #[serde(default)]
    token: Vec<toml::Spanned<TokenTable>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenTable {
    name: toml::Spanned<String>,
    sha256: toml::Spanned<String>,
    scopes: toml::Spanned<Vec<toml::Spanned<String>>>,
}

impl TokenFile {
    /// Parses the TOML text of a token file:
    ///
    /// ```toml
    /// [[token]]
    /// name = "orders-producer"
    /// sha256 = "<64 lowercase hex digits: the SHA-256 of the secret>"
    /// scopes = ["publish:orders-*", "read:orders-*"]
    /// ```
    ///
    /// Refused, naming the line: TOML that does not parse, an unknown key,
    /// a missing or empty `name`, a name or digest given twice, a digest
    /// that is not 64 lowercase hex digits, no scopes, and a scope that is
    /// not `VERB:QUEUE_GLOB` with a known verb.
    pub fn parse(text: &str) -> Result<TokenFile, TokenFileError> {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let at = |span: std::ops::Range<usize>, reason: String| TokenFileError {
            line: line_of(span.start),
            reason,
        };
        let document: FileDocument = toml::from_str(text).map_err(|error| TokenFileError {
            line: error.span().map_or(1, |span| line_of(span.start)),
            reason: error.message().to_owned(),
        })?;
        let mut file = TokenFile::default();
        let mut digests = HashMap::new();
        for table in document.token {
            let table = table.into_inner();
            let name = table.name.get_ref().trim().to_owned();
            if name.is_empty() {
                return Err(at(table.name.span(), "a token's name is empty".into()));
            }
            if file.names.contains(&name) {
                return Err(at(
                    table.name.span(),
                    format!("the name {name:?} is given twice"),
                ));
            }
            let digest = parse_digest(table.sha256.get_ref())
                .ok_or_else(|| at(table.sha256.span(), format!(
                    "token {name:?}: sha256 must be 64 lowercase hex digits (the SHA-256 of the secret; `delayd token hash` prints it)"
                )))?;
            if let Some(other) = digests.insert(digest, name.clone()) {
                return Err(at(
                    table.sha256.span(),
                    format!("token {name:?} has the same sha256 as token {other:?}"),
                ));
            }
            let scopes_span = table.scopes.span();
            let scopes = table
                .scopes
                .into_inner()
                .into_iter()
                .map(|scope| {
                    Scope::parse(scope.get_ref())
                        .map_err(|reason| at(scope.span(), format!("token {name:?}: {reason}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if scopes.is_empty() {
                return Err(at(scopes_span, format!("token {name:?} has no scopes")));
            }
            let principal = Principal {
                name: Some(name.clone()),
                grant: Grant::Scoped(scopes.into()),
            };
            file.index.insert(digest, Arc::new(principal));
            file.names.push(name);
        }
        Ok(file)
    }

    /// The tokens' names, in file order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub(crate) fn lookup(&self, digest: &Sha256Digest) -> Option<Arc<Principal>> {
        self.index.lookup(digest)
    }
}

fn parse_digest(text: &str) -> Option<Sha256Digest> {
    let lowercase_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if text.len() != 64 || !text.bytes().all(lowercase_hex) {
        return None;
    }
    let mut digest = [0; 32];
    hex::decode_to_slice(text, &mut digest).ok()?;
    Some(digest)
}

/// The scoped tokens a server accepts now: a handle shared by the server
/// (which reads it once per request) and whoever reloads the file (`delayd
/// serve` on SIGHUP). A replacement takes effect at the next request; a
/// request already authorized finishes under the set it started with.
#[derive(Clone)]
pub struct ScopedTokens(Arc<ArcSwap<TokenFile>>);

impl ScopedTokens {
    pub fn new(file: TokenFile) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(file)))
    }

    pub fn replace(&self, file: TokenFile) {
        self.0.store(Arc::new(file));
    }

    pub(crate) fn lookup(&self, digest: &Sha256Digest) -> Option<Arc<Principal>> {
        self.0.load().lookup(digest)
    }

    /// The current tokens' names.
    pub fn names(&self) -> Vec<String> {
        self.0.load().names.clone()
    }
}

impl std::fmt::Debug for ScopedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ScopedTokens")
            .field(&self.0.load().names)
            .finish()
    }
}

/// Two handles are equal when they are the same handle.
impl PartialEq for ScopedTokens {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ScopedTokens {}

#[cfg(test)]
#[path = "keyring_tests.rs"]
mod tests;
