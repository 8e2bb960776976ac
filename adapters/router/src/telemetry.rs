//! Logs and traces: `tracing` spans per HTTP request (tower-http), per grammar compile,
//! per step (`step` › `forward`, `wait_for_masks`, `apply_masks`, `sample`) and per mask
//! fill (on the mask pool), printed by the `fmt` layer as `RUST_LOG` allows and, when an
//! OTLP endpoint is configured, exported through OpenTelemetry (OTLP over HTTP with
//! protobuf, batched on a background thread). Nothing is exported by default.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Flushes and stops the exporter when dropped (call before exiting, so that the last
/// spans are sent).
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered and stops the exporter.
    pub fn shutdown(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.shutdown() {
                eprintln!("OpenTelemetry shutdown: {e}");
            }
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The traces URL for an OTLP endpoint: a bare `http://host:port` (or one ending in
/// `/`) gets the standard `/v1/traces` path, as `OTEL_EXPORTER_OTLP_ENDPOINT` does; a
/// URL with a path is used as given.
///
/// ```
/// use grammask_router::telemetry::traces_url;
/// assert_eq!(traces_url("http://collector:4318"), "http://collector:4318/v1/traces");
/// assert_eq!(traces_url("http://c:4318/custom/traces"), "http://c:4318/custom/traces");
/// ```
pub fn traces_url(endpoint: &str) -> String {
    let after_scheme = endpoint.split_once("://").map_or(endpoint, |(_, rest)| rest);
    match after_scheme.find('/') {
        None => format!("{endpoint}/v1/traces"),
        Some(i) if after_scheme[i..] == *"/" => format!("{}v1/traces", endpoint),
        Some(_) => endpoint.to_string(),
    }
}

/// Installs the global subscriber: the `fmt` layer filtered by `RUST_LOG` (default
/// `info`), plus the OpenTelemetry layer exporting to `otlp_endpoint` (or, when that is
/// `None`, to `OTEL_EXPORTER_OTLP_ENDPOINT` if set) as `service_name`. Call once.
pub fn init(otlp_endpoint: Option<&str>, service_name: &str) -> Result<Telemetry, String> {
    let env_endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok().filter(|e| !e.is_empty());
    let endpoint = otlp_endpoint.map(str::to_string).or(env_endpoint);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let Some(endpoint) = endpoint else {
        tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_filter(filter))
            .try_init()
            .map_err(|e| e.to_string())?;
        return Ok(Telemetry { provider: None });
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(traces_url(&endpoint))
        .build()
        .map_err(|e| format!("OTLP exporter for {endpoint}: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service_name.to_string()).build())
        .build();
    let tracer = provider.tracer("grammask-router");
    // Exported spans follow their own filter: every router span at debug and above,
    // whatever RUST_LOG prints.
    let otel_filter = EnvFilter::new("grammask_router=debug,tower_http=debug");
    let otel = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(otel_filter);
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_filter(filter))
        .with(otel)
        .try_init()
        .map_err(|e| e.to_string())?;
    Ok(Telemetry { provider: Some(provider) })
}
