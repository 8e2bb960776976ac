//! "An engine under test": what every adapter implements for the suite.

use crate::case::Constraint;
use std::time::Duration;

/// Why a generation stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// A stop token (for a constrained generation: the grammar ended).
    Stop,
    /// `max_new_tokens` reached: the output may be cut off, never counted valid.
    Length,
    /// Something else (the engine's own word for it).
    Other(String),
}

/// Sampling of a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0: greedy.
    pub temperature: f32,
    /// The seed (engines without a seed API ignore it and say so in
    /// [`Engine::deterministic`]).
    pub seed: u64,
}

/// One request to an engine.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The user prompt.
    pub prompt: &'a str,
    /// The constraint; `None`: unconstrained.
    pub constraint: Option<&'a Constraint>,
    /// Sampling settings.
    pub sampling: Sampling,
    /// Most tokens to generate.
    pub max_new_tokens: usize,
}

/// What an engine generated.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    /// The text (special tokens skipped, as the API returns it).
    pub text: String,
    /// Why it stopped.
    pub finish: Option<Finish>,
    /// Tokens generated.
    pub tokens: usize,
    /// Tool calls as the API reported them (name, arguments text), when it reports them
    /// separately from the text (OpenAI's `tool_calls`).
    pub tool_calls: Option<Vec<(String, String)>>,
    /// Ids of special tokens among the generated tokens, when the engine sees ids.
    pub special_ids: Vec<u32>,
}

/// Per-step cost breakdown of a run, where the engine can see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTimes {
    /// Steps measured (for engines that mask one row per call, rows).
    pub steps: u64,
    /// Rows over those steps (constrained or not).
    pub rows: u64,
    /// Rows of those steps that were not sampled (the router's rows whose step gave the
    /// text their grammar forced, found on the mask pool).
    pub unsampled: u64,
    /// Mask fill time per step (on the step's critical path or not).
    pub fill: Duration,
    /// Time a step waited for masks.
    pub wait: Duration,
    /// Applying masks to logits (zero where masking is folded into sampling).
    pub apply: Duration,
    /// Sampling (masked, where the engine samples under the masks).
    pub sample: Duration,
    /// Accepting drawn tokens into the grammars.
    pub accept: Duration,
    /// Jump-forward: forced text found, re-tokenized, accepted.
    pub jump_forward: Duration,
    /// The adapter's other per-step work (slot tables, copies).
    pub other: Duration,
    /// The steps' own wall time, forward included (zero where the engine does not say).
    pub wall: Duration,
    /// Rows drawn twice, under their masks and without (an engine that pairs draws to
    /// measure what masking costs sampling; 0 elsewhere).
    pub paired_rows: u64,
    /// Those rows' draws under their masks.
    pub paired_masked: Duration,
    /// The same rows' draws without their masks (same logits, same thread).
    pub paired_unmasked: Duration,
}

impl StepTimes {
    /// Both runs' costs together.
    pub fn plus(&self, o: &StepTimes) -> StepTimes {
        StepTimes {
            steps: self.steps + o.steps,
            rows: self.rows + o.rows,
            unsampled: self.unsampled + o.unsampled,
            fill: self.fill + o.fill,
            wait: self.wait + o.wait,
            apply: self.apply + o.apply,
            sample: self.sample + o.sample,
            accept: self.accept + o.accept,
            jump_forward: self.jump_forward + o.jump_forward,
            other: self.other + o.other,
            wall: self.wall + o.wall,
            paired_rows: self.paired_rows + o.paired_rows,
            paired_masked: self.paired_masked + o.paired_masked,
            paired_unmasked: self.paired_unmasked + o.paired_unmasked,
        }
    }

    /// Mean wall time of a step in seconds, if the engine measures it.
    pub fn mean_step_s(&self) -> Option<f64> {
        (!self.wall.is_zero() && self.steps > 0).then(|| self.wall.as_secs_f64() / self.steps as f64)
    }

    /// `d` per step, in µs.
    pub fn per_step_us(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e6 / self.steps.max(1) as f64
    }

    /// Rows per step.
    pub fn rows_per_step(&self) -> f64 {
        self.rows.max(self.steps) as f64 / self.steps.max(1) as f64
    }

    /// The adapter's work beyond the fill, per step in µs: waiting for masks, applying
    /// them, accepting tokens, jump-forward, the rest — and what sampling under masks
    /// costs over sampling without, when more, per sampled row (then times this run's
    /// sampled rows per step).
    ///
    /// That cost is read from `paired` where there is one: a run of the same requests
    /// whose every masked row was also drawn without its mask, on the same logits and
    /// thread — the only reading fine enough for a microsecond a row. Else from
    /// `unconstrained` (the same engine's unconstrained run): sampling time per sampled
    /// row of the two runs, whose rows are different rows (their answers differ, and a
    /// row whose step gave forced text was not sampled), and whose sampling in parallel
    /// makes a step's time no sum over its rows.
    pub fn beyond_fill_us(&self, unconstrained: Option<&StepTimes>, paired: Option<&StepTimes>) -> f64 {
        let own = self.per_step_us(self.wait + self.apply + self.accept + self.jump_forward + self.other);
        let per_row = match (paired.and_then(StepTimes::paired_cost_us), unconstrained) {
            (Some(p), _) => p,
            (None, Some(u)) => self.per_sampled_row_us(self.sample) - u.per_sampled_row_us(u.sample),
            (None, None) => 0.0,
        };
        let sampled_per_step = self.sampled_rows() as f64 / self.steps.max(1) as f64;
        own + (per_row * sampled_per_step).max(0.0)
    }

    /// What drawing a row under its mask cost over drawing it without, µs a row, from the
    /// paired draws (`None` without any).
    pub fn paired_cost_us(&self) -> Option<f64> {
        (self.paired_rows > 0).then(|| {
            (self.paired_masked.as_secs_f64() - self.paired_unmasked.as_secs_f64()) * 1e6
                / self.paired_rows as f64
        })
    }

    /// Rows sampled.
    fn sampled_rows(&self) -> u64 {
        self.rows.max(self.steps).saturating_sub(self.unsampled).max(1)
    }

    /// `d` per sampled row, in µs.
    pub fn per_sampled_row_us(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e6 / self.sampled_rows() as f64
    }
}

/// An engine failed a request (not an invalid output: a refusal, a crash, a timeout).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct EngineError(pub String);

/// An adapter (or the reference loop) as the suite drives it.
pub trait Engine: Send {
    /// The adapter's name in the report.
    fn name(&self) -> String;

    /// Whether this engine's API can express the constraint (a TGI endpoint cannot take
    /// an EBNF grammar, say); unsupported cases are not counted.
    fn supports(&self, constraint: &Constraint) -> bool;

    /// Whether the same seed gives the same output (engines without a seed API: false,
    /// and the suite does not check it).
    fn deterministic(&self) -> bool {
        true
    }

    /// Generates for each request, as one batch where the engine batches (the order of
    /// the results is the requests').
    fn generate(&mut self, requests: &[Request<'_>]) -> Vec<Result<Generation, EngineError>>;

    /// The per-step costs since the last call (engines that can see them).
    fn take_step_times(&mut self) -> Option<StepTimes> {
        None
    }

    /// Special token texts that must not appear in an output's text.
    fn forbidden_texts(&self) -> Vec<String> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_is_compared_per_row() {
        let ms = Duration::from_millis;
        // 24 rows a step constrained, 20 unconstrained, both sampling 100 µs a row: no
        // excess, whatever the steps' sizes; 10 µs more a row constrained: 240 µs a step.
        let u = StepTimes { steps: 10, rows: 200, sample: ms(20), ..Default::default() };
        let same = StepTimes { steps: 10, rows: 240, sample: ms(24), ..Default::default() };
        assert!(same.beyond_fill_us(Some(&u), None).abs() < 1e-6);
        let dearer =
            StepTimes { steps: 10, rows: 240, sample: ms(24) + Duration::from_micros(2_400), ..same };
        assert!((dearer.beyond_fill_us(Some(&u), None) - 240.0).abs() < 1e-6);
        // The step thread's own work counts per step, and cheaper sampling counts nothing.
        let own = StepTimes { wait: ms(1), accept: ms(1), sample: ms(1), ..same };
        assert!((own.beyond_fill_us(Some(&u), None) - 200.0).abs() < 1e-6);
        // Rows not sampled (forced text) take no sampling time: 40 of 240 rows forced, the
        // 200 sampled at the unconstrained 100 µs are no excess; at 110 µs, 200 µs a step.
        let forced = StepTimes { unsampled: 40, sample: ms(20), ..same };
        assert!(forced.beyond_fill_us(Some(&u), None).abs() < 1e-6);
        let dearer = StepTimes { unsampled: 40, sample: ms(22), ..same };
        assert!((dearer.beyond_fill_us(Some(&u), None) - 200.0).abs() < 1e-6);
    }

    #[test]
    fn paired_draws_decide_over_the_two_runs() {
        let ms = Duration::from_millis;
        let u = StepTimes { steps: 10, rows: 200, sample: ms(20), ..Default::default() };
        // Two runs say 10 µs a row more; the paired draws (100 rows, 2 µs a row more) say
        // what masking costs: 2 µs × 20 sampled rows a step.
        let c = StepTimes { steps: 10, rows: 240, unsampled: 40, sample: ms(22), ..Default::default() };
        let p = StepTimes {
            paired_rows: 100,
            paired_masked: ms(10) + Duration::from_micros(200),
            paired_unmasked: ms(10),
            ..Default::default()
        };
        assert!((p.paired_cost_us().unwrap() - 2.0).abs() < 1e-6);
        assert!((c.beyond_fill_us(Some(&u), Some(&p)) - 40.0).abs() < 1e-6);
        // Cheaper under the mask: no cost, and a paired run without pairs falls back.
        let cheaper = StepTimes { paired_masked: ms(5), ..p };
        assert!(c.beyond_fill_us(Some(&u), Some(&cheaper)).abs() < 1e-6);
        let none = StepTimes::default();
        assert_eq!(none.paired_cost_us(), None);
        assert!((c.beyond_fill_us(Some(&u), Some(&none)) - 200.0).abs() < 1e-6);
    }
}
