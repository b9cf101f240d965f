//! The HTTP client's DNS resolver: resolution and the allowlist check are
//! one step, so the client can only ever connect to addresses the
//! [`PushPolicy`] has just approved (no window for DNS rebinding).
//!
//! IP-literal URLs never reach a resolver; the dispatcher checks those with
//! [`PushPolicy::check_url`] before each request instead.

use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::policy::PushPolicy;

pub(crate) struct PolicyResolver {
    policy: Arc<PushPolicy>,
}

impl PolicyResolver {
    pub(crate) fn new(policy: Arc<PushPolicy>) -> Self {
        Self { policy }
    }
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            // Port 0: the connector substitutes the URL's port.
            let addrs = policy.resolve_checked(name.as_str(), 0).await?;
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}
