//! Running the corpus through an engine: every case × seed, constrained; each output
//! judged by its case's validator, its stop reason and its special tokens, and (for
//! engines with a seed) generated twice to check that the same seed gives the same text.
//! The engine runs on a thread of its own: a panic is caught and reported for its batch,
//! a hang is reported after a timeout and the engine's remaining cases are skipped, and
//! either way the suite goes on.

use crate::case::{Case, Kind};
use crate::engine::{Engine, EngineError, Finish, Generation, Request, Sampling, StepTimes};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings of a validity run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Seeds per case.
    pub seeds: Vec<u64>,
    /// Sampling temperature (random models are harshest sampled).
    pub temperature: f32,
    /// Most tokens per output.
    pub max_new_tokens: usize,
    /// Requests sent to the engine at once.
    pub batch: usize,
    /// Longest an engine may take for one batch before it counts as hung.
    pub timeout: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            seeds: vec![1, 2],
            temperature: 1.0,
            max_new_tokens: 256,
            batch: 8,
            timeout: Duration::from_secs(300),
        }
    }
}

/// What became of one output.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Complete, stopped for a stated reason, accepted by the validator.
    Valid,
    /// Complete but rejected (the reason says why), or special tokens leaked, or the same
    /// seed gave another text.
    Invalid(String),
    /// Cut off by `max_new_tokens` (never counted valid).
    CutOff,
    /// The engine failed the request (refused, panicked, hung).
    Error(String),
}

/// Counts for one adapter and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Outputs judged.
    pub outputs: usize,
    /// Valid ones.
    pub valid: usize,
    /// Invalid ones.
    pub invalid: usize,
    /// Cut off.
    pub cut_off: usize,
    /// Engine errors.
    pub errors: usize,
}

impl Tally {
    fn add(&mut self, v: &Verdict) {
        self.outputs += 1;
        match v {
            Verdict::Valid => self.valid += 1,
            Verdict::Invalid(_) => self.invalid += 1,
            Verdict::CutOff => self.cut_off += 1,
            Verdict::Error(_) => self.errors += 1,
        }
    }

    /// Adds `other` in.
    pub fn merge(&mut self, other: &Tally) {
        self.outputs += other.outputs;
        self.valid += other.valid;
        self.invalid += other.invalid;
        self.cut_off += other.cut_off;
        self.errors += other.errors;
    }
}

/// One adapter's validity results.
#[derive(Debug, Clone, Default)]
pub struct ValidityReport {
    /// The adapter.
    pub name: String,
    /// Cases the adapter's API can express (the others are not counted).
    pub cases: usize,
    /// Per kind.
    pub by_kind: BTreeMap<Kind, Tally>,
    /// What went wrong, one line per output.
    pub failures: Vec<String>,
    /// The outputs cut off by `max_new_tokens` (case and seed).
    pub cut_offs: Vec<String>,
    /// Wall time of the run.
    pub wall: Duration,
    /// Per-step costs the engine reported.
    pub steps: Option<StepTimes>,
}

impl ValidityReport {
    /// All kinds together.
    pub fn total(&self) -> Tally {
        let mut t = Tally::default();
        for k in self.by_kind.values() {
            t.merge(k);
        }
        t
    }
}

/// A job for the engine's thread: (case index, seed, constrained) per request.
type Job = Vec<(usize, u64, bool)>;
type Reply = Result<Vec<Result<Generation, EngineError>>, String>;

/// An engine on a thread of its own (see the [module docs](self)).
pub struct Isolated {
    name: String,
    deterministic: bool,
    forbidden: Vec<String>,
    supports: Vec<bool>,
    jobs: Option<mpsc::Sender<(Job, usize)>>,
    replies: mpsc::Receiver<Reply>,
    times: mpsc::Receiver<Option<StepTimes>>,
    hung: bool,
}

impl Isolated {
    /// Moves `engine` to its own thread, serving requests over `cases`.
    pub fn new(mut engine: Box<dyn Engine>, cases: Arc<Vec<Case>>, temperature: f32) -> Self {
        let name = engine.name();
        let deterministic = engine.deterministic();
        let forbidden = engine.forbidden_texts();
        let supports = cases.iter().map(|c| engine.supports(&c.constraint)).collect();
        let (job_tx, job_rx) = mpsc::channel::<(Job, usize)>();
        let (reply_tx, replies) = mpsc::channel::<Reply>();
        let (times_tx, times) = mpsc::channel();
        let thread_name = format!("conformance-{name}");
        let spawned = std::thread::Builder::new().name(thread_name).spawn(move || {
            while let Ok((job, max_tokens)) = job_rx.recv() {
                if job.is_empty() {
                    let _ = times_tx.send(engine.take_step_times());
                    continue;
                }
                let requests: Vec<Request<'_>> = job
                    .iter()
                    .map(|&(c, seed, constrained)| Request {
                        prompt: &cases[c].prompt,
                        constraint: constrained.then_some(&cases[c].constraint),
                        sampling: Sampling { temperature, seed },
                        max_new_tokens: max_tokens,
                    })
                    .collect();
                let r = catch_unwind(AssertUnwindSafe(|| engine.generate(&requests))).map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a panic".into())
                });
                if reply_tx.send(r).is_err() {
                    return;
                }
            }
        });
        let jobs = spawned.ok().map(|_| job_tx);
        Self { name, deterministic, forbidden, supports, jobs, replies, times, hung: false }
    }

    /// The adapter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs one batch; `Err` when the engine panicked, hung (then and ever after) or is gone.
    pub fn call(&mut self, job: Job, max_tokens: usize, timeout: Duration) -> Reply {
        if self.hung {
            return Err("the engine hung on an earlier batch; skipped".into());
        }
        let n = job.len();
        let Some(tx) = &self.jobs else { return Err("the engine's thread did not start".into()) };
        if tx.send((job, max_tokens)).is_err() {
            return Err("the engine's thread is gone".into());
        }
        match self.replies.recv_timeout(timeout) {
            Ok(Ok(v)) if v.len() == n => Ok(v),
            Ok(Ok(v)) => Err(format!("{} answers to {n} requests", v.len())),
            Ok(Err(panic)) => Err(format!("panicked: {panic}")),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.hung = true;
                Err(format!("hung: no answer within {timeout:?}"))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err("the engine's thread is gone".into()),
        }
    }

    /// The engine's per-step costs since the last call.
    pub fn take_step_times(&mut self) -> Option<StepTimes> {
        if self.hung {
            return None;
        }
        self.jobs.as_ref()?.send((Vec::new(), 0)).ok()?;
        self.times.recv_timeout(Duration::from_secs(30)).ok().flatten()
    }
}

/// Judges one output of `case`.
pub fn judge(case: &Case, g: &Generation, forbidden: &[String]) -> Verdict {
    match &g.finish {
        Some(Finish::Length) => return Verdict::CutOff,
        Some(Finish::Stop) => {}
        Some(Finish::Other(r)) => return Verdict::Invalid(format!("stopped for an unexpected reason: {r}")),
        None => return Verdict::Invalid("no stop reason".into()),
    }
    if !g.special_ids.is_empty() {
        return Verdict::Invalid(format!("special or padding ids generated: {:?}", g.special_ids));
    }
    if case.kind() != Kind::Tools {
        if let Some(t) = forbidden.iter().find(|t| g.text.contains(t.as_str())) {
            return Verdict::Invalid(format!("special token text {t:?} in the output"));
        }
    }
    match case.validator.check(&g.text, g.tool_calls.as_deref()) {
        Ok(()) => Verdict::Valid,
        Err(why) => Verdict::Invalid(why),
    }
}

/// Runs every case the engine supports × every seed, constrained; see the
/// [module docs](self).
pub fn validity(engine: &mut Isolated, cases: &[Case], o: &RunOptions) -> ValidityReport {
    let started = Instant::now();
    let mut report = ValidityReport { name: engine.name.clone(), ..Default::default() };
    let todo: Vec<(usize, u64)> = (0..cases.len())
        .filter(|&c| engine.supports[c])
        .flat_map(|c| o.seeds.iter().map(move |&s| (c, s)))
        .collect();
    report.cases = (0..cases.len()).filter(|&c| engine.supports[c]).count();
    for chunk in todo.chunks(o.batch.max(1)) {
        let job: Job = chunk.iter().map(|&(c, s)| (c, s, true)).collect();
        let first = engine.call(job.clone(), o.max_new_tokens, o.timeout);
        let again = match (&first, engine.deterministic) {
            (Ok(_), true) => Some(engine.call(job, o.max_new_tokens, o.timeout)),
            _ => None,
        };
        for (i, &(c, seed)) in chunk.iter().enumerate() {
            let case = &cases[c];
            let mut verdict = match &first {
                Err(e) => Verdict::Error(e.clone()),
                Ok(v) => match &v[i] {
                    // The first line: engines attach backtraces to their errors.
                    Err(e) => Verdict::Error(e.0.lines().next().unwrap_or_default().to_string()),
                    Ok(g) => judge(case, g, &engine.forbidden),
                },
            };
            if let (Ok(v), Some(Ok(w))) = (&first, &again) {
                if let (Ok(a), Ok(b)) = (&v[i], &w[i]) {
                    if a.text != b.text && verdict != Verdict::CutOff {
                        verdict =
                            Verdict::Invalid(format!("seed {seed} gave {:?}, then {:?}", a.text, b.text));
                    }
                }
            }
            if verdict == Verdict::CutOff {
                let tail = match &first {
                    Ok(v) => v[i]
                        .as_ref()
                        .map(|g| g.text.chars().rev().take(60).collect::<String>().chars().rev().collect())
                        .unwrap_or_default(),
                    Err(_) => String::new(),
                };
                report.cut_offs.push(format!("{} / seed {seed}: …{tail:?}", case.id));
            }
            if !matches!(verdict, Verdict::Valid | Verdict::CutOff) {
                report.failures.push(format!("{} / {} / seed {seed}: {verdict:?}", report.name, case.id));
            }
            report.by_kind.entry(case.kind()).or_default().add(&verdict);
        }
    }
    report.steps = engine.take_step_times();
    report.wall = started.elapsed();
    report
}

/// Constrained against unconstrained throughput of one engine at one batch size.
#[derive(Debug, Clone)]
pub struct Overhead {
    /// The adapter.
    pub name: String,
    /// Requests in flight at once.
    pub batch: usize,
    /// Generated tokens per second, unconstrained.
    pub unconstrained_tps: f64,
    /// Generated tokens per second, constrained.
    pub constrained_tps: f64,
    /// Per-step costs of the constrained run.
    pub steps: Option<StepTimes>,
}

impl Overhead {
    /// `(1 − constrained / unconstrained) × 100`: what structure costs in throughput.
    pub fn pct(&self) -> f64 {
        if self.unconstrained_tps > 0.0 {
            (1.0 - self.constrained_tps / self.unconstrained_tps) * 100.0
        } else {
            0.0
        }
    }
}

/// Tokens per second over the JSON-schema cases, constrained and not, interleaved (same
/// prompts and seeds): each run sends `4 × batch` requests at once to an engine that
/// keeps at most `batch` in flight (the router's `max_batch_size`), so the batch stays
/// full while the queue lasts, whatever lengths the answers have.
pub fn overhead(
    engine: &mut Isolated,
    cases: &[Case],
    o: &RunOptions,
    batch: usize,
    rounds: usize,
) -> Result<Overhead, String> {
    let schema: Vec<usize> =
        (0..cases.len()).filter(|&c| engine.supports[c] && cases[c].kind() == Kind::JsonSchema).collect();
    if schema.is_empty() {
        return Err("no JSON-schema case the engine supports".into());
    }
    let mut totals = [(0usize, Duration::ZERO); 2];
    let _ = engine.take_step_times();
    let mut steps: Option<StepTimes> = None;
    let per_run = 4 * batch.max(1);
    for round in 0..rounds {
        for constrained in [false, true] {
            let job: Job = (0..per_run)
                .map(|i| {
                    (schema[(round * per_run + i) % schema.len()], (round * per_run + i) as u64, constrained)
                })
                .collect();
            let t0 = Instant::now();
            let out = engine.call(job, o.max_new_tokens, o.timeout)?;
            let wall = t0.elapsed();
            let tokens: usize = out.iter().filter_map(|g| g.as_ref().ok()).map(|g| g.tokens).sum();
            let slot = &mut totals[usize::from(constrained)];
            slot.0 += tokens;
            slot.1 += wall;
            let t = engine.take_step_times();
            if constrained {
                steps = match (steps, t) {
                    (Some(a), Some(b)) => Some(a.plus(&b)),
                    (a, b) => a.or(b),
                };
            }
        }
    }
    let tps = |(n, d): (usize, Duration)| if d.is_zero() { 0.0 } else { n as f64 / d.as_secs_f64() };
    Ok(Overhead {
        name: engine.name.clone(),
        batch,
        unconstrained_tps: tps(totals[0]),
        constrained_tps: tps(totals[1]),
        steps,
    })
}
