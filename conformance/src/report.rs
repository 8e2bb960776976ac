//! The report: a markdown table (adapter × constraint kind: cases, valid, invalid, cut
//! off and how many cut-off prefixes were judged, refusals, overhead), output lengths,
//! each case's compile verdict by grammask and its peers, one SVG chart of overhead
//! against batch size, and a one-line JSON summary.

use crate::case::{Case, Kind};
use crate::llg::LlgCase;
use crate::run::{Oracles, Overhead, ValidityReport};
use plotters::prelude::*;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// Everything one report holds.
#[derive(Debug, Default)]
pub struct Report {
    /// Validity per adapter.
    pub validity: Vec<ValidityReport>,
    /// Overhead measurements (adapter × batch), when measured.
    pub overhead: Vec<Overhead>,
    /// How the run was made (for the report's header).
    pub settings: String,
    /// Adapters whose forward takes at least 5 ms (a real model, or the router's simulated
    /// one at `--forward-ms 5` or more): the throughput goal applies to them.
    pub real_forward: Vec<String>,
    /// The official clients' verdict (`clients::run_official_clients`), when run.
    pub clients: Option<String>,
    /// Each case's compile verdicts.
    pub compiles: Vec<CompileVerdicts>,
    /// Adapters that could not start here, and why (the CUDA router without a GPU).
    pub not_run: Vec<(String, String)>,
}

/// Whether grammask and its peers compile one case.
#[derive(Debug, Clone)]
pub struct CompileVerdicts {
    /// The case.
    pub id: String,
    /// Its kind.
    pub kind: Kind,
    /// grammask's typed error when it refuses.
    pub grammask: Result<(), String>,
    /// llguidance's: `Ok(true)` compiled, `Ok(false)` not its language, `Err` refused.
    pub llguidance: Result<bool, String>,
    /// XGrammar 0.2.8's, when a verdicts file was given (`benches/peers/xgrammar_oracle.py`).
    pub xgrammar: Option<Result<(), String>>,
}

impl CompileVerdicts {
    /// The verdicts of `cases` from `oracles`, XGrammar's from `xgrammar` (case id →
    /// `null` when compiled, its error text when refused) where given.
    pub fn of(
        cases: &[Case],
        oracles: &Oracles,
        xgrammar: Option<&serde_json::Map<String, Value>>,
    ) -> Vec<CompileVerdicts> {
        cases
            .iter()
            .enumerate()
            .map(|(i, c)| CompileVerdicts {
                id: c.id.clone(),
                kind: c.kind(),
                grammask: oracles.grammask.get(i).cloned().unwrap_or(Ok(())),
                llguidance: match oracles.llg.get(i) {
                    Some(LlgCase::Compiled(_)) => Ok(true),
                    Some(LlgCase::Refused(e)) => Err(e.clone()),
                    _ => Ok(false),
                },
                xgrammar: xgrammar.and_then(|m| m.get(&c.id)).map(|v| match v.as_str() {
                    None => Ok(()),
                    Some(e) => Err(e.to_string()),
                }),
            })
            .collect()
    }
}

fn jf_name(jf: Option<bool>) -> &'static str {
    match jf {
        Some(true) => "on",
        Some(false) => "off",
        None => "—",
    }
}

/// The `q`-quantile (0..=1) of sorted `v`.
fn quantile(v: &[usize], q: f64) -> usize {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

impl Report {
    /// The overhead of `name` at its largest measured batch, in %.
    fn overhead_pct(&self, name: &str) -> Option<f64> {
        self.overhead
            .iter()
            .filter(|o| o.name == name && o.jump_forward != Some(false))
            .max_by_key(|o| o.batch)
            .map(Overhead::pct)
    }

    /// The markdown report.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# Conformance report\n\n{}\n", self.settings);
        if let Some(c) = &self.clients {
            let _ = writeln!(
                s,
                "## Official clients\n\nHugging Face's `text_generation` and `openai`, pinned, driving the router \
                 (`adapters/router/tests/clients/contract.py`): {c}\n"
            );
        }
        let _ = writeln!(s, "## Validity\n");
        let _ = writeln!(
            s,
            "Each output is judged by oracles that are not grammask: complete outputs by the case's validator (the \
             `jsonschema` crate, the `regex` crate, grammask's brute-force Earley recognizer — it shares nothing \
             with the automata or the matcher —, or the suite's own reader of each tool-calling family's \
             published format plus `jsonschema` on the arguments) and again by llguidance 1.9.1 in process \
             (JSON schemas — generated in the schema's member order, the one llguidance knows —, regexes, Lark); \
             cut-off outputs (`max_new_tokens` reached, never counted valid) as prefixes: by llguidance, the \
             Earley recognizer (grammars) or the tool reader (calls closed before the cut valid, the rest a \
             beginning of the format). *cut off checked*: prefixes an oracle judged; *cut off invalid*: prefixes \
             that cannot be completed. *refused*: outputs of cases grammask refuses to compile (a typed error, \
             see Compile verdicts); errors = the engine failed otherwise (panicked, hung, or refused a case \
             grammask compiles). Cases an adapter's API cannot express are not counted. The random models are \
             pushed towards ending (closers and stop tokens boosted, more with every token past the 24th; \
             past it, tokens starting with `<` pushed up too and whitespace-only ones down, so that a tool \
             format's next tag wins over endless whitespace), except in the `-unbiased` run. Every failed \
             output is in `failures.jsonl` beside this report, whole.\n"
        );
        let _ = writeln!(
            s,
            "| adapter | kind | cases | outputs | valid | invalid | cut off | cut off checked | cut off invalid | refused | errors |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
        for v in &self.validity {
            for (k, t) in &v.by_kind {
                tally_row(&mut s, &v.name, k.name(), t.outputs / v.seeds().max(1), t, false);
            }
            tally_row(&mut s, &v.name, "all", v.cases, &v.total(), true);
        }
        let _ = writeln!(s, "\n### Output lengths\n");
        let _ =
            writeln!(s, "| adapter | oracles | outputs | cut off | length p50 | p90 | p99 | max (tokens) |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for v in &self.validity {
            let t = v.total();
            let mut l = v.lengths.clone();
            l.sort_unstable();
            let answered = t.outputs - t.errors - t.refused;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} % | {} | {} | {} | {} |",
                v.name,
                v.oracle_names(),
                answered,
                100.0 * t.cut_off as f64 / answered.max(1) as f64,
                quantile(&l, 0.5),
                quantile(&l, 0.9),
                quantile(&l, 0.99),
                l.last().copied().unwrap_or(0)
            );
        }
        let _ = writeln!(s, "\n### Cut-off outputs (their last characters; at most 12 per adapter)\n");
        for v in self.validity.iter().filter(|v| !v.cut_offs.is_empty() && !v.name.ends_with("-unbiased")) {
            let _ = writeln!(s, "- {}: {}", v.name, v.cut_offs.len());
            for c in v.cut_offs.iter().take(12) {
                let _ = writeln!(s, "  - {c}");
            }
        }
        if !self.not_run.is_empty() {
            let _ = writeln!(s, "\nNot run here:\n");
            for (name, why) in &self.not_run {
                let _ = writeln!(s, "- {name}: {why}");
            }
        }
        let failures: Vec<&String> = self.validity.iter().flat_map(|v| v.failures.iter()).collect();
        if !failures.is_empty() {
            let _ = writeln!(s, "\n### Failures\n");
            for f in failures.iter().take(200) {
                let _ = writeln!(s, "- {f}");
            }
        }
        let disagreements: Vec<&String> = self.validity.iter().flat_map(|v| v.disagreements.iter()).collect();
        if self.validity.iter().any(|v| v.oracles.contains("xgrammar")) {
            let _ = writeln!(
                s,
                "\n### XGrammar's disagreements\n\nTool-calling outputs XGrammar 0.2.8's matcher rejects (on the same \
                 structural tag) while the suite's reader and `jsonschema` pass them: {} (listed for a reader to \
                 settle, not counted invalid on XGrammar's word alone: XGrammar is narrower than JSON in places — \
                 it refuses `\\\"` and `\\\\` inside length-limited strings).\n",
                disagreements.len()
            );
            for d in disagreements.iter().take(100) {
                let _ = writeln!(s, "- {d}");
            }
        }
        self.compile_verdicts(&mut s);
        if !self.overhead.is_empty() {
            let _ = writeln!(s, "\n## Overhead\n");
            let _ = writeln!(
                s,
                "Generated tokens per second over the same JSON-schema requests, constrained and not, \
                 interleaved (4 × batch requests per run, at most `batch` in flight); per-step costs of the \
                 constrained run where the adapter reports them. A negative overhead is a gain: the router's \
                 jump-forward appends the tokens a grammar forces without a forward each. The reference \
                 loop and mistral.rs run random models whose forward is far below the 5 ms of a real \
                 one (the reference's: a copy of random logits; mistral.rs's: a 2-layer, 32-wide Llama), \
                 so their percentages show the mask work itself; the router's simulated forward takes \
                 `--forward-ms`. The router runs twice: jump-forward on (its default) and off (masking \
                 alone, no forced tokens). Per step of the constrained run: the fill on the pool, then the \
                 step thread's work — the wait for masks, apply (the router folds masking into \
                 sampling: 0), sampling (the unconstrained run's in brackets), accepting the drawn tokens, \
                 jump-forward (forced text found, re-tokenized, accepted), the rest; rows per step. The \
                 router then runs the same constrained requests once more drawing each masked row twice, \
                 under its mask and without, on the same logits and thread, in alternating order, each \
                 draw timed on the thread's CPU clock (a preemption of the thread is no cost of the \
                 mask) \
                 (`EngineOptions::pair_masked_draws`; that run's throughput is no figure): \
                 \"masked − unmasked\" is what masking costs sampling, µs a row, over that many rows — \
                 what the two runs' sampling columns cannot say to a microsecond, their rows being \
                 different rows sampled in parallel. The \
                 router accepts a drawn token, and finds its forced text, in the next step's fill on the \
                 pool (`BatchOptions::defer_accepts`): both count in its fill, and its accept and \
                 jump-forward columns are the stop tokens' accepts alone. Forced text then costs a row one \
                 step more than jump-forward on the step thread did (the drawn token's forward, then the \
                 forced tokens'), which the jump-forward-on throughput includes.\n"
            );
            let _ = writeln!(
                s,
                "| adapter | jump-forward | batch | unconstrained tok/s | constrained tok/s | overhead % | fill µs/step | wait | apply | sample (unconstrained) | masked − unmasked draw µs/row (rows) | accept | jump-forward | other | rows/step |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
            for o in &self.overhead {
                let t = o.steps.clone().unwrap_or_default();
                let us = |d| t.per_step_us(d);
                let base = o
                    .unconstrained_steps
                    .as_ref()
                    .map_or("—".to_string(), |u| format!("{:.1}", u.per_step_us(u.sample)));
                let paired = o.paired_steps.as_ref().and_then(|p| {
                    let per_row = p.paired_cost_us()?;
                    Some(format!("{per_row:+.2} ({})", p.paired_rows))
                });
                let paired = paired.unwrap_or_else(|| "—".to_string());
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} ({base}) | {paired} | {:.1} | {:.1} | {:.1} | {:.1} |",
                    o.name,
                    jf_name(o.jump_forward),
                    o.batch,
                    o.unconstrained_tps,
                    o.constrained_tps,
                    o.pct(),
                    us(t.fill),
                    us(t.wait),
                    us(t.apply),
                    us(t.sample),
                    us(t.accept),
                    us(t.jump_forward),
                    us(t.other),
                    t.rows_per_step()
                );
            }
            let _ = writeln!(s, "\n![overhead against batch size](overhead.svg)");
            self.goals(&mut s);
        }
        s
    }

    /// Which cases grammask, llguidance and XGrammar compile, per kind, and every case
    /// any of them refuses.
    fn compile_verdicts(&self, s: &mut String) {
        if self.compiles.is_empty() {
            return;
        }
        let xg = self.compiles.iter().any(|c| c.xgrammar.is_some());
        let _ = writeln!(s, "\n## Compile verdicts\n");
        let _ = writeln!(
            s,
            "The whole corpus, compiled by grammask (on the suite's tokenizer), llguidance 1.9.1 (in process) and \
             {}: refusals per kind (n/a: not the peer's language).\n",
            if xg {
                "XGrammar 0.2.8 (`benches/peers/xgrammar_oracle.py`, its verdicts given with `--xgrammar`)"
            } else {
                "XGrammar 0.2.8 — not in this run (give its verdicts with `--xgrammar`)"
            }
        );
        let _ = writeln!(
            s,
            "| kind | cases | grammask refused | llguidance refused | llguidance n/a | XGrammar refused |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for k in kinds() {
            let of: Vec<&CompileVerdicts> = self.compiles.iter().filter(|c| c.kind == k).collect();
            if of.is_empty() {
                continue;
            }
            let g = of.iter().filter(|c| c.grammask.is_err()).count();
            let l = of.iter().filter(|c| c.llguidance.is_err()).count();
            let na = of.iter().filter(|c| c.llguidance == Ok(false)).count();
            let x = if xg {
                of.iter().filter(|c| matches!(c.xgrammar, Some(Err(_)))).count().to_string()
            } else {
                "—".into()
            };
            let _ = writeln!(s, "| {} | {} | {g} | {l} | {na} | {x} |", k.name(), of.len());
        }
        let refused: Vec<&CompileVerdicts> = self
            .compiles
            .iter()
            .filter(|c| c.grammask.is_err() || c.llguidance.is_err() || matches!(c.xgrammar, Some(Err(_))))
            .collect();
        if !refused.is_empty() {
            let _ = writeln!(s, "\nCases refused by any of them:\n");
        }
        let say = |r: &Result<(), String>| match r {
            Ok(()) => "compiles".to_string(),
            Err(e) => format!("refuses: {e}"),
        };
        for c in refused {
            let llg = match &c.llguidance {
                Ok(true) => "compiles".to_string(),
                Ok(false) => "n/a".to_string(),
                Err(e) => format!("refuses: {e}"),
            };
            let xgr = c.xgrammar.as_ref().map_or("—".to_string(), say);
            let _ = writeln!(
                s,
                "- `{}` ({}): grammask {}; llguidance {llg}; XGrammar {xgr}",
                c.id,
                c.kind.name(),
                say(&c.grammask)
            );
        }
    }

    /// The adapter issues' goals, judged row by row: ≥ 0.98× unconstrained throughput
    /// where the forward takes ≥ 5 ms; the step thread's work beyond the fill (wait, apply,
    /// what masked sampling costs over unmasked, accept, jump-forward, the rest) ≤ 20 µs a
    /// step at batch 1 and ≤ 2 µs a row at batch ≥ 8.
    fn goals(&self, s: &mut String) {
        let mark = |ok: bool| if ok { "✓" } else { "✗" };
        let _ = writeln!(s, "\n### Against the goals\n");
        let _ = writeln!(
            s,
            "Throughput is judged at a full batch where the engine times its steps (the router): each \
             run's tokens per row-step over its mean step time (the steps' own wall time, forward \
             included), constrained over unconstrained — a server's steady state. The whole run's ratio \
             beside it also weighs each run's tail, the last requests decoding in a batch that empties, \
             whose length follows the answers' lengths, which differ constrained and not. Beyond the \
             fill: the constrained run's wait, apply, accept, jump-forward and rest per step, plus what \
             masking costs sampling when it costs (never credited when it saves) — from the paired run \
             (masked − unmasked draw per row, \"paired\"), else from the two runs' sampling per sampled \
             row (\"two runs\") — times the constrained run's sampled rows per step.\n"
        );
        let _ = writeln!(
            s,
            "| adapter | jump-forward | batch | ≥ 0.98× unconstrained (forward ≥ 5 ms) | beyond the fill: ≤ 20 µs/step (batch 1), ≤ 2 µs/row (batch ≥ 8) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|");
        for o in &self.overhead {
            let ratio = if o.unconstrained_tps > 0.0 { o.constrained_tps / o.unconstrained_tps } else { 0.0 };
            let tps = if self.real_forward.contains(&o.name) {
                // Judged at a full batch where the engine times its steps (see
                // `Overhead::steady_ratio`), the whole run's ratio beside it.
                match o.steady_ratio() {
                    Some(steady) => {
                        format!(
                            "{} {steady:.3}× at a full batch ({ratio:.3}× whole run)",
                            mark(steady >= 0.98)
                        )
                    }
                    None => format!("{} {ratio:.3}×", mark(ratio >= 0.98)),
                }
            } else {
                "— (forward < 5 ms)".to_string()
            };
            let adapter = o.steps.as_ref().map_or("—".to_string(), |t| {
                let paired = o.paired_steps.as_ref().filter(|p| p.paired_rows > 0);
                let beyond = t.beyond_fill_us(o.unconstrained_steps.as_ref(), paired);
                let how = match (paired, &o.unconstrained_steps) {
                    (Some(_), _) => ", paired",
                    (None, Some(_)) => ", two runs",
                    (None, None) => "",
                };
                let rows = t.rows_per_step();
                if o.batch >= 8 {
                    let per_row = beyond / rows.max(1.0);
                    format!(
                        "{} {per_row:.2} µs/row ({beyond:.1} µs/step, {rows:.1} rows{how})",
                        mark(per_row <= 2.0)
                    )
                } else {
                    let how = how.trim_start_matches(", ");
                    let how = if how.is_empty() { String::new() } else { format!(" ({how})") };
                    format!("{} {beyond:.1} µs/step{how}", mark(beyond <= 20.0))
                }
            });
            let _ =
                writeln!(s, "| {} | {} | {} | {tps} | {adapter} |", o.name, jf_name(o.jump_forward), o.batch);
        }
    }

    /// The one-line JSON summary.
    pub fn summary(&self) -> Value {
        let adapters: Vec<Value> = self
            .validity
            .iter()
            .map(|v| {
                let t = v.total();
                json!({"name": v.name, "cases": v.cases, "valid": t.valid, "invalid": t.invalid,
                       "cut_off": t.cut_off, "cut_off_checked": t.cut_off_checked,
                       "cut_off_invalid": t.cut_off_invalid, "refused": t.refused, "errors": t.errors,
                       "oracle": v.oracle_names(), "oracle_disagreements": v.disagreements.len(),
                       "overhead_pct": self.overhead_pct(&v.name)})
            })
            .collect();
        json!({ "adapters": adapters })
    }

    /// Writes the chart of overhead against batch size (one line per adapter) to `path`.
    pub fn chart(&self, path: &Path) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let label = |o: &Overhead| match o.jump_forward {
            Some(false) => format!("{} (jump-forward off)", o.name),
            _ => o.name.clone(),
        };
        let mut names: Vec<String> = self.overhead.iter().map(label).collect();
        names.sort_unstable();
        names.dedup();
        let max_batch = self.overhead.iter().map(|o| o.batch).max().unwrap_or(1).max(2) as f64;
        let pcts = self.overhead.iter().map(Overhead::pct);
        let lo = pcts.clone().fold(0.0f64, f64::min).min(-1.0) - 1.0;
        let hi = pcts.fold(0.0f64, f64::max).max(2.0) + 1.0;
        let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption("Constrained vs unconstrained: throughput lost (%)", ("sans-serif", 20))
            .margin(20)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((0.5f64..max_batch * 1.5).log_scale(), lo..hi)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("batch size (requests in flight)")
            .y_desc("overhead %")
            .draw()
            .map_err(|e| err(&e))?;
        for (i, name) in names.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let mut pts: Vec<(f64, f64)> = self
                .overhead
                .iter()
                .filter(|o| label(o) == *name)
                .map(|o| (o.batch as f64, o.pct()))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(name.to_string())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
        Ok(())
    }
}

impl ValidityReport {
    /// Seeds per case in this run (outputs / cases).
    pub fn seeds(&self) -> usize {
        self.total().outputs.checked_div(self.cases).unwrap_or(0)
    }

    /// The oracles that judged the outputs, `+`-joined.
    pub fn oracle_names(&self) -> String {
        self.oracles.iter().copied().collect::<Vec<_>>().join("+")
    }

    /// One line of counts, for a log.
    pub fn line(&self) -> String {
        let t = self.total();
        format!(
            "{}: {} cases, {} outputs: {} valid, {} invalid, {} cut off ({} checked, {} invalid), {} refused, {} \
             errors ({:.1} s; oracles {})",
            self.name,
            self.cases,
            t.outputs,
            t.valid,
            t.invalid,
            t.cut_off,
            t.cut_off_checked,
            t.cut_off_invalid,
            t.refused,
            t.errors,
            self.wall.as_secs_f64(),
            self.oracle_names()
        )
    }
}

/// A validity table row: `adapter | kind | cases | outputs | …counts` (bold for a total).
fn tally_row(s: &mut String, name: &str, kind: &str, cases: usize, t: &crate::run::Tally, bold: bool) {
    let cells = [
        name.to_string(),
        kind.to_string(),
        cases.to_string(),
        t.outputs.to_string(),
        t.valid.to_string(),
        t.invalid.to_string(),
        t.cut_off.to_string(),
        t.cut_off_checked.to_string(),
        t.cut_off_invalid.to_string(),
        t.refused.to_string(),
        t.errors.to_string(),
    ];
    let cells: Vec<String> = cells.into_iter().map(|c| if bold { format!("**{c}**") } else { c }).collect();
    let _ = writeln!(s, "| {} |", cells.join(" | "));
}

/// The kinds in report order.
pub fn kinds() -> [Kind; 6] {
    [Kind::JsonSchema, Kind::JsonObject, Kind::Grammar, Kind::Regex, Kind::Lark, Kind::Tools]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::StepTimes;
    use std::time::Duration;

    fn row(name: &str, batch: usize, constrained: f64, apply_us: u64, sample_us: [u64; 2]) -> Overhead {
        let times = |sample: u64, apply: u64| StepTimes {
            steps: 10,
            rows: 10 * batch as u64,
            fill: Duration::from_micros(10_000),
            apply: Duration::from_micros(apply * 10),
            sample: Duration::from_micros(sample * 10),
            ..StepTimes::default()
        };
        Overhead {
            name: name.into(),
            batch,
            unconstrained_tps: 100.0,
            constrained_tps: constrained,
            tokens: [0, 0],
            steps: Some(times(sample_us[1], apply_us)),
            unconstrained_steps: Some(times(sample_us[0], 0)),
            paired_steps: None,
            jump_forward: Some(true),
        }
    }

    #[test]
    fn goals_are_judged_row_by_row() {
        let report = Report {
            overhead: vec![
                row("router-tgi", 1, 99.0, 5, [10, 10]),
                row("router-openai", 1, 90.0, 5, [10, 30]),
                row("router-tgi", 8, 99.0, 8, [10, 10]),
                row("mistralrs", 8, 50.0, 40, [10, 5]),
                Overhead {
                    // The two runs say 20 µs more; the paired draws, 1 µs a row.
                    paired_steps: Some(StepTimes {
                        paired_rows: 1000,
                        paired_masked: Duration::from_millis(3),
                        paired_unmasked: Duration::from_millis(2),
                        ..StepTimes::default()
                    }),
                    ..row("router-completions", 1, 99.0, 5, [10, 30])
                },
            ],
            real_forward: vec!["router-tgi".into(), "router-openai".into(), "router-completions".into()],
            ..Report::default()
        };
        let md = report.markdown();
        // The fill (1 ms a step) does not count against the adapter; masked sampling's cost
        // over unmasked does (20 µs more: 25 in all); a gain in sampling is not credited.
        assert!(md.contains("| router-tgi | on | 1 | ✓ 0.990× | ✓ 5.0 µs/step (two runs) |"), "{md}");
        assert!(md.contains("| router-openai | on | 1 | ✗ 0.900× | ✗ 25.0 µs/step (two runs) |"), "{md}");
        assert!(md.contains("| router-completions | on | 1 | ✓ 0.990× | ✓ 6.0 µs/step (paired) |"), "{md}");
        assert!(md.contains("| 30.0 (10.0) | +1.00 (1000) |"), "{md}");
        assert!(
            md.contains(
                "| router-tgi | on | 8 | ✓ 0.990× | ✓ 1.00 µs/row (8.0 µs/step, 8.0 rows, two runs) |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| mistralrs | on | 8 | — (forward < 5 ms) | ✗ 5.00 µs/row (40.0 µs/step, 8.0 rows, two runs) |"
            ),
            "{md}"
        );
    }
}
