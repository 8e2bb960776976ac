//! grammask-router: the pieces a Rust serving stack needs to mask a batch in which only
//! some rows carry a grammar, and a working TGI/OpenAI-compatible router built on them.
//!
//! - [`step`]: [`step::StructuredBatch`], the step engine (fill while the forward runs,
//!   one masked apply with `indices`, accept and jump-forward per row).
#![deny(missing_docs)]
// Row errors carry grammask::Error whole (its size is core's choice), as core does.
#![allow(clippy::result_large_err)]

pub mod api;
pub mod chat;
pub mod engine;
pub mod metrics;
pub mod model;
pub mod sampling;
pub mod server;
pub mod service;
pub mod speculate;
pub mod step;
pub mod telemetry;
