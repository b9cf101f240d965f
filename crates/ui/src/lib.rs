//! delayd's web dashboard, served at `/ui` (see docs/dashboard.md): assets
//! only. The two read-only `/v1` endpoints the dashboard reads beyond
//! api.md are the HTTP server's (`delayd-server`, `routes::dashboard`), so
//! this crate depends on no other delayd crate.
//!
//! # Layout
//! - [`assets`]: the dashboard's HTML, CSS and JavaScript (plain ES modules,
//!   no build step), embedded with `include_str!` and served by
//!   [`ui_router`] with their content types and a strict
//!   Content-Security-Policy. The page itself needs no token; everything it
//!   shows comes from `/v1` with the bearer token it keeps in the browser's
//!   session storage; `access.js` asks `GET /v1/whoami` what that token
//!   may do, and the views disable the actions it may not take.
//!
//! The browser code builds every node with `createElement`/`textContent`,
//! never `innerHTML` with data: payloads, ids and headers are
//! attacker-controlled.

pub mod assets;

pub use assets::{ui_router, CONTENT_SECURITY_POLICY};
