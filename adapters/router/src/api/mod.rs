//! The HTTP APIs: TGI's (`/generate`, `/generate_stream`, `/info`, `/health`,
//! `/metrics`) and OpenAI's (`/v1/chat/completions`, `/v1/completions`, `/v1/models`),
//! on axum.

mod openai;
mod tgi;

use crate::engine::Event;
use crate::service::{Service, ServiceError};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// Largest request body accepted (bytes).
pub const MAX_BODY_BYTES: usize = 2 << 20;

/// The router's HTTP application over `service`.
pub fn app(service: Arc<Service>) -> axum::Router {
    // The generation routes count against `max_concurrent_requests` from arrival to the
    // end of their answer.
    let generation = axum::Router::new()
        .route("/generate", post(tgi::generate))
        .route("/generate_stream", post(tgi::generate_stream))
        .route("/", post(tgi::compat))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .layer(axum::middleware::from_fn_with_state(service.clone(), admit));
    axum::Router::new()
        .merge(generation)
        .route("/info", get(tgi::info))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(openai::models))
        // Every route above needs the key, when one is set (before admission: a request
        // without it takes no slot); `/health` stays open for load balancers.
        .layer(axum::middleware::from_fn_with_state(service.clone(), authorize))
        .route("/health", get(health))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        // A handler that panics answers a JSON 500 instead of dropping the connection.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panic_response))
        // A span per request (method, path), the parent of its compile span.
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(service)
}

/// Lets a request through if the server has no key or the request carries it
/// (`Authorization: Bearer KEY`, as TGI's and vLLM's `--api-key`); 401 otherwise.
async fn authorize(
    axum::extract::State(s): axum::extract::State<Arc<Service>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(key) = &s.api_key else { return next.run(request).await };
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| same_secret(g.trim().as_bytes(), key.as_bytes())) {
        return next.run(request).await;
    }
    s.metrics.errors.with_label_values(&["unauthorized"]).inc();
    let flavor = if request.uri().path().starts_with("/v1/") { Flavor::OpenAi } else { Flavor::Tgi };
    let message = "a valid API key is required (`Authorization: Bearer KEY`)".to_string();
    let mut r = ApiError { status: StatusCode::UNAUTHORIZED, kind: "authentication_error", message, flavor }
        .into_response();
    r.headers_mut()
        .insert(axum::http::header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Bearer"));
    r
}

/// Whether two secrets are equal, in time that depends on their lengths only.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Admits a generation request if fewer than `max_concurrent_requests` are in flight
/// (429 otherwise, at once: TGI's semaphore); the slot is held until the answer's body
/// is done or dropped (a stream's last event, or its client gone).
async fn admit(
    axum::extract::State(s): axum::extract::State<Arc<Service>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let flavor = if request.uri().path().starts_with("/v1/") { Flavor::OpenAi } else { Flavor::Tgi };
    let Ok(slot) = s.request_slots.clone().try_acquire_owned() else {
        s.metrics.errors.with_label_values(&["overloaded"]).inc();
        let message =
            format!("{} requests are in flight, the limit; retry later", s.limits.max_concurrent_requests);
        return ApiError { status: StatusCode::TOO_MANY_REQUESTS, kind: "overloaded", message, flavor }
            .into_response();
    };
    let (parts, body) = next.run(request).await.into_parts();
    let body = futures::StreamExt::map(body.into_data_stream(), move |chunk| {
        let _held = &slot;
        chunk
    });
    Response::from_parts(parts, axum::body::Body::from_stream(body))
}

/// The answer to a request whose handler panicked (a bug): a JSON 500 in both APIs'
/// shapes (TGI's `error`/`error_type`, OpenAI's `error.message`), and a log line.
fn panic_response(payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = crate::engine::panic_message(payload.as_ref());
    tracing::error!(panic = %what, "a request handler panicked");
    let message = "internal error: the request's handler failed; the server goes on";
    let body =
        json!({"error": {"message": message, "type": "internal", "code": 500}, "error_type": "internal"});
    (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response()
}

/// 200 while the engine is alive and going round its loop; 503 with why not (its loop
/// failed or hung), so that a load balancer takes the replica out.
async fn health(axum::extract::State(s): axum::extract::State<Arc<Service>>) -> Response {
    match s.engine.health() {
        Ok(()) => StatusCode::OK.into_response(),
        Err(why) => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": why, "error_type": "unavailable"})))
                .into_response()
        }
    }
}

async fn metrics(axum::extract::State(s): axum::extract::State<Arc<Service>>) -> String {
    s.metrics.render()
}

/// Which API's error body to write.
#[derive(Debug, Clone, Copy)]
enum Flavor {
    Tgi,
    OpenAi,
}

/// An error answer: the status and message, in the API's own body shape.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    flavor: Flavor,
}

impl ApiError {
    fn validation(flavor: Flavor, message: impl Into<String>) -> Self {
        Self { status: StatusCode::UNPROCESSABLE_ENTITY, kind: "validation", message: message.into(), flavor }
    }

    fn from_service(flavor: Flavor, e: ServiceError) -> Self {
        let (status, kind) = match e {
            ServiceError::Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "validation"),
            ServiceError::Overloaded(_) => (StatusCode::TOO_MANY_REQUESTS, "overloaded"),
            ServiceError::Generation(_) => (StatusCode::FAILED_DEPENDENCY, "generation"),
            ServiceError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        Self { status, kind, message: e.to_string(), flavor }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match self.flavor {
            Flavor::Tgi => json!({"error": self.message, "error_type": self.kind}),
            Flavor::OpenAi => json!({"error": {"message": self.message, "type": self.kind, "param": null,
                                                "code": self.status.as_u16()}}),
        };
        (self.status, Json(body)).into_response()
    }
}

/// The body as `T`; malformed JSON or a wrong field is a 422 naming where.
fn parse_body<T: serde::de::DeserializeOwned>(flavor: Flavor, body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::validation(flavor, format!("invalid request body: {e}")))
}

/// Everything a non-streamed answer needs, gathered from the events.
#[derive(Debug, Default)]
struct Collected {
    tokens: Vec<crate::engine::TokenEvent>,
    end: Option<crate::engine::EndEvent>,
}

async fn collect(mut rx: UnboundedReceiver<Event>) -> Result<Collected, ServiceError> {
    let mut c = Collected::default();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token(t) => c.tokens.push(t),
            Event::End(e) => {
                c.end = Some(e);
                return Ok(c);
            }
            Event::Error(e) => return Err(ServiceError::Generation(e)),
            Event::Unavailable(e) => return Err(ServiceError::Unavailable(e)),
        }
    }
    Err(ServiceError::Generation("the generation stopped without an answer".into()))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A JSON value as an SSE event.
fn sse(v: &Value) -> Result<axum::response::sse::Event, std::convert::Infallible> {
    Ok(axum::response::sse::Event::default().data(v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handler_that_panics_answers_a_json_500_and_the_server_goes_on() {
        let app = axum::Router::new()
            .route("/boom", get(|| async { panic!("boom") as &str }))
            .route("/ok", get(|| async { "ok" }))
            .layer(tower_http::catch_panic::CatchPanicLayer::custom(panic_response));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let c = reqwest::Client::new();
        let r = c.get(format!("{base}/boom")).send().await.unwrap();
        assert_eq!(r.status(), 500);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], 500, "{body}");
        assert_eq!(body["error_type"], "internal", "{body}");
        let r = c.get(format!("{base}/ok")).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "ok");
    }
}
