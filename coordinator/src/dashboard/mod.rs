//! The operators' dashboard: fleet, jobs, job, studies, study, workers, verification and
//! stats pages, served by the coordinator itself on its one port, from assets compiled
//! into the binary (no build step, no separate process).
//!
//! The pages are one static shell plus `app.js` (and `studies.js`, the order-study pages
//! drawn with its helpers), which reads the JSON API under `/api/`
//! every two seconds and draws with the DOM (text is only ever set as text, so host,
//! job and puzzle names from workers and files are escaped by construction) and SVG
//! (charts, and boards drawn the way puzzle people draw Eternity II: four triangles per
//! cell, one per edge colour). A strict Content-Security-Policy forbids inline script, so
//! a name that slipped through could still not run. Actions (cancel a job, release a
//! host) are `POST`s with the admin token as a bearer token, which the browser keeps for
//! the tab only (sessionStorage).

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX_HTML: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const STUDIES_JS: &str = include_str!("studies.js");
const STYLE_CSS: &str = include_str!("style.css");
const FAVICON_SVG: &str = include_str!("favicon.svg");

/// Pages may load scripts, styles and data from this origin only; no inline script.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
        .into_response()
}

/// The page and asset routes (the JSON API lives in `server.rs`).
pub fn routes<S: Clone + Send + Sync + 'static>() -> axum::Router<S> {
    axum::Router::new()
        .route("/", get(page))
        .route("/jobs", get(page))
        .route("/jobs/{id}", get(page))
        .route("/studies", get(page))
        .route("/studies/{id}", get(page))
        .route("/workers", get(page))
        .route("/verification", get(page))
        .route("/stats", get(page))
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/assets/studies.js",
            get(|| async { asset("text/javascript; charset=utf-8", STUDIES_JS) }),
        )
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route(
            "/assets/favicon.svg",
            get(|| async { asset("image/svg+xml", FAVICON_SVG) }),
        )
}
