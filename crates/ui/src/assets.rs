//! The dashboard's static files, embedded in the binary (the machine may
//! have no internet, and there is no separate process to deploy), served
//! under `/ui` with their content types and a strict Content-Security-Policy.

use axum::extract::Path;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// Sent on every `/ui` response. Only our own origin may provide scripts,
/// styles, images and API calls; no inline script or style runs, so an
/// injected string can never execute even if some code path rendered it as
/// markup. `frame-ancestors` stops click-jacking of the purge button.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// Path below `/ui/`.
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_str!(concat!("../assets/", $path)),
        }
    };
}

/// Every file of the dashboard. `index.html` is also served at `/ui` and
/// `/ui/`.
pub const ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("app.css", CSS),
    asset!("favicon.svg", SVG),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("access.js", JS),
    asset!("dom.js", JS),
    asset!("charts.js", JS),
    asset!("metrics.js", JS),
    asset!("overview.js", JS),
    asset!("queue.js", JS),
    asset!("schedules.js", JS),
    asset!("flow.js", JS),
    asset!("message.js", JS),
    asset!("history.js", JS),
];

/// Looks an asset up by its path below `/ui/`.
pub fn asset(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// `/ui`, `/ui/` and `/ui/{asset}`: the dashboard, no auth needed (all data
/// comes from `/v1` with the token the page holds).
pub fn ui_router() -> Router {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{*asset}", get(file))
}

async fn index() -> Response {
    serve(asset("index.html"))
}

async fn file(Path(path): Path<String>) -> Response {
    serve(asset(&path))
}

fn serve(asset: Option<&'static Asset>) -> Response {
    let mut response = match asset {
        Some(asset) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such dashboard file\n").into_response(),
    };
    let headers = response.headers_mut();
    for (name, value) in security_headers() {
        headers.insert(name, value);
    }
    response
}

fn security_headers() -> [(HeaderName, HeaderValue); 5] {
    [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        // The files change with the binary; revalidating is cheap locally.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ]
}
