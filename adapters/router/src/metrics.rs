//! Prometheus metrics of the router (`GET /metrics`).

use crate::step::StepMasks;
use prometheus::{
    CounterVec, Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};
use std::time::Duration;

/// Every metric the router exports, registered in one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests waiting to join the batch.
    pub queue_length: IntGauge,
    /// Sequences running (in the batch).
    pub running: IntGauge,
    /// Sequences per step.
    pub batch_size: Histogram,
    /// Wall time of a step's mask fill on the pool.
    pub fill_seconds: Histogram,
    /// Time a step waited for its masks after the forward.
    pub wait_seconds: Histogram,
    /// Time applying a step's masks took.
    pub apply_seconds: Histogram,
    /// Sampling time per step.
    pub sample_seconds: Histogram,
    /// Accepting a step's drawn tokens into their grammars, on the step thread (stop
    /// tokens only, where accepts are deferred to the next fill).
    pub accept_seconds: Histogram,
    /// A step's jump-forward (forced text found, re-tokenized, accepted), on the step
    /// thread: only where accepts are not deferred (speculation, or
    /// `BatchOptions::defer_accepts` off); deferred, it is part of the next fill.
    pub jump_forward_seconds: Histogram,
    /// Whole step time.
    pub step_seconds: Histogram,
    /// Grammar compile time (cache misses).
    pub compile_seconds: Histogram,
    /// Compiles answered from the cache.
    pub cache_hits: IntCounter,
    /// Requests by endpoint.
    pub requests: IntCounterVec,
    /// Finished generations by reason.
    pub finished: IntCounterVec,
    /// Errors by kind (validation, grammar, compile_timeout, overloaded, generation, model).
    pub errors: IntCounterVec,
    /// Generations dropped because the client went away.
    pub cancelled: IntCounter,
    /// Compiles cancelled because their request stopped waiting (the client went away).
    pub compiles_cancelled: IntCounter,
    /// Rows that sat a step out, their masks not ready when the forward ended.
    pub rows_late: IntCounter,
    /// Rows whose step gave the text their grammar forced (jump-forward found on the
    /// mask pool, after a deferred accept) instead of a draw.
    pub rows_forced: IntCounter,
    /// Speculative decoding: draft tokens accepted per verified row.
    pub accepted_per_verify: Histogram,
    /// Speculative decoding: draft nodes per step (all rows).
    pub draft_nodes: Histogram,
    /// Speculative decoding: draft nodes proposed, by drafter.
    pub drafted: IntCounterVec,
    /// Speculative decoding: draft nodes accepted, by drafter.
    pub draft_accepted: IntCounterVec,
    /// Speculative decoding: draft nodes the grammar refused (zero mask rows, their
    /// subtrees dropped).
    pub draft_rejected: IntCounter,
    /// Speculative decoding: rows that did not draft in a step because drafting did not
    /// pay for them (measured acceptance against the measured cost of extra nodes).
    pub draft_backoffs: IntCounter,
    /// Speculative decoding: rows whose draft a step withheld so that the rows that do
    /// not draft keep their rate (`--speculate-max-slowdown`).
    pub draft_withheld: IntCounter,
    /// Sequences whose prompt's prefill was shared with another of the same prompt (the
    /// `n` choices of one request).
    pub prefill_shared: IntCounter,
    /// `EngineOptions::pair_masked_draws`: the paired draws' time on their thread's CPU
    /// clock, by draw (`masked`, `unmasked`: the same row's draw without its mask).
    pub paired_draw_seconds: CounterVec,
    /// `EngineOptions::pair_masked_draws`: rows drawn twice.
    pub paired_draws: IntCounter,
}

fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    // Names and buckets are constants of this file: the construction cannot fail.
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn micro_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(1e-6, 2.0, 24).unwrap_or_default()
}

impl Metrics {
    /// Fresh metrics in their own registry.
    pub fn new() -> Self {
        let m = Self {
            registry: Registry::new(),
            queue_length: IntGauge::new("grammask_queue_length", "Requests waiting to join the batch")
                .unwrap_or_else(|e| panic!("{e}")),
            running: IntGauge::new("grammask_running", "Sequences in the batch")
                .unwrap_or_else(|e| panic!("{e}")),
            batch_size: histogram(
                "grammask_batch_size",
                "Sequences per step",
                prometheus::exponential_buckets(1.0, 2.0, 10).unwrap_or_default(),
            ),
            fill_seconds: histogram(
                "grammask_mask_fill_seconds",
                "Mask fill wall time per step",
                micro_buckets(),
            ),
            wait_seconds: histogram(
                "grammask_mask_wait_seconds",
                "Time a step waited for its masks after the forward",
                micro_buckets(),
            ),
            apply_seconds: histogram(
                "grammask_mask_apply_seconds",
                "Mask apply time per step",
                micro_buckets(),
            ),
            sample_seconds: histogram("grammask_sample_seconds", "Sampling time per step", micro_buckets()),
            accept_seconds: histogram(
                "grammask_accept_seconds",
                "Accepting a step's drawn tokens into their grammars (step thread)",
                micro_buckets(),
            ),
            jump_forward_seconds: histogram(
                "grammask_jump_forward_seconds",
                "A step's jump-forward: forced text found, re-tokenized and accepted (step thread)",
                micro_buckets(),
            ),
            step_seconds: histogram("grammask_step_seconds", "Step time", micro_buckets()),
            compile_seconds: histogram("grammask_compile_seconds", "Grammar compile time", micro_buckets()),
            cache_hits: IntCounter::new("grammask_compile_cache_hits", "Compiles answered by the cache")
                .unwrap_or_else(|e| panic!("{e}")),
            requests: IntCounterVec::new(
                Opts::new("grammask_requests", "Requests by endpoint"),
                &["endpoint"],
            )
            .unwrap_or_else(|e| panic!("{e}")),
            finished: IntCounterVec::new(
                Opts::new("grammask_finished", "Generations by finish reason"),
                &["reason"],
            )
            .unwrap_or_else(|e| panic!("{e}")),
            errors: IntCounterVec::new(Opts::new("grammask_errors", "Errors by kind"), &["kind"])
                .unwrap_or_else(|e| panic!("{e}")),
            cancelled: IntCounter::new("grammask_cancelled", "Generations dropped: the client went away")
                .unwrap_or_else(|e| panic!("{e}")),
            compiles_cancelled: IntCounter::new(
                "grammask_compiles_cancelled_total",
                "Compiles cancelled: their client went away",
            )
            .unwrap_or_else(|e| panic!("{e}")),
            rows_late: IntCounter::new(
                "grammask_rows_late_total",
                "Rows that sat a step out: their masks were not ready when the forward ended",
            )
            .unwrap_or_else(|e| panic!("{e}")),
            rows_forced: IntCounter::new(
                "grammask_rows_forced_total",
                "Rows whose step gave their grammar's forced text (jump-forward on the mask pool) instead of a draw",
            )
            .unwrap_or_else(|e| panic!("{e}")),
            accepted_per_verify: histogram(
                "grammask_spec_accepted_tokens",
                "Draft tokens accepted per verified row",
                (0..17).map(f64::from).collect(),
            ),
            draft_nodes: histogram(
                "grammask_spec_draft_nodes",
                "Draft nodes per step",
                prometheus::exponential_buckets(1.0, 2.0, 12).unwrap_or_default(),
            ),
            drafted: IntCounterVec::new(
                Opts::new("grammask_spec_drafted_total", "Draft nodes proposed, by drafter"),
                &["drafter"],
            )
            .unwrap_or_else(|e| panic!("{e}")),
            draft_accepted: IntCounterVec::new(
                Opts::new("grammask_spec_accepted_total", "Draft nodes accepted, by drafter"),
                &["drafter"],
            )
            .unwrap_or_else(|e| panic!("{e}")),
            draft_rejected: IntCounter::new(
                "grammask_spec_rejected_nodes_total",
                "Draft nodes the grammar refused (their subtrees dropped)",
            )
            .unwrap_or_else(|e| panic!("{e}")),
            prefill_shared: IntCounter::new(
                "grammask_prefill_shared_total",
                "Sequences that shared another sequence's prefill of the same prompt",
            )
            .unwrap_or_else(|e| panic!("{e}")),
            draft_backoffs: IntCounter::new(
                "grammask_spec_backoffs_total",
                "Rows that skipped drafting in a step because it did not pay",
            )
            .unwrap_or_else(|e| panic!("{e}")),
            draft_withheld: IntCounter::new(
                "grammask_spec_withheld_total",
                "Rows whose draft a step withheld to keep the rows that do not draft at their rate",
            )
            .unwrap_or_else(|e| panic!("{e}")),
            paired_draw_seconds: CounterVec::new(
                Opts::new(
                    "grammask_paired_draw_seconds_total",
                    "Measurement mode: masked rows' draws under their masks and the same rows' draws without (thread CPU seconds)",
                ),
                &["draw"],
            )
            .unwrap_or_else(|e| panic!("{e}")),
            paired_draws: IntCounter::new(
                "grammask_paired_draws_total",
                "Measurement mode: masked rows drawn a second time without their masks",
            )
            .unwrap_or_else(|e| panic!("{e}")),
        };
        let all: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.queue_length.clone()),
            Box::new(m.running.clone()),
            Box::new(m.batch_size.clone()),
            Box::new(m.fill_seconds.clone()),
            Box::new(m.wait_seconds.clone()),
            Box::new(m.apply_seconds.clone()),
            Box::new(m.sample_seconds.clone()),
            Box::new(m.accept_seconds.clone()),
            Box::new(m.jump_forward_seconds.clone()),
            Box::new(m.step_seconds.clone()),
            Box::new(m.compile_seconds.clone()),
            Box::new(m.cache_hits.clone()),
            Box::new(m.requests.clone()),
            Box::new(m.finished.clone()),
            Box::new(m.errors.clone()),
            Box::new(m.cancelled.clone()),
            Box::new(m.compiles_cancelled.clone()),
            Box::new(m.rows_late.clone()),
            Box::new(m.rows_forced.clone()),
            Box::new(m.accepted_per_verify.clone()),
            Box::new(m.draft_nodes.clone()),
            Box::new(m.drafted.clone()),
            Box::new(m.draft_accepted.clone()),
            Box::new(m.draft_rejected.clone()),
            Box::new(m.draft_backoffs.clone()),
            Box::new(m.draft_withheld.clone()),
            Box::new(m.prefill_shared.clone()),
            Box::new(m.paired_draw_seconds.clone()),
            Box::new(m.paired_draws.clone()),
        ];
        for c in all {
            // Distinct names, registered once: cannot fail.
            let _ = m.registry.register(c);
        }
        m
    }

    /// Records a step's mask timings.
    pub fn record_masks(&self, masks: &StepMasks) {
        if masks.constrained > 0 {
            self.fill_seconds.observe(masks.fill.as_secs_f64());
            self.wait_seconds.observe(masks.wait.as_secs_f64());
            self.apply_seconds.observe(masks.apply.as_secs_f64());
        }
    }

    /// Records a row's paired draws: `[masked, unmasked]`.
    pub fn record_paired_draw(&self, d: [Duration; 2]) {
        self.paired_draws.inc();
        for (draw, t) in ["masked", "unmasked"].into_iter().zip(d) {
            self.paired_draw_seconds.with_label_values(&[draw]).inc_by(t.as_secs_f64());
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
