//! delayd's web dashboard, served at `/ui` (see docs/dashboard.md).
//!
//! # Layout
//! - [`assets`]: the dashboard's HTML, CSS and JavaScript (plain ES modules,
//!   no build step), embedded with `include_str!` and served by
//!   [`ui_router`] with their content types and a strict
//!   Content-Security-Policy. The page itself needs no token; everything it
//!   shows comes from `/v1` with the bearer token it keeps in the browser's
//!   session storage.
//! - [`api`]: [`api_router`], the two read-only endpoints the dashboard
//!   needs beyond api.md (due-time histogram, listing one state); the server
//!   merges it behind its auth layer.
//! - [`wire`]: their JSON bodies (message objects exactly as api.md's);
//!   [`error`]: their failures in api.md's error shape.
//!
//! The browser code builds every node with `createElement`/`textContent`,
//! never `innerHTML` with data: payloads, ids and headers are
//! attacker-controlled.

#![forbid(unsafe_code)]

pub mod api;
pub mod assets;
pub mod error;
pub mod wire;

pub use api::api_router;
pub use assets::{ui_router, CONTENT_SECURITY_POLICY};
pub use error::ApiError;
