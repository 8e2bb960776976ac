//! Running the corpus through an engine: every case × seed, constrained; each output
//! judged by its case's validator, its stop reason and its special tokens, and (for
//! engines with a seed) generated twice to check that the same seed gives the same text.
//! The engine runs on a thread of its own: a panic is caught and reported for its batch,
//! a hang is reported after a timeout and the engine's remaining cases are skipped, and
//! either way the suite goes on.

use crate::case::{Case, Kind};
use crate::engine::{Engine, EngineError, Finish, Generation, Request, Sampling, StepTimes};
use crate::llg::{Llg, LlgCase};
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
    /// Complete, stopped for a stated reason, accepted by every oracle that judges it.
    Valid,
    /// Complete but rejected by an oracle (the reason names it), or special tokens leaked,
    /// or the same seed gave another text.
    Invalid(String),
    /// Cut off by `max_new_tokens` (never counted valid); `checked`: an oracle found the
    /// prefix completable (else none can judge prefixes of the case).
    CutOff {
        /// Whether a prefix oracle judged it.
        checked: bool,
    },
    /// Cut off, and the prefix can no longer be completed (the reason names the oracle).
    CutOffInvalid(String),
    /// The engine refused a case grammask refuses to compile (the typed error).
    Refused(String),
    /// The engine failed the request otherwise (panicked, hung, refused a case grammask
    /// compiles).
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
    /// Cut off (judged as prefixes or not).
    pub cut_off: usize,
    /// Cut-off outputs a prefix oracle judged (invalid ones included).
    pub cut_off_checked: usize,
    /// Cut-off outputs whose prefix cannot be completed.
    pub cut_off_invalid: usize,
    /// Outputs of cases grammask refuses (each an error naming why).
    pub refused: usize,
    /// Engine errors.
    pub errors: usize,
}

impl Tally {
    fn add(&mut self, v: &Verdict) {
        self.outputs += 1;
        match v {
            Verdict::Valid => self.valid += 1,
            Verdict::Invalid(_) => self.invalid += 1,
            Verdict::CutOff { checked } => {
                self.cut_off += 1;
                self.cut_off_checked += usize::from(*checked);
            }
            Verdict::CutOffInvalid(_) => {
                self.cut_off += 1;
                self.cut_off_checked += 1;
                self.cut_off_invalid += 1;
            }
            Verdict::Refused(_) => self.refused += 1,
            Verdict::Error(_) => self.errors += 1,
        }
    }

    /// Adds `other` in.
    pub fn merge(&mut self, other: &Tally) {
        self.outputs += other.outputs;
        self.valid += other.valid;
        self.invalid += other.invalid;
        self.cut_off += other.cut_off;
        self.cut_off_checked += other.cut_off_checked;
        self.cut_off_invalid += other.cut_off_invalid;
        self.refused += other.refused;
        self.errors += other.errors;
    }
}

/// Every case's verdicts before any engine runs: whether grammask compiles it (on the
/// suite's tokenizer) and what llguidance makes of it (its compiled matcher is the
/// peer oracle of [`judge`]).
pub struct Oracles {
    /// grammask's compile, per case: `Err` with the typed error when it refuses.
    pub grammask: Vec<Result<(), String>>,
    /// llguidance's, per case.
    pub llg: Vec<LlgCase>,
}

impl Oracles {
    /// Compiles every case with grammask (over `tok`) and with llguidance.
    pub fn new(cases: &[Case], tok: &std::sync::Arc<grammask::TokenizerInfo>) -> Result<Self, String> {
        let compiler = grammask::GrammarCompiler::new(tok.clone());
        let llg = Llg::new()?;
        let grammask = cases
            .iter()
            .map(|c| {
                let (spec, _) = c.constraint.grammask_spec()?;
                compiler.compile(&spec).map(|_| ()).map_err(|e| e.to_string())
            })
            .collect();
        Ok(Self { grammask, llg: cases.iter().map(|c| llg.compile(&c.constraint)).collect() })
    }

    /// The oracles that judge `case`'s outputs, for the report.
    pub fn names(&self, case: &Case, i: usize) -> Vec<&'static str> {
        let mut v = vec![case.validator.oracle()];
        if matches!(self.llg.get(i), Some(LlgCase::Compiled(_))) {
            v.push("llguidance");
        }
        v
    }
}

/// An output and its verdict.
#[derive(Debug, Clone)]
pub struct Judged {
    /// Its case (index in the corpus).
    pub case: usize,
    /// Its seed.
    pub seed: u64,
    /// Its text.
    pub text: String,
    /// Whether the calls of a tool-calling output are in its text (not reported apart).
    pub calls_in_text: bool,
    /// [`Verdict::Valid`] or a [`Verdict::CutOff`].
    pub verdict: Verdict,
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
    /// The same failures with the whole output (adapter, case, seed, verdict, text), for
    /// `failures.jsonl` beside the report: the report's lines keep 300 characters, and a
    /// reader settling a verdict needs every byte.
    pub failed_outputs: Vec<serde_json::Value>,
    /// The outputs cut off by `max_new_tokens` (case and seed).
    pub cut_offs: Vec<String>,
    /// Each output's length in tokens (errors excluded).
    pub lengths: Vec<usize>,
    /// The outputs judged valid or cut off (for oracles run after the engines:
    /// [`crate::xgrammar`]).
    pub outputs: Vec<Judged>,
    /// The oracles that judged this adapter's outputs.
    pub oracles: std::collections::BTreeSet<&'static str>,
    /// Outputs an oracle run after the engines rejected while the others passed them
    /// ([`crate::xgrammar::fold`]), each with its reason.
    pub disagreements: Vec<String>,
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

/// Judges one output of `case` (`llg`: llguidance's verdict on the case): a complete
/// output by the case's validator and llguidance; a cut-off one as a prefix, by
/// llguidance or the validator's prefix check where either can.
pub fn judge(case: &Case, llg: Option<&LlgCase>, g: &Generation, forbidden: &[String]) -> Verdict {
    let peer = match llg {
        Some(LlgCase::Compiled(m)) => Some(m),
        _ => None,
    };
    match &g.finish {
        Some(Finish::Length) => {
            if !g.special_ids.is_empty() {
                return Verdict::CutOffInvalid(format!(
                    "special or padding ids generated: {:?}",
                    g.special_ids
                ));
            }
            // An output cut inside a character ends in U+FFFD (its text is decoded
            // lossily); the bytes before it are the prefix.
            let text = g.text.strip_suffix('\u{FFFD}').unwrap_or(&g.text);
            let mut checked = false;
            if let Some(m) = peer {
                if let Err(why) = m.check(text.as_bytes(), false) {
                    return Verdict::CutOffInvalid(why);
                }
                checked = true;
            }
            match case.validator.check_prefix(text, g.tool_calls.as_deref()) {
                Some(Err(why)) => return Verdict::CutOffInvalid(why),
                Some(Ok(())) => checked = true,
                None => {}
            }
            return Verdict::CutOff { checked };
        }
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
    if let Err(why) = case.validator.check(&g.text, g.tool_calls.as_deref()) {
        return Verdict::Invalid(why);
    }
    if let Some(m) = peer {
        if let Err(why) = m.check(g.text.as_bytes(), true) {
            return Verdict::Invalid(why);
        }
    }
    Verdict::Valid
}

/// Runs every case the engine supports × every seed, constrained; see the
/// [module docs](self).
pub fn validity(engine: &mut Isolated, cases: &[Case], oracles: &Oracles, o: &RunOptions) -> ValidityReport {
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
            let refused = oracles.grammask.get(c).and_then(|r| r.as_ref().err());
            let mut verdict = match &first {
                Err(e) => Verdict::Error(e.clone()),
                Ok(v) => match &v[i] {
                    // The first line: engines attach backtraces to their errors.
                    Err(e) => {
                        let line = e.0.lines().next().unwrap_or_default().to_string();
                        match refused {
                            Some(_) => Verdict::Refused(line),
                            None => Verdict::Error(line),
                        }
                    }
                    Ok(g) => {
                        report.lengths.push(g.tokens);
                        report.oracles.extend(oracles.names(case, c));
                        match refused {
                            // grammask refuses the case, yet the engine answered.
                            Some(e) => {
                                Verdict::Invalid(format!("an output for a case grammask refuses ({e})"))
                            }
                            None => judge(case, oracles.llg.get(c), g, &engine.forbidden),
                        }
                    }
                },
            };
            let cut = matches!(verdict, Verdict::CutOff { .. } | Verdict::CutOffInvalid(_));
            if let (Ok(v), Some(Ok(w))) = (&first, &again) {
                if let (Ok(a), Ok(b)) = (&v[i], &w[i]) {
                    if a.text != b.text && !cut {
                        verdict =
                            Verdict::Invalid(format!("seed {seed} gave {:?}, then {:?}", a.text, b.text));
                    }
                }
            }
            if cut {
                let tail = match &first {
                    Ok(v) => v[i]
                        .as_ref()
                        .map(|g| g.text.chars().rev().take(60).collect::<String>().chars().rev().collect())
                        .unwrap_or_default(),
                    Err(_) => String::new(),
                };
                report.cut_offs.push(format!("{} / seed {seed}: …{tail:?}", case.id));
            }
            if !matches!(verdict, Verdict::Valid | Verdict::CutOff { .. } | Verdict::Refused(_)) {
                // The output's text (its last 300 characters) with its verdict.
                let text = match &first {
                    Ok(v) => v[i].as_ref().map_or(String::new(), |g| {
                        let tail: String = g.text.chars().rev().take(300).collect();
                        format!(" — output …{:?}", tail.chars().rev().collect::<String>())
                    }),
                    Err(_) => String::new(),
                };
                report
                    .failures
                    .push(format!("{} / {} / seed {seed}: {verdict:?}{text}", report.name, case.id));
                let whole = first.as_ref().ok().and_then(|v| v[i].as_ref().ok()).map(|g| g.text.clone());
                report.failed_outputs.push(serde_json::json!({
                    "adapter": report.name, "case": case.id, "seed": seed,
                    "verdict": format!("{verdict:?}"), "text": whole,
                }));
            }
            if matches!(verdict, Verdict::Valid | Verdict::CutOff { .. }) {
                if let Ok(Ok(g)) = first.as_ref().map(|v| &v[i]) {
                    report.outputs.push(Judged {
                        case: c,
                        seed,
                        text: g.text.strip_suffix('\u{FFFD}').unwrap_or(&g.text).to_string(),
                        calls_in_text: g.tool_calls.is_none(),
                        verdict: verdict.clone(),
                    });
                }
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
    /// Generated tokens, unconstrained and constrained.
    pub tokens: [usize; 2],
    /// Per-step costs of the constrained run.
    pub steps: Option<StepTimes>,
    /// Per-step costs of the unconstrained run (its sampling is the baseline of the
    /// constrained run's where there is no paired run).
    pub unconstrained_steps: Option<StepTimes>,
    /// Per-step costs of a separate constrained run that drew each masked row twice, under
    /// its mask and without ([`StepTimes::paired_rows`]): what masking costs sampling, row
    /// for row (the router's `pair_masked_draws`; not a throughput run).
    pub paired_steps: Option<StepTimes>,
    /// Jump-forward on (the router's default), off (masking alone), or not the engine's
    /// (`None`).
    pub jump_forward: Option<bool>,
}

impl Overhead {
    /// Constrained over unconstrained throughput at the same occupancy (a server's steady
    /// state, its batch kept full): tokens per row-step over the mean step time, each run's
    /// own. The whole run's ratio ([`Self::pct`]) also weighs each run's tail — the last
    /// requests decoding in a batch that empties — whose length depends on how long the
    /// answers are, which differs constrained and not; this ratio does not. `None` where
    /// the engine does not time its steps.
    pub fn steady_ratio(&self) -> Option<f64> {
        let rate =
            |t: &StepTimes, tokens: usize| Some(tokens as f64 / t.rows.max(1) as f64 / t.mean_step_s()?);
        let u = rate(self.unconstrained_steps.as_ref()?, self.tokens[0])?;
        let c = rate(self.steps.as_ref()?, self.tokens[1])?;
        (u > 0.0).then(|| c / u)
    }

    /// `(1 − constrained / unconstrained) × 100`: what structure costs in throughput.
    pub fn pct(&self) -> f64 {
        if self.unconstrained_tps > 0.0 {
            (1.0 - self.constrained_tps / self.unconstrained_tps) * 100.0
        } else {
            0.0
        }
    }
}

/// The JSON-schema cases `engine` supports.
fn schema_cases(engine: &Isolated, cases: &[Case]) -> Result<Vec<usize>, String> {
    let schema: Vec<usize> =
        (0..cases.len()).filter(|&c| engine.supports[c] && cases[c].kind() == Kind::JsonSchema).collect();
    if schema.is_empty() {
        return Err("no JSON-schema case the engine supports".into());
    }
    Ok(schema)
}

/// Round `round`'s requests of an overhead run: `4 × batch` of the JSON-schema cases, in
/// turn, seeded by their place.
fn schema_job(schema: &[usize], batch: usize, round: usize, constrained: bool) -> Job {
    let per_run = 4 * batch.max(1);
    (0..per_run)
        .map(|i| (schema[(round * per_run + i) % schema.len()], (round * per_run + i) as u64, constrained))
        .collect()
}

/// The per-step costs of [`overhead`]'s constrained runs (the same requests, `rounds` of
/// them) on an engine that draws each masked row twice, under its mask and without (the
/// router's `EngineOptions::pair_masked_draws`); its throughput is not a figure.
pub fn paired_steps(
    engine: &mut Isolated,
    cases: &[Case],
    o: &RunOptions,
    batch: usize,
    rounds: usize,
) -> Result<StepTimes, String> {
    let schema = schema_cases(engine, cases)?;
    let _ = engine.take_step_times();
    let mut steps = StepTimes::default();
    for round in 0..rounds {
        engine.call(schema_job(&schema, batch, round, true), o.max_new_tokens, o.timeout)?;
        steps = steps.plus(&engine.take_step_times().ok_or("the engine does not time its steps")?);
    }
    Ok(steps)
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
    let schema = schema_cases(engine, cases)?;
    let mut totals = [(0usize, Duration::ZERO); 2];
    let _ = engine.take_step_times();
    let mut steps: [Option<StepTimes>; 2] = [None, None];
    for round in 0..rounds {
        for constrained in [false, true] {
            let job = schema_job(&schema, batch, round, constrained);
            let t0 = Instant::now();
            let out = engine.call(job, o.max_new_tokens, o.timeout)?;
            let wall = t0.elapsed();
            let tokens: usize = out.iter().filter_map(|g| g.as_ref().ok()).map(|g| g.tokens).sum();
            let slot = &mut totals[usize::from(constrained)];
            slot.0 += tokens;
            slot.1 += wall;
            let t = engine.take_step_times();
            let s = &mut steps[usize::from(constrained)];
            *s = match (s.take(), t) {
                (Some(a), Some(b)) => Some(a.plus(&b)),
                (a, b) => a.or(b),
            };
        }
    }
    let tps = |(n, d): (usize, Duration)| if d.is_zero() { 0.0 } else { n as f64 / d.as_secs_f64() };
    Ok(Overhead {
        paired_steps: None,
        name: engine.name.clone(),
        batch,
        unconstrained_tps: tps(totals[0]),
        constrained_tps: tps(totals[1]),
        tokens: [totals[0].0, totals[1].0],
        unconstrained_steps: steps[0].take(),
        steps: steps[1].take(),
        jump_forward: None,
    })
}
