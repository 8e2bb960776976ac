//! XGrammar 0.2.8 as a third oracle, through `benches/peers/xgrammar_oracle.py` in a
//! Python that has it: its compile verdict on every case of the corpus, and its matcher's
//! verdict on tool-calling outputs (the same structural tag grammask compiled, judged by
//! XGrammar's own parser). Run by the report (`--xgrammar PYTHON`), not in CI: XGrammar's
//! wheel is not part of the test environment.

use crate::case::{Case, Kind};
use crate::run::{ValidityReport, Verdict};
use serde_json::{json, Map, Value};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// The helper's script.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../benches/peers/xgrammar_oracle.py");
/// The stand-in for torch XGrammar imports at load ([`SCRIPT`]'s docs).
const SHIM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../benches/peers/torch_shim");

/// XGrammar's answer.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Its version.
    pub version: String,
    /// Case id → `null` (compiled) or its error; cases not in XGrammar's languages absent.
    pub compiles: Map<String, Value>,
    /// Per output asked about: `None` valid, `Some(why)` not (`"n/a"`: no compiled case).
    pub outputs: Vec<Option<String>>,
}

/// Asks XGrammar (`python`: an interpreter with `xgrammar` 0.2.8 importable) about every
/// case of `cases` over the tokenizer in `tokenizer_json`, and about `outputs` (case
/// index, text, whole output or cut-off prefix).
pub fn ask(
    python: &Path,
    tokenizer_json: &Path,
    stop: &[u32],
    cases: &[Case],
    outputs: &[(usize, &str, bool)],
) -> Result<Answer, String> {
    let request = json!({
        "tokenizer": tokenizer_json,
        "stop": stop,
        "cases": cases.iter().map(Case::to_json).collect::<Vec<_>>(),
        "outputs": outputs.iter().map(|(c, text, complete)| json!({
            "case": cases[*c].id, "text": text, "complete": complete
        })).collect::<Vec<_>>(),
    });
    let mut child = Command::new(python)
        .arg(SCRIPT)
        .env("PYTHONPATH", SHIM)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let body = request.to_string();
    // Written from a thread: the helper may answer (fill its stdout) before it has read
    // all of its input.
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(body.as_bytes()));
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let _ = writer.join();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!("{SCRIPT} failed ({}): {}", out.status, tail.join(" / ")));
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("xgrammar's answer: {e}"))?;
    let answers: Vec<Option<String>> = v["outputs"]
        .as_array()
        .ok_or("xgrammar's answer has no outputs")?
        .iter()
        .map(|o| o.as_str().map(str::to_string))
        .collect();
    if answers.len() != outputs.len() {
        return Err(format!("xgrammar answered for {} of {} outputs", answers.len(), outputs.len()));
    }
    Ok(Answer {
        version: v["version"].as_str().unwrap_or("?").to_string(),
        compiles: v["compiles"].as_object().cloned().unwrap_or_default(),
        outputs: answers,
    })
}

/// The text XGrammar judges for an output of `case`: in formats whose arguments are JSON,
/// its strings' characters spelled canonically ([`crate::llg::canonical_json`]) — XGrammar,
/// like llguidance, takes declared keys in one spelling where JSON has several (the
/// `jsonschema` crate judged the arguments as written). Arguments written as XML-like
/// raw text are given as they are.
pub fn text_for(case: &Case, text: &str, complete: bool) -> String {
    use grammask::tool_calling::Family::*;
    let json_arguments = match &case.constraint {
        crate::case::Constraint::Tools { family, .. } => matches!(
            family,
            Llama | Hermes | Qwen3 | Exaone | Kimi | DeepseekR1 | DeepseekV3_1 | Harmony | Mistral | Gemma4
        ),
        _ => true,
    };
    if !json_arguments {
        return text.to_string();
    }
    match crate::llg::canonical_json(text.as_bytes(), complete) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(_) => text.to_string(),
    }
}

/// The outputs of a validity run to put to XGrammar (indices into `v.outputs`): the
/// tool-calling ones whose text holds the calls (an API that reports `tool_calls` apart
/// strips them from the text).
pub fn picked(cases: &[Case], v: &ValidityReport) -> Vec<usize> {
    (0..v.outputs.len())
        .filter(|&i| cases[v.outputs[i].case].kind() == Kind::Tools && v.outputs[i].calls_in_text)
        .collect()
}

/// Folds XGrammar's verdicts on the `picked` outputs of `v` into it: each output XGrammar
/// rejects that the other oracles passed is a disagreement, listed with XGrammar's reason
/// for a reader to settle (XGrammar 0.2.8 is narrower than JSON in places: it refuses
/// `\"` and `\\` inside length-limited strings, for one) — not counted invalid on its word
/// alone.
pub fn fold(cases: &[Case], v: &mut ValidityReport, picked: &[usize], verdicts: &[Option<String>]) {
    for (&i, verdict) in picked.iter().zip(verdicts) {
        let o = &v.outputs[i];
        match verdict.as_deref() {
            Some("n/a") => continue,
            None => {}
            Some(why) => v.disagreements.push(format!(
                "{} / {} / seed {} ({}): {why} — output …{:?}",
                v.name,
                cases[o.case].id,
                o.seed,
                if o.verdict == Verdict::Valid {
                    "valid by the others"
                } else {
                    "cut off, a live prefix by the others"
                },
                o.text.chars().rev().take(200).collect::<String>().chars().rev().collect::<String>()
            )),
        }
        v.oracles.insert("xgrammar");
    }
}
