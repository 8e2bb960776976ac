//! The `grammask` binary: `masks` output format and the default demo.

use crate::common;

use std::process::Command;

fn grammask() -> Command {
    Command::new(env!("CARGO_BIN_EXE_grammask"))
}

#[test]
fn masks_prints_one_line_per_token() {
    let tok = common::data_dir().join("tokenizers/llama3_1");
    let out = grammask()
        .args(["masks", "--tokenizer"])
        .arg(&tok)
        .args(["--builtin-json", "--text", "{\"a\": [1, true]}", "--ids"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let last = lines.last().unwrap();
    assert_eq!(last, &serde_json::json!({"accepted": true, "can_terminate": true}));
    for (i, l) in lines[..lines.len() - 1].iter().enumerate() {
        assert_eq!(l["step"], i);
        let ids = l["ids"].as_array().unwrap();
        assert_eq!(l["allowed"].as_u64().unwrap() as usize, ids.len());
        assert!(ids.contains(&l["token"]), "the text's token must be allowed");
        assert_eq!(l["sha256"].as_str().unwrap().len(), 64);
        assert!(l["fill_us"].as_f64().unwrap() >= 0.0);
    }
    // The first mask of JSON allows `{` but no letters.
    let first: Vec<u64> = lines[0]["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(first.contains(&90)); // "{"
    assert!(!first.contains(&64)); // "a"
}

#[test]
fn masks_reports_rejection() {
    let tok = common::data_dir().join("tokenizers/llama3_1");
    let out = grammask()
        .args(["masks", "--tokenizer"])
        .arg(&tok)
        .args(["--builtin-json", "--text", "{\"a\": tru}"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().last().unwrap(), r#"{"accepted":false,"can_terminate":false}"#);
}

#[test]
fn extra_properties_are_an_option_of_json_schemas() {
    let dir = std::env::temp_dir().join(format!("grammask-cli-extra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("schema.json");
    let tok = common::data_dir().join("tokenizers/llama3_1");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"name": {"type": "string"}, "id": {"type": "integer"}}}"#,
    )
    .unwrap();
    let last_line = |flags: &[&str], text: &str| {
        let mut cmd = grammask();
        cmd.args(["masks", "--tokenizer"]).arg(&tok).arg("--json-schema").arg(&schema);
        let out = cmd.args(flags).args(["--text", text]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().last().unwrap().to_string()
    };
    let (yes, no) =
        (r#"{"accepted":true,"can_terminate":true}"#, r#"{"accepted":false,"can_terminate":false}"#);
    // Strict by default: the undeclared `size` is refused; allowed on request.
    assert_eq!(last_line(&[], r#"{"name": "x", "size": 3}"#), no);
    assert_eq!(last_line(&["--allow-extra-properties"], r#"{"name": "x", "size": 3}"#), yes);
    // Members in any order by default; the schema's order on request.
    assert_eq!(last_line(&[], r#"{"id": 1, "name": "x"}"#), yes);
    assert_eq!(last_line(&["--schema-order"], r#"{"id": 1, "name": "x"}"#), no);
    assert_eq!(last_line(&["--schema-order"], r#"{"name": "x", "id": 1}"#), yes);
    // The option belongs to JSON Schemas only.
    let out = grammask().args(["inspect", "--builtin-json", "--allow-extra-properties"]).output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn bad_grammar_is_an_error_not_a_panic() {
    let dir = std::env::temp_dir().join(format!("grammask-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let g = dir.join("bad.gbnf");
    std::fs::write(&g, "root ::= \"a\" (\n").unwrap();
    let tok = common::data_dir().join("tokenizers/llama3_1");
    let out = grammask()
        .args(["masks", "--tokenizer"])
        .arg(&tok)
        .arg("--grammar")
        .arg(&g)
        .args(["--text", "a"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2:1: expected"), "{err}");
    std::fs::write(&g, b"root ::= \"\xff\"").unwrap();
    let out = grammask().args(["inspect", "--grammar"]).arg(&g).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid UTF-8"));
}

#[test]
fn default_command_runs_the_demo() {
    let out = grammask().output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("embedded Qwen3 tokenizer"));
    assert!(stdout.contains("terminated: true"));
    // The generated document is valid JSON.
    let doc =
        stdout.split("terminated: true):\n").nth(1).unwrap().split("\n\ntime to first mask").next().unwrap();
    serde_json::from_str::<serde_json::Value>(doc)
        .unwrap_or_else(|e| panic!("demo output is not JSON: {e}\n{doc}"));
}

/// A reader that stops early (`grammask masks … | head -1`) ends the tool quietly: no
/// panic on the broken pipe, success status.
#[test]
fn closed_stdout_is_not_a_panic() {
    use std::io::{BufRead, BufReader};
    let tok = common::data_dir().join("tokenizers/llama3_1");
    // String content allows ~128k ids per line: far more than a pipe buffers.
    let mut child = grammask()
        .args(["masks", "--tokenizer"])
        .arg(&tok)
        .args([
            "--builtin-json",
            "--text",
            "[\"abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrstuvwxyz\"]",
            "--ids",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("{\"step\":0"), "{first}");
    // The reader is dropped here: later writes hit a closed pipe.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains("panicked"), "{stderr}");
}

#[test]
fn masks_prints_one_line_per_draft_tree_node() {
    let tok = common::data_dir().join("tokenizers/llama3_1");
    let dir = std::env::temp_dir().join(format!("grammask-cli-tree-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tree = dir.join("tree.json");
    // root → 1:"{" → 3:"\"" ; root → 2:"\""
    std::fs::write(&tree, r#"{"tokens": [-1, 90, 1, 1], "parents": [-1, 0, 0, 1]}"#).unwrap();
    let out = grammask()
        .args(["masks", "--tokenizer"])
        .arg(&tok)
        .args(["--json-schema"])
        .arg(common::data_dir().join("json-schema-test-suite/remotes/integer.json"))
        .args(["--draft-tree"])
        .arg(&tree)
        .arg("--ids")
        .output()
        .unwrap();
    // An integer schema: "{" and "\"" are both rejected at the root.
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 5);
    for (i, l) in lines[..4].iter().enumerate() {
        assert_eq!(l["node"], i);
        assert_eq!(l["allowed"].as_u64().unwrap() as usize, l["ids"].as_array().unwrap().len());
    }
    assert!(lines[0]["allowed"].as_u64().unwrap() > 0);
    assert!(lines[1..4].iter().all(|l| l["allowed"] == 0));
    let out = grammask()
        .args(["masks", "--tokenizer"])
        .arg(&tok)
        .args(["--builtin-json", "--draft-tree"])
        .arg(&tree)
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines[1]["allowed"].as_u64().unwrap() > 0, "after `{{` a key or `}}` may follow");
    assert!(lines[2]["allowed"].as_u64().unwrap() > 0, "a JSON text may be a string");
    assert!(lines[3]["allowed"].as_u64().unwrap() > 0, "after `{{\"` a key's characters follow");
    assert_eq!(lines[4], serde_json::json!({"accepted": true, "can_terminate": false}));
    // A malformed tree is an error that names it.
    std::fs::write(&tree, r#"{"tokens": [-1, 5], "parents": [-1, 1]}"#).unwrap();
    let out = grammask()
        .args(["masks", "--tokenizer"])
        .arg(&tok)
        .args(["--builtin-json", "--draft-tree"])
        .arg(&tree)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cycle"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--token-ids`: the ids are walked as given — the same lines as the text they spell,
/// and a special token (the end of turn) accepted where the grammar may end.
#[test]
fn masks_walks_token_ids_as_given() {
    let dir = std::env::temp_dir().join(format!("grammask-cli-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tok = common::data_dir().join("tokenizers/llama3_1");
    let run = |extra: &[&str]| {
        let out = grammask()
            .args(["masks", "--tokenizer"])
            .arg(&tok)
            .arg("--builtin-json")
            .args(extra)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    let (ok, by_text, err) = run(&["--text", "{\"a\": 1}"]);
    assert!(ok, "{err}");
    let ids: Vec<u64> = by_text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["token"].as_u64())
        .collect();
    let strip = |s: &str| -> Vec<serde_json::Value> {
        s.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("fill_us");
                v
            })
            .collect()
    };
    let file = dir.join("ids.json");
    std::fs::write(&file, serde_json::to_string(&ids).unwrap()).unwrap();
    let (ok, by_ids, err) = run(&["--token-ids", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(strip(&by_ids), strip(&by_text));

    // <|eot_id|> (128009), a special token the text path never produces, ends the output.
    let mut with_eot = ids.clone();
    with_eot.push(128009);
    std::fs::write(&file, serde_json::to_string(&with_eot).unwrap()).unwrap();
    let (ok, out, err) = run(&["--token-ids", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["accepted"], true, "{out}");
    // ... but not before the JSON is complete.
    std::fs::write(&file, serde_json::to_string(&[ids[0], 128009]).unwrap()).unwrap();
    let (ok, out, _) = run(&["--token-ids", file.to_str().unwrap()]);
    assert!(ok);
    assert_eq!(out.lines().last().unwrap(), r#"{"accepted":false,"can_terminate":false}"#);

    // A malformed list is an error naming the entry.
    std::fs::write(&file, "[1, -2]").unwrap();
    let (ok, _, err) = run(&["--token-ids", file.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("/1: a token id"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
