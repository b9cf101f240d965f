//! What a token may do and what each route needs (api.md "Scoped
//! tokens"): a scope is `VERB:QUEUE_GLOB`, a token's [`Grant`] is its
//! scopes (or full access), and [`route_need`] reads the one table that
//! maps every route to the verb it needs ([`ROUTE_NEEDS`]). [`authorize`]
//! is the check between the two; it runs in the per-request middleware,
//! where the route's template is known.
//!
//! Architecture invariant: a route of `routes::api_routes` without an
//! entry in [`ROUTE_NEEDS`] fails `tests::every_served_route_has_a_need`;
//! nothing else decides what a route needs.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::http::Method;

use crate::error::ApiError;
use crate::routes::Verb as HttpVerb;

/// A scope's verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeVerb {
    /// Enqueue, batch, schedule trigger.
    Publish,
    /// Lease, ack, acks, nack, extend.
    Consume,
    /// Queue objects, messages with payloads, history, dead letters, keys,
    /// schedules, preview.
    Read,
    /// Cancel, reschedule, redrive, pause, resume.
    Manage,
    /// Queue and schedule create, replace and delete.
    Admin,
}

impl ScopeVerb {
    pub const ALL: [ScopeVerb; 5] = [
        ScopeVerb::Publish,
        ScopeVerb::Consume,
        ScopeVerb::Read,
        ScopeVerb::Manage,
        ScopeVerb::Admin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ScopeVerb::Publish => "publish",
            ScopeVerb::Consume => "consume",
            ScopeVerb::Read => "read",
            ScopeVerb::Manage => "manage",
            ScopeVerb::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The verbs of one scope: one, or all five for `*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct VerbSet(u8);

impl VerbSet {
    fn parse(text: &str) -> Option<VerbSet> {
        if text == "*" {
            return Some(VerbSet(
                ScopeVerb::ALL.iter().fold(0, |all, v| all | v.bit()),
            ));
        }
        ScopeVerb::ALL
            .into_iter()
            .find(|verb| verb.name() == text)
            .map(|verb| VerbSet(verb.bit()))
    }

    fn contains(self, verb: ScopeVerb) -> bool {
        self.0 & verb.bit() != 0
    }
}

/// A queue-name pattern whose `*` matches any run of characters
/// (including none); every other character matches itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueGlob {
    /// The text between the stars: `orders-*` is `["orders-", ""]`, so a
    /// glob without a star is one part and `*` alone is two empty ones.
    parts: Box<[Box<str>]>,
}

impl QueueGlob {
    /// A glob whose other characters are queue-name characters (core's
    /// rule, checked with each star as a letter), so that a typo such as
    /// `orders-?` is refused rather than matching nothing forever.
    pub fn parse(text: &str) -> Result<QueueGlob, String> {
        if !delayd_core::is_valid_queue_name(&text.replace('*', "a")) {
            return Err(format!(
                "{text:?} is not a queue glob (queue-name characters and `*`, \
                 not starting with `-`, at most {} characters)",
                delayd_core::QUEUE_NAME_MAX_LEN
            ));
        }
        Ok(QueueGlob {
            parts: text.split('*').map(Box::from).collect(),
        })
    }

    pub fn matches(&self, name: &str) -> bool {
        let [first, middle @ .., last] = &*self.parts else {
            // No star: one part, matched exactly.
            return self.parts.first().is_some_and(|only| **only == *name);
        };
        if name.len() < first.len() + last.len()
            || !name.starts_with(&**first)
            || !name.ends_with(&**last)
        {
            return false;
        }
        // Leftmost match of each middle part in turn: taking the earliest
        // place never rules out a later part that a later place allowed.
        let mut rest = &name[first.len()..name.len() - last.len()];
        for part in middle {
            match rest.find(&**part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }

    /// Whether it matches every queue name (`*`, `**`).
    fn matches_all(&self) -> bool {
        self.parts.len() > 1 && self.parts.iter().all(|part| part.is_empty())
    }
}

/// One `VERB:QUEUE_GLOB` of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    verbs: VerbSet,
    glob: QueueGlob,
    /// As written, for `GET /v1/whoami`.
    text: String,
}

impl Scope {
    /// `publish:orders-*`, `read:*`, `*:*`. The reason names what is wrong.
    pub fn parse(text: &str) -> Result<Scope, String> {
        let Some((verb, glob)) = text.split_once(':') else {
            return Err(format!("scope {text:?} is not VERB:QUEUE_GLOB"));
        };
        let verbs = VerbSet::parse(verb).ok_or_else(|| {
            format!(
                "scope {text:?} has the unknown verb {verb:?} \
                 (publish, consume, read, manage, admin or *)"
            )
        })?;
        let glob = QueueGlob::parse(glob).map_err(|reason| format!("scope {text:?}: {reason}"))?;
        Ok(Scope {
            verbs,
            glob,
            text: text.to_owned(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// What a token may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// A `--token` token, or any request to a server without tokens.
    Full,
    /// A `--token-file` token.
    Scoped(Box<[Scope]>),
}

impl Grant {
    /// Whether `verb` is allowed on `queue`.
    pub fn allows(&self, verb: ScopeVerb, queue: &str) -> bool {
        match self {
            Grant::Full => true,
            Grant::Scoped(scopes) => scopes
                .iter()
                .any(|scope| scope.verbs.contains(verb) && scope.glob.matches(queue)),
        }
    }

    /// Whether `verb` is allowed on at least one queue name.
    fn allows_somewhere(&self, verb: ScopeVerb) -> bool {
        match self {
            Grant::Full => true,
            Grant::Scoped(scopes) => scopes.iter().any(|scope| scope.verbs.contains(verb)),
        }
    }

    /// Whether `verb` is allowed on every queue name (`verb:*`).
    fn allows_everywhere(&self, verb: ScopeVerb) -> bool {
        match self {
            Grant::Full => true,
            Grant::Scoped(scopes) => scopes
                .iter()
                .any(|scope| scope.verbs.contains(verb) && scope.glob.matches_all()),
        }
    }

    /// The scopes as written (`["*:*"]` for full access).
    pub fn scope_texts(&self) -> Vec<String> {
        match self {
            Grant::Full => vec!["*:*".to_owned()],
            Grant::Scoped(scopes) => scopes.iter().map(|s| s.text.clone()).collect(),
        }
    }
}

/// What a route needs of the request's token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Nothing: no token (`/healthz`, `/readyz`, `/openapi.json`).
    Open,
    /// Any valid token (`/v1/whoami`; `GET /v1/queues`, which lists only
    /// the queues the token may `read`).
    Token,
    /// The verb on the queue of the path (`/v1/queues/{queue}/...`).
    Queue(ScopeVerb),
    /// The verb on at least one queue: the schedule preview, which touches
    /// no queue and stores nothing.
    AnyQueue(ScopeVerb),
    /// The verb on every queue (`/metrics`, whose gauges name every queue:
    /// `read:*`).
    EveryQueue(ScopeVerb),
}

/// The route that answers a message's history.
pub(crate) const HISTORY_ROUTE: &str = "/v1/queues/{queue}/messages/{id}/events";

/// Every route (method, template) and what it needs: the one table.
pub(crate) const ROUTE_NEEDS: &[(HttpVerb, &str, Need)] = {
    use HttpVerb::{Delete, Get, Patch, Post, Put};
    use Need::{AnyQueue, EveryQueue, Open, Queue, Token};
    use ScopeVerb::{Admin, Consume, Manage, Publish, Read};
    &[
        (Get, "/healthz", Open),
        (Get, "/readyz", Open),
        (Get, "/openapi.json", Open),
        (Get, "/metrics", EveryQueue(Read)),
        (Get, "/v1/whoami", Token),
        (Get, "/v1/queues", Token),
        // publish
        (Post, "/v1/queues/{queue}/messages", Queue(Publish)),
        (Post, "/v1/queues/{queue}/batch", Queue(Publish)),
        (
            Post,
            "/v1/queues/{queue}/schedules/{id}/trigger",
            Queue(Publish),
        ),
        // consume
        (Post, "/v1/queues/{queue}/leases", Queue(Consume)),
        (Post, "/v1/queues/{queue}/messages/{id}/ack", Queue(Consume)),
        (Post, "/v1/queues/{queue}/acks", Queue(Consume)),
        (
            Post,
            "/v1/queues/{queue}/messages/{id}/nack",
            Queue(Consume),
        ),
        (
            Post,
            "/v1/queues/{queue}/messages/{id}/extend",
            Queue(Consume),
        ),
        // read
        (Get, "/v1/queues/{queue}", Queue(Read)),
        (Get, "/v1/queues/{queue}/messages", Queue(Read)),
        (Get, "/v1/queues/{queue}/messages/{id}", Queue(Read)),
        (Get, HISTORY_ROUTE, Queue(Read)),
        (Get, "/v1/queues/{queue}/histogram", Queue(Read)),
        (Get, "/v1/queues/{queue}/dead", Queue(Read)),
        (Get, "/v1/queues/{queue}/keys/{key}", Queue(Read)),
        (Get, "/v1/queues/{queue}/schedules", Queue(Read)),
        (Get, "/v1/queues/{queue}/schedules/{id}", Queue(Read)),
        (Post, "/v1/schedules/preview", AnyQueue(Read)),
        // manage
        (Delete, "/v1/queues/{queue}/messages/{id}", Queue(Manage)),
        (Patch, "/v1/queues/{queue}/messages/{id}", Queue(Manage)),
        (Post, "/v1/queues/{queue}/dead/redrive", Queue(Manage)),
        (Post, "/v1/queues/{queue}/pause", Queue(Manage)),
        (Post, "/v1/queues/{queue}/resume", Queue(Manage)),
        (
            Post,
            "/v1/queues/{queue}/schedules/{id}/pause",
            Queue(Manage),
        ),
        (
            Post,
            "/v1/queues/{queue}/schedules/{id}/resume",
            Queue(Manage),
        ),
        // admin
        (Put, "/v1/queues/{queue}", Queue(Admin)),
        (Delete, "/v1/queues/{queue}", Queue(Admin)),
        (Put, "/v1/queues/{queue}/schedules/{id}", Queue(Admin)),
        (Delete, "/v1/queues/{queue}/schedules/{id}", Queue(Admin)),
    ]
};

/// [`ROUTE_NEEDS`] by template, then by method (`HttpVerb as usize`).
static NEEDS_BY_ROUTE: LazyLock<HashMap<&'static str, [Option<Need>; 5]>> = LazyLock::new(|| {
    let mut by_route: HashMap<&'static str, [Option<Need>; 5]> = HashMap::new();
    for &(verb, route, need) in ROUTE_NEEDS {
        by_route.entry(route).or_default()[verb as usize] = Some(need);
    }
    by_route
});

/// What `method` on the route `template` needs; `None` when the table has
/// no entry (then the router answers 405: every served pair has one). A
/// `HEAD` needs what the `GET` it runs needs.
pub(crate) fn route_need(method: &Method, template: &str) -> Option<Need> {
    let verb = match *method {
        Method::GET | Method::HEAD => HttpVerb::Get,
        Method::POST => HttpVerb::Post,
        Method::PUT => HttpVerb::Put,
        Method::PATCH => HttpVerb::Patch,
        Method::DELETE => HttpVerb::Delete,
        _ => return None,
    };
    NEEDS_BY_ROUTE.get(template)?[verb as usize]
}

/// The queue named in a `/v1/queues/{queue}/...` path, percent-decoded as
/// the handlers' path extractor decodes it (`a%2Fb` is `a/b`).
fn path_queue(path: &str) -> Option<std::borrow::Cow<'_, str>> {
    let rest = path.strip_prefix("/v1/queues/")?;
    let segment = rest.split('/').next()?;
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()
}

/// Whether `grant` may make the request `method path` to the route
/// `template`: `Err` is the 403 `forbidden`, naming the verb and the
/// queue.
pub(crate) fn authorize(
    grant: &Grant,
    method: &Method,
    template: &str,
    path: &str,
) -> Result<(), ApiError> {
    if matches!(grant, Grant::Full) {
        return Ok(());
    }
    match route_need(method, template) {
        None | Some(Need::Open | Need::Token) => Ok(()),
        Some(Need::Queue(verb)) => match path_queue(path) {
            Some(queue) if grant.allows(verb, &queue) => Ok(()),
            Some(queue) => Err(forbidden(format!(
                "this token may not {verb} on queue {queue:?}: it has no {verb}:GLOB \
                 scope whose glob matches the queue",
                verb = verb.name()
            ))),
            None => Err(forbidden(format!(
                "this token may not {} on this path: its queue name is not UTF-8",
                verb.name()
            ))),
        },
        Some(Need::AnyQueue(verb)) if grant.allows_somewhere(verb) => Ok(()),
        Some(Need::AnyQueue(verb)) => Err(forbidden(format!(
            "this token may not {verb} on any queue: {template} needs a {verb}:GLOB scope",
            verb = verb.name()
        ))),
        Some(Need::EveryQueue(verb)) if grant.allows_everywhere(verb) => Ok(()),
        Some(Need::EveryQueue(verb)) => Err(forbidden(format!(
            "this token may not {verb} on every queue: {template} needs the scope {verb}:*",
            verb = verb.name()
        ))),
    }
}

fn forbidden(message: String) -> ApiError {
    ApiError::new(axum::http::StatusCode::FORBIDDEN, "forbidden", message)
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
