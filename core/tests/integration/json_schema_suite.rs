//! The official JSON-Schema-Test-Suite (draft2020-12 and draft7, with `optional/` and
//! `optional/format/`) run through grammask's JSON Schema front-end.
//!
//! For every group the schema is converted (non-strict, so extra properties follow JSON
//! Schema semantics) and compiled against the Llama-3.1 tokenizer; each instance is
//! serialized like `json.dumps(data, ensure_ascii=False)` and fed byte by byte. A valid
//! instance passes when it is accepted in full and the matcher can terminate; an invalid
//! one passes when it is rejected. A group whose schema does not convert fails all its
//! tests (except groups needing remote `$ref`s, which are skipped with that reason).
//!
//! - Ratchet: the pass count of each file must not drop below
//!   `tests/data/json_schema_suite_baseline.json` (improvements pass; rewrite the baseline
//!   with `GRAMMASK_WRITE_BASELINE=1`).
//! - `GRAMMASK_WRITE_COVERAGE=1` rewrites `docs/json-schema-coverage.md`.

use crate::common;

use grammask::json_schema::{
    json_schema_to_grammar, to_python_json, JsonSchemaOptions, SchemaErrorKind, Whitespace,
};
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Default, Debug, Clone)]
struct FileStats {
    groups: usize,
    skipped_groups: usize,
    compile_errors: usize,
    tests: usize,
    passed: usize,
    skip_reasons: Vec<String>,
    errors: BTreeMap<String, usize>,
}

fn suite_files(draft: &str) -> Vec<(String, PathBuf)> {
    let base = common::data_dir().join("json-schema-test-suite/tests").join(draft);
    let mut out = Vec::new();
    for sub in ["", "optional", "optional/format"] {
        let dir = base.join(sub);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for f in files {
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            let key =
                if sub.is_empty() { format!("{draft}/{name}") } else { format!("{draft}/{sub}/{name}") };
            out.push((key, f));
        }
    }
    out
}

fn error_label(k: &SchemaErrorKind) -> String {
    match k {
        SchemaErrorKind::Unsupported { keyword, .. } => format!("unsupported `{keyword}`"),
        SchemaErrorKind::UnresolvableRef(_) => "unresolvable $ref".into(),
        SchemaErrorKind::Regex(e) => format!("regex: {}", e.kind),
        SchemaErrorKind::Unsatisfiable(_) => "unsatisfiable".into(),
        SchemaErrorKind::NotASchema(_) => "not a schema".into(),
        SchemaErrorKind::Limit { what, .. } => format!("limit: {what}"),
        _ => "other".into(),
    }
}

fn needs_remote(schema: &Value) -> bool {
    let s = schema.to_string();
    s.contains("localhost:1234") || s.contains("json-schema.org/draft") && s.contains("$ref\":\"http")
}

fn run_file(compiler: &GrammarCompiler, path: &Path) -> FileStats {
    let groups: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let opts = JsonSchemaOptions {
        whitespace: Whitespace::Compact,
        strict: false,
        lenient: false,
        ..Default::default()
    };
    let mut st = FileStats::default();
    for g in &groups {
        st.groups += 1;
        let tests = g["tests"].as_array().unwrap();
        // The suite's draft7 schemas do not name their dialect; say it, as a user would.
        let schema = &match (&g["schema"], path.to_string_lossy().contains("draft7")) {
            (Value::Object(m), true) if !m.contains_key("$schema") => {
                let mut m = m.clone();
                m.insert("$schema".into(), "http://json-schema.org/draft-07/schema#".into());
                Value::Object(m)
            }
            (s, _) => s.clone(),
        };
        let converted = std::panic::catch_unwind(|| json_schema_to_grammar(schema, &opts));
        let grammar = match converted {
            Err(_) => panic!("json_schema_to_grammar panicked on {} / {}", path.display(), g["description"]),
            Ok(Err(e)) => {
                if matches!(e.kind, SchemaErrorKind::UnresolvableRef(_)) && needs_remote(schema) {
                    st.skipped_groups += 1;
                    st.skip_reasons
                        .push(format!("{}: needs a remote $ref", g["description"].as_str().unwrap_or("")));
                    continue;
                }
                st.compile_errors += 1;
                *st.errors.entry(error_label(&e.kind)).or_default() += 1;
                st.tests += tests.len();
                continue;
            }
            Ok(Ok(g)) => g,
        };
        let compiled = match compiler.compile(&GrammarSpec::Grammar(grammar)) {
            Ok(c) => c,
            Err(e) => {
                st.compile_errors += 1;
                *st.errors
                    .entry(format!("compile: {}", e.to_string().chars().take(40).collect::<String>()))
                    .or_default() += 1;
                st.tests += tests.len();
                continue;
            }
        };
        for t in tests {
            st.tests += 1;
            let text = to_python_json(&t["data"], Whitespace::Compact);
            let mut m = GrammarMatcher::new(compiled.clone());
            let accepted = m.accept_bytes(text.as_bytes()).is_ok() && m.can_terminate();
            let valid = t["valid"].as_bool().unwrap();
            if accepted == valid {
                st.passed += 1;
            } else if std::env::var_os("GRAMMASK_SUITE_VERBOSE").is_some() {
                eprintln!(
                    "FAIL {} | {} | {} | valid={valid} | {text}",
                    path.display(),
                    g["description"],
                    t["description"]
                );
            }
        }
    }
    st
}

fn baseline_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/json_schema_suite_baseline.json")
}

#[test]
fn json_schema_test_suite() {
    let compiler = GrammarCompiler::new(common::tokenizer("llama3_1"));
    let mut results: Vec<(String, FileStats)> = Vec::new();
    for draft in ["draft2020-12", "draft7"] {
        for (key, path) in suite_files(draft) {
            results.push((key, run_file(&compiler, &path)));
        }
    }
    assert!(!results.is_empty(), "no test-suite files found under {}", common::data_dir().display());
    let total: usize = results.iter().map(|r| r.1.tests).sum();
    let passed: usize = results.iter().map(|r| r.1.passed).sum();
    eprintln!("JSON-Schema-Test-Suite: {passed}/{total} tests pass");

    if std::env::var_os("GRAMMASK_WRITE_COVERAGE").is_some() {
        write_coverage(&results, passed, total);
    }
    let current: BTreeMap<String, usize> = results.iter().map(|(k, s)| (k.clone(), s.passed)).collect();
    if std::env::var_os("GRAMMASK_WRITE_BASELINE").is_some() {
        std::fs::write(baseline_path(), serde_json::to_string_pretty(&current).unwrap() + "\n").unwrap();
    }
    let baseline: BTreeMap<String, usize> =
        serde_json::from_str(&std::fs::read_to_string(baseline_path()).expect("baseline file")).unwrap();
    let mut regressions = Vec::new();
    for (k, &want) in &baseline {
        let got = current.get(k).copied().unwrap_or(0);
        if got < want {
            regressions.push(format!("{k}: {got} < baseline {want}"));
        }
    }
    assert!(regressions.is_empty(), "JSON-Schema-Test-Suite regressions:\n{}", regressions.join("\n"));
}

fn write_coverage(results: &[(String, FileStats)], passed: usize, total: usize) {
    let mut md = String::new();
    md.push_str("# JSON Schema coverage: JSON-Schema-Test-Suite\n\n");
    md.push_str("Generated by `GRAMMASK_WRITE_COVERAGE=1 cargo test --release -p grammask --test integration json_schema_suite::`.\n\n");
    md.push_str("Each group's schema is converted with `JsonSchemaOptions { strict: false, lenient: false, whitespace: Compact }` ");
    md.push_str("and compiled for the Llama-3.1 tokenizer; each instance is serialized like `json.dumps(data, ensure_ascii=False)`. ");
    md.push_str("A valid instance passes when it is accepted in full and the matcher can terminate, an invalid one when it is rejected. ");
    md.push_str(
        "A schema that does not convert (a typed error: unsupported keyword, …) fails all its tests. ",
    );
    md.push_str("Formats are asserted (grammask enforces them), so `format.json`'s annotation-only expectations fail where a format is known; an unknown format is an annotation (any string, with a warning), while `regex` is an unsupported keyword, a typed error by default, like a `oneOf` whose branches may overlap when excluding the others from each branch is not exact (`oneOf.json`). ");
    md.push_str("The optional format tests still failed are what a regex of workable size cannot say, each reported as a schema warning (`json_schema::format::format_caveat`): an `xn--` A-label's Punycode (`hostname`), IDNA2008's contextual and Bidi rules and a leading combining mark (`idn-hostname`), a leap second at a local offset (`time`, `date-time`: exact, it took a first mask from under 1 ms to 70 ms), labels counted in characters rather than A-label octets (`idn-hostname`), and `regex`/`ecmascript-regex`, refused. ");
    md.push_str("Draft 7 schemas are given `\"$schema\": \"http://json-schema.org/draft-07/schema#\"` when they name no dialect (the suite's files do not), so `$ref` overrides its siblings there. ");
    md.push_str("Object members are accepted in any order, each declared one at most once (`PropertyOrder::Any`, the default).\n\n");
    md.push_str(&format!(
        "**Total: {passed} / {total} tests pass ({:.1}%).**\n\n",
        100.0 * passed as f64 / total.max(1) as f64
    ));
    md.push_str("| file | tests | passed | rate | groups | not converted | skipped | conversion errors |\n|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (k, s) in results {
        let errs: Vec<String> = s.errors.iter().map(|(e, n)| format!("{e} ×{n}")).collect();
        md.push_str(&format!(
            "| {k} | {} | {} | {:.0}% | {} | {} | {} | {} |\n",
            s.tests,
            s.passed,
            100.0 * s.passed as f64 / s.tests.max(1) as f64,
            s.groups,
            s.compile_errors,
            s.skipped_groups,
            errs.join(", ")
        ));
    }
    // Earlier pass counts of files a change set out to improve, kept beside the current
    // ones (the baseline file holds only the latest): (file, when, passed then).
    const HISTORY: &[(&str, &str, usize)] = &[
        ("draft2020-12/not.json", "before `not` of structured schemas (a8f3035)", 11),
        ("draft7/not.json", "before `not` of structured schemas (a8f3035)", 11),
        ("draft2020-12/oneOf.json", "before `not` of structured schemas (a8f3035)", 7),
        ("draft7/oneOf.json", "before `not` of structured schemas (a8f3035)", 7),
    ];
    md.push_str("\n## Ratchet history\n\n");
    md.push_str("`not` of structured schemas (issue 27 §3) and, through it, `oneOf` of overlapping branches (each branch less the others).\n\n");
    md.push_str("| file | tests | then | passed then | passed now |\n|---|---:|---|---:|---:|\n");
    for (file, when, then) in HISTORY {
        let Some((_, s)) = results.iter().find(|(k, _)| k == file) else { continue };
        md.push_str(&format!("| {file} | {} | {when} | {then} | {} |\n", s.tests, s.passed));
    }
    md.push_str("\n## Skipped groups\n\n");
    for (k, s) in results {
        for r in &s.skip_reasons {
            md.push_str(&format!("- {k}: {r}\n"));
        }
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/json-schema-coverage.md");
    std::fs::write(path, md).unwrap();
}
