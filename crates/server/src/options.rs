//! [`ServerOptions`]: the limits and switches of the HTTP API.

use crate::ScopedTokens;

/// 1 MiB (api.md's default `--max-payload`).
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;
/// 64 MiB. A request body holds at most one batch; a full batch of maximal
/// payloads (1000 × 1 MiB, more with base64) would be an unreasonable
/// request, so the body cap is its own, smaller limit.
pub const DEFAULT_MAX_BODY: usize = 64 * 1024 * 1024;
/// 10 years of 365 days (api.md's default `--max-delay`).
pub const DEFAULT_MAX_DELAY_MS: u64 = 3650 * 24 * 60 * 60 * 1000;
pub const DEFAULT_MAX_BATCH: usize = 1000;
pub const DEFAULT_MAX_WAIT_MS: u64 = 60_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerOptions {
    /// Full-access bearer tokens (`--token`) accepted on `/v1/*` and
    /// `/metrics`; empty, with no `scoped_tokens`: no auth.
    pub tokens: Vec<String>,
    /// Scoped tokens (`--token-file`); the holder of another clone of the
    /// handle may replace them while the server runs.
    pub scoped_tokens: Option<ScopedTokens>,
    /// Largest payload in bytes (after base64 decoding): 413 beyond.
    pub max_payload: usize,
    /// Largest request body in bytes: 413 beyond.
    pub max_body: usize,
    /// Longest `delay_ms` (or `deliver_at - now`): 400 beyond.
    pub max_delay_ms: u64,
    /// Create unknown queues on enqueue (`--no-auto-create` turns it off).
    pub auto_create: bool,
    /// Most messages in one batch request.
    pub max_batch: usize,
    /// Longest `wait_ms` of a lease call.
    pub max_wait_ms: u64,
    /// Allowed push targets (`--push-allow CIDR|HOST`); empty allows none.
    pub push_allow: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            scoped_tokens: None,
            max_payload: DEFAULT_MAX_PAYLOAD,
            max_body: DEFAULT_MAX_BODY,
            max_delay_ms: DEFAULT_MAX_DELAY_MS,
            auto_create: true,
            max_batch: DEFAULT_MAX_BATCH,
            max_wait_ms: DEFAULT_MAX_WAIT_MS,
            push_allow: Vec::new(),
        }
    }
}

impl ServerOptions {
    /// Whether requests to `/v1/*` and `/metrics` need a token.
    pub fn auth_required(&self) -> bool {
        !self.tokens.is_empty() || self.scoped_tokens.is_some()
    }
}
