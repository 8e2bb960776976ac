//! `grammask-conformance report`: runs the corpus through the adapters and writes the
//! report (markdown and chart) to `--out`; the last stdout line is the JSON summary
//! `{"adapters": [{"name", "cases", "valid", "invalid", "cut_off", "cut_off_checked",
//! "cut_off_invalid", "refused", "errors", "oracle", "overhead_pct"}]}`.

use clap::{Parser, Subcommand};
use grammask_conformance::case::{corpus, maskbench_cases, Case, CorpusOptions, Kind};
use grammask_conformance::engine::Engine;
use grammask_conformance::engines::mistralrs::MistralRsEngine;
use grammask_conformance::engines::reference::ReferenceEngine;
use grammask_conformance::engines::router::{Api, RouterEngine, RouterSetup};
use grammask_conformance::engines::Bias;
use grammask_conformance::report::{CompileVerdicts, Report};
use grammask_conformance::run::{overhead, paired_steps, validity, Isolated, Oracles, RunOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const ADAPTERS: [&str; 10] = [
    "reference",
    "reference-unbiased",
    "router-tgi",
    "router-tgi-stream",
    "router-openai",
    "router-openai-stream",
    "router-completions",
    "router-completions-stream",
    "router-cuda",
    "mistralrs",
];

#[derive(Parser)]
#[command(about = "grammask's conformance suite: every adapter, one corpus")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the suite and writes the report.
    Report(ReportArgs),
}

#[derive(clap::Args)]
struct ReportArgs {
    /// Adapters to run (default: all of reference, reference-unbiased, router-tgi,
    /// router-tgi-stream, router-openai, router-openai-stream, router-completions,
    /// router-completions-stream, router-cuda, mistralrs).
    #[arg(long = "adapter")]
    adapters: Vec<String>,
    /// Extra MaskBench files or folders, as JSON-schema cases (`--limit` per path).
    #[arg(long = "cases", num_args = 1..)]
    cases: Vec<PathBuf>,
    /// Schemas per extra path.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Only cases of these kinds (json_schema, json_object, grammar, regex, lark, tools;
    /// default: all) — e.g. the JSON-schema cases alone for a slow real model.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Built-in JSON schemas per dev split.
    #[arg(long, default_value_t = 6)]
    schemas_per_split: usize,
    /// Also the large grammars (C, chess, English, the Lark grammar of Lark, …).
    #[arg(long)]
    large: bool,
    /// Seeds per case.
    #[arg(long, default_value_t = 2)]
    seeds: u64,
    /// Most tokens per output.
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// Also measure overhead (constrained vs unconstrained tokens/s) at these batch
    /// sizes (slow: a benchmark, not a test).
    #[arg(long, value_delimiter = ',')]
    overhead: Vec<usize>,
    /// The router's simulated forward time for the overhead runs, milliseconds.
    #[arg(long, default_value_t = 5.0)]
    forward_ms: f64,
    /// Run the router and mistral.rs adapters on a real model (a Llama-family GGUF: the
    /// router's own forward on the CPU, mistral.rs's own loader; e.g. SmolLM2 from
    /// `adapters/mistralrs/scripts/fetch-smollm2.sh`) instead of the random-weight ones
    /// (slow: the real-model part of the suite).
    #[arg(long, value_name = "PATH")]
    gguf: Option<PathBuf>,
    /// How long one batch of requests may take before the engine counts as hung
    /// (default 300 s; 3600 s with `--gguf`).
    #[arg(long)]
    timeout_s: Option<u64>,
    /// Where the report goes.
    #[arg(long, default_value = "docs/conformance")]
    out: PathBuf,
    /// Leave out the official Python clients' contract against the router (run by default
    /// when `.venv-clients/` is installed; the report says when it is not).
    #[arg(long)]
    no_clients: bool,
    /// A Python with XGrammar 0.2.8 importable: XGrammar then compiles every case (the
    /// report's compile verdicts) and judges the tool-calling outputs with its own matcher
    /// (`benches/peers/xgrammar_oracle.py`; no torch needed).
    #[arg(long, value_name = "PYTHON")]
    xgrammar: Option<PathBuf>,
}

fn make(
    name: &str,
    forward: Duration,
    batch: usize,
    gguf: Option<&PathBuf>,
    scratch: &std::path::Path,
    jump_forward: bool,
    pair_masked_draws: bool,
) -> Result<Box<dyn Engine>, String> {
    let tok = grammask_conformance::engines::tokenizer()?;
    let setup = RouterSetup {
        forward,
        max_batch_size: batch,
        gguf: gguf.cloned(),
        jump_forward,
        pair_masked_draws,
        ..RouterSetup::default()
    };
    let router = |api| RouterEngine::start(tok.clone(), api, &setup).map(|e| Box::new(e) as Box<dyn Engine>);
    let e: Box<dyn Engine> = match name {
        "reference" => Box::new(ReferenceEngine::new(tok.clone(), 11)),
        "reference-unbiased" => Box::new(ReferenceEngine::with_bias(tok.clone(), 11, Bias::None)),
        "router-tgi" => router(Api::Tgi).map_err(|e| e.0)?,
        "router-tgi-stream" => router(Api::TgiStream).map_err(|e| e.0)?,
        "router-openai" => router(Api::OpenAi).map_err(|e| e.0)?,
        "router-openai-stream" => router(Api::OpenAiStream).map_err(|e| e.0)?,
        "router-completions" => router(Api::Completions).map_err(|e| e.0)?,
        "router-completions-stream" => router(Api::CompletionsStream).map_err(|e| e.0)?,
        // OpenAI's chat API on the router's CUDA path (device 0): where no GPU or driver is
        // there, starting fails with the reason, which the report prints.
        "router-cuda" => Box::new(
            RouterEngine::start(
                tok.clone(),
                Api::OpenAi,
                &RouterSetup { cuda_device: Some(0), ..setup.clone() },
            )
            .map_err(|e| e.0)?,
        ),
        "mistralrs" => Box::new(
            match gguf {
                Some(p) => MistralRsEngine::start_gguf(p),
                None => MistralRsEngine::start(scratch),
            }
            .map_err(|e| e.0)?,
        ),
        other => return Err(format!("unknown adapter `{other}` (known: {})", ADAPTERS.join(", "))),
    };
    Ok(e)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Command::Report(a) = Cli::parse().command;
    let mut cases: Vec<Case> = corpus(&CorpusOptions {
        schemas_per_split: a.schemas_per_split,
        large_grammars: a.large,
        ..Default::default()
    })?;
    for p in &a.cases {
        cases.extend(maskbench_cases(p, a.limit)?);
    }
    if !a.kinds.is_empty() {
        let known = [Kind::JsonSchema, Kind::JsonObject, Kind::Grammar, Kind::Regex, Kind::Lark, Kind::Tools];
        for k in &a.kinds {
            if !known.iter().any(|n| n.name() == k) {
                let names: Vec<&str> = known.iter().map(|n| n.name()).collect();
                return Err(format!("unknown kind `{k}` (known: {})", names.join(", ")).into());
            }
        }
        cases.retain(|c| a.kinds.iter().any(|k| k == c.kind().name()));
    }
    let tok = grammask_conformance::engines::tokenizer()?;
    let oracles = Oracles::new(&cases, &tok.info)?;
    let cases = Arc::new(cases);
    let adapters: Vec<String> = if a.adapters.is_empty() {
        ADAPTERS.iter().map(|s| s.to_string()).collect()
    } else {
        a.adapters.clone()
    };
    let opts = RunOptions {
        seeds: (1..=a.seeds).collect(),
        max_new_tokens: a.max_new_tokens,
        // A batch of long prompts on a real model on the CPU takes minutes, not seconds.
        timeout: Duration::from_secs(a.timeout_s.unwrap_or(if a.gguf.is_some() { 3600 } else { 300 })),
        ..RunOptions::default()
    };
    let scratch = std::env::temp_dir();
    let mut report = Report {
        settings: format!(
            "{} cases ({} built in per split, {} extra paths), {} seeds, temperature {}, max_new_tokens {}; {}. \
             Command: `cargo run --release -p grammask-conformance -- report{}`",
            cases.len(),
            a.schemas_per_split,
            a.cases.len(),
            a.seeds,
            opts.temperature,
            a.max_new_tokens,
            match &a.gguf {
                None => "adapters on random-weight models (reference and router: the router's simulated model over \
                         Qwen3's tokenizer; mistral.rs: a tiny random Llama)"
                    .to_string(),
                Some(g) => format!(
                    "router and mistral.rs adapters on {} (router: its own Llama forward; both on the CPU); the reference loop on \
                     the random-weight simulated model",
                    g.display()
                ),
            },
            std::env::args().skip(2).map(|s| format!(" {s}")).collect::<String>()
        ),
        real_forward: adapters
            .iter()
            .filter(|n| (n.starts_with("router") && a.forward_ms >= 5.0) || a.gguf.is_some())
            .cloned()
            .collect(),
        ..Report::default()
    };
    for name in &adapters {
        eprintln!("== {name}");
        let engine = match make(name, Duration::from_millis(1), 32, a.gguf.as_ref(), &scratch, true, false) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("{name}: cannot start: {e}");
                report.not_run.push((name.clone(), e));
                continue;
            }
        };
        let mut iso = Isolated::new(engine, cases.clone(), opts.temperature);
        let v = validity(&mut iso, &cases, &oracles, &opts);
        eprintln!("{}", v.line());
        for f in v.failures.iter().take(10) {
            eprintln!("  {f}");
        }
        report.validity.push(v);
        drop(iso);
        if !a.overhead.is_empty() && name != "reference-unbiased" {
            let forward = Duration::from_secs_f64(a.forward_ms / 1e3);
            let o = RunOptions { max_new_tokens: 64, timeout: Duration::from_secs(900), ..opts.clone() };
            // The router twice: jump-forward on (its default) and off (masking alone).
            let jfs: &[Option<bool>] =
                if name.starts_with("router") { &[Some(true), Some(false)] } else { &[None] };
            for &jf in jfs {
                for &b in &a.overhead {
                    // A fresh engine per batch size (the router's max_batch_size is b).
                    let engine =
                        make(name, forward, b, a.gguf.as_ref(), &scratch, jf.unwrap_or(true), false)?;
                    let mut iso = Isolated::new(engine, cases.clone(), 0.0);
                    match overhead(&mut iso, &cases, &o, b, 2) {
                        Ok(mut m) => {
                            m.jump_forward = jf;
                            drop(iso);
                            // The router again, each masked row drawn twice (under its
                            // mask and without) in the same requests' constrained runs:
                            // what masking costs sampling, row for row.
                            if jf.is_some() {
                                // (Failing, the goals fall back on the two runs' sampling
                                // and say so.)
                                let paired = make(
                                    name,
                                    forward,
                                    b,
                                    a.gguf.as_ref(),
                                    &scratch,
                                    jf.unwrap_or(true),
                                    true,
                                )
                                .and_then(|engine| {
                                    let mut iso = Isolated::new(engine, cases.clone(), 0.0);
                                    paired_steps(&mut iso, &cases, &o, b, 2)
                                });
                                match paired {
                                    Ok(p) => m.paired_steps = Some(p),
                                    Err(e) => eprintln!("{name} batch {b}: paired draws: {e}"),
                                }
                            }
                            eprintln!(
                                "{name} batch {b} jump-forward {jf:?}: {:.1} vs {:.1} tok/s ({:.2} %)",
                                m.constrained_tps,
                                m.unconstrained_tps,
                                m.pct()
                            );
                            report.overhead.push(m);
                        }
                        Err(e) => eprintln!("{name} batch {b}: {e}"),
                    }
                }
            }
        }
    }
    let mut xgrammar = None;
    if let Some(python) = &a.xgrammar {
        eprintln!("== xgrammar");
        let tokenizer_json = scratch.join(format!("grammask-conformance-qwen3-{}.json", std::process::id()));
        std::fs::write(&tokenizer_json, grammask_router::server::embedded_qwen3()?.0)?;
        let picked: Vec<Vec<usize>> =
            report.validity.iter().map(|v| grammask_conformance::xgrammar::picked(&cases, v)).collect();
        let texts: Vec<(usize, String, bool)> = report
            .validity
            .iter()
            .zip(&picked)
            .flat_map(|(v, p)| {
                p.iter().map(|&i| {
                    let o = &v.outputs[i];
                    let complete = o.verdict == grammask_conformance::run::Verdict::Valid;
                    (
                        o.case,
                        grammask_conformance::xgrammar::text_for(&cases[o.case], &o.text, complete),
                        complete,
                    )
                })
            })
            .collect();
        let asked: Vec<(usize, &str, bool)> = texts.iter().map(|(c, t, k)| (*c, t.as_str(), *k)).collect();
        let answer = grammask_conformance::xgrammar::ask(
            python,
            &tokenizer_json,
            tok.info.stop_tokens(),
            &cases,
            &asked,
        );
        let _ = std::fs::remove_file(&tokenizer_json);
        let answer = answer?;
        let mut from = 0;
        for (v, p) in report.validity.iter_mut().zip(&picked) {
            grammask_conformance::xgrammar::fold(&cases, v, p, &answer.outputs[from..from + p.len()]);
            from += p.len();
        }
        eprintln!(
            "xgrammar {}: {} compile verdicts, {} outputs judged",
            answer.version,
            answer.compiles.len(),
            from
        );
        xgrammar = Some(answer.compiles);
    }
    report.compiles = CompileVerdicts::of(&cases, &oracles, xgrammar.as_ref());
    if !a.no_clients {
        eprintln!("== official clients");
        let verdict =
            grammask_conformance::clients::run_official_clients(grammask_conformance::engines::tokenizer()?);
        eprintln!("official clients: {}", verdict.line());
        report.clients = Some(verdict.line());
    }
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("report.md"), report.markdown())?;
    // Every failed output whole, one JSON object per line (empty when none failed).
    let failed: String =
        report.validity.iter().flat_map(|v| &v.failed_outputs).map(|f| format!("{f}\n")).collect();
    std::fs::write(a.out.join("failures.jsonl"), failed)?;
    if !report.overhead.is_empty() {
        report.chart(&a.out.join("overhead.svg"))?;
    }
    eprintln!("wrote {}", a.out.join("report.md").display());
    println!("{}", report.summary());
    Ok(())
}
