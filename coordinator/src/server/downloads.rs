//! `GET /downloads/{*path}`: the releases folder's files (which ones, and the limits:
//! [`crate::releases::downloads`]). A binary needs a worker token and a download slot;
//! it is streamed and cut off when it reads too slowly or too long.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use e2fleet_proto::release::BINARY;
use tokio_stream::StreamExt;

use super::errors::http_error;
use super::http::Caller;
use crate::fleet::Fleet;
use crate::releases::downloads::{CHUNK_TIME, DOWNLOAD_TIME, served_file};

/// `GET /downloads/{*path}`
pub async fn download(
    State(fleet): State<Arc<Fleet>>,
    Path(path): Path<String>,
    headers: HeaderMap,
    caller: Caller,
) -> Response {
    let (Some(releases), Some((relative, binary))) = (fleet.releases(), served_file(&path)) else {
        return (StatusCode::NOT_FOUND, "no such download").into_response();
    };
    let permit = if binary {
        if let Err(e) = crate::server::http::worker(&fleet, &headers, &caller).await {
            return http_error(e);
        }
        let Ok(permit) = fleet.download_slots().0.clone().try_acquire_owned() else {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "30")],
                "busy with other downloads; retry later",
            )
                .into_response();
        };
        Some(permit)
    } else {
        None
    };
    let full = releases.dir().join(relative);
    let file = match tokio::fs::File::open(&full).await {
        Ok(f) => f,
        Err(_) => return (StatusCode::NOT_FOUND, "no such download").into_response(),
    };
    let Ok(meta) = file.metadata().await else {
        return (StatusCode::NOT_FOUND, "no such download").into_response();
    };
    if !meta.is_file() {
        return (StatusCode::NOT_FOUND, "no such download").into_response();
    }
    let until = Instant::now() + DOWNLOAD_TIME;
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 64 << 10)
        .timeout(CHUNK_TIME)
        .map_while(move |chunk| {
            // the permit lives as long as the body streams
            let _held = &permit;
            if Instant::now() >= until {
                return None;
            }
            Some(match chunk {
                Ok(read) => read,
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the download reads too slowly",
                )),
            })
        });
    let kind = if path.ends_with(".json") {
        "application/json"
    } else if path.ends_with(BINARY) {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    };
    (
        [
            (header::CONTENT_TYPE, kind.to_string()),
            (header::CONTENT_LENGTH, meta.len().to_string()),
            (header::CACHE_CONTROL, "no-cache".to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}
