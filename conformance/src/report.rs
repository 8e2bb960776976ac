//! The report: a markdown table (adapter × constraint kind: cases, valid, invalid, cut
//! off, overhead), one SVG chart of overhead against batch size, and a one-line JSON
//! summary.

use crate::case::Kind;
use crate::run::{Overhead, ValidityReport};
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
}

impl Report {
    /// The overhead of `name` at its largest measured batch, in %.
    fn overhead_pct(&self, name: &str) -> Option<f64> {
        self.overhead.iter().filter(|o| o.name == name).max_by_key(|o| o.batch).map(Overhead::pct)
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
            "Each output is judged by its case's validator (the `jsonschema` crate, the `regex` crate, grammask's \
             brute-force Earley recognizer, the tool-call parser plus `jsonschema`), never by the matcher that \
             produced it; cut off = `max_new_tokens` reached (not counted valid); errors = the engine refused, \
             panicked or hung. Cases an adapter's API cannot express are not counted.\n"
        );
        let _ = writeln!(s, "| adapter | kind | cases | outputs | valid | invalid | cut off | errors |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for v in &self.validity {
            for (k, t) in &v.by_kind {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    v.name,
                    k.name(),
                    t.outputs / v.seeds().max(1),
                    t.outputs,
                    t.valid,
                    t.invalid,
                    t.cut_off,
                    t.errors
                );
            }
            let t = v.total();
            let _ = writeln!(
                s,
                "| **{}** | **all** | **{}** | **{}** | **{}** | **{}** | **{}** | **{}** |",
                v.name, v.cases, t.outputs, t.valid, t.invalid, t.cut_off, t.errors
            );
        }
        let failures: Vec<&String> = self.validity.iter().flat_map(|v| v.failures.iter()).collect();
        if !failures.is_empty() {
            let _ = writeln!(s, "\n### Failures\n");
            for f in failures.iter().take(200) {
                let _ = writeln!(s, "- {f}");
            }
        }
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
                 `--forward-ms`.\n"
            );
            let _ = writeln!(
                s,
                "| adapter | batch | unconstrained tok/s | constrained tok/s | overhead % | fill µs/step | wait µs/step | apply µs/step | other µs/step |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
            for o in &self.overhead {
                let (f, w, a, x) = o.steps.as_ref().map_or((0.0, 0.0, 0.0, 0.0), |t| t.per_step_us());
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.1} | {:.1} | {:.2} | {f:.1} | {w:.1} | {a:.1} | {x:.1} |",
                    o.name,
                    o.batch,
                    o.unconstrained_tps,
                    o.constrained_tps,
                    o.pct()
                );
            }
            let _ = writeln!(s, "\n![overhead against batch size](overhead.svg)");
            self.goals(&mut s);
        }
        s
    }

    /// The adapter issues' goals, judged row by row: ≥ 0.98× unconstrained throughput
    /// where the forward takes ≥ 5 ms, and ≤ 20 µs per step of adapter work beyond the
    /// fill (wait, apply and the rest).
    fn goals(&self, s: &mut String) {
        let mark = |ok: bool| if ok { "✓" } else { "✗" };
        let _ = writeln!(s, "\n### Against the goals\n");
        let _ = writeln!(s, "| adapter | batch | ≥ 0.98× unconstrained (forward ≥ 5 ms) | adapter µs/step beyond the fill ≤ 20 |");
        let _ = writeln!(s, "|---|---|---|---|");
        for o in &self.overhead {
            let ratio = if o.unconstrained_tps > 0.0 { o.constrained_tps / o.unconstrained_tps } else { 0.0 };
            let tps = if self.real_forward.contains(&o.name) {
                format!("{} {ratio:.3}×", mark(ratio >= 0.98))
            } else {
                "— (forward < 5 ms)".to_string()
            };
            let beyond = o.steps.as_ref().map(|t| {
                let (_, w, a, x) = t.per_step_us();
                w + a + x
            });
            let adapter = beyond.map_or("—".to_string(), |b| format!("{} {b:.1}", mark(b <= 20.0)));
            let _ = writeln!(s, "| {} | {} | {tps} | {adapter} |", o.name, o.batch);
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
                       "cut_off": t.cut_off, "errors": t.errors, "overhead_pct": self.overhead_pct(&v.name)})
            })
            .collect();
        json!({ "adapters": adapters })
    }

    /// Writes the chart of overhead against batch size (one line per adapter) to `path`.
    pub fn chart(&self, path: &Path) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let mut names: Vec<&str> = self.overhead.iter().map(|o| o.name.as_str()).collect();
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
            let mut pts: Vec<(f64, f64)> =
                self.overhead.iter().filter(|o| o.name == *name).map(|o| (o.batch as f64, o.pct())).collect();
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

    fn row(name: &str, unconstrained: f64, constrained: f64, apply_us: u64) -> Overhead {
        Overhead {
            name: name.into(),
            batch: 8,
            unconstrained_tps: unconstrained,
            constrained_tps: constrained,
            steps: Some(StepTimes {
                steps: 10,
                fill: Duration::from_micros(10_000),
                apply: Duration::from_micros(apply_us * 10),
                ..StepTimes::default()
            }),
        }
    }

    #[test]
    fn goals_are_judged_row_by_row() {
        let report = Report {
            overhead: vec![
                row("router-tgi", 100.0, 99.0, 5),
                row("router-openai", 100.0, 90.0, 50),
                row("mistralrs", 100.0, 50.0, 5),
            ],
            real_forward: vec!["router-tgi".into(), "router-openai".into()],
            ..Report::default()
        };
        let md = report.markdown();
        // The fill (1 ms a step) does not count against the adapter's 20 µs.
        assert!(md.contains("| router-tgi | 8 | ✓ 0.990× | ✓ 5.0 |"), "{md}");
        assert!(md.contains("| router-openai | 8 | ✗ 0.900× | ✗ 50.0 |"), "{md}");
        assert!(md.contains("| mistralrs | 8 | — (forward < 5 ms) | ✓ 5.0 |"), "{md}");
    }
}
