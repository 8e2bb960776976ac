//! XGrammar 0.2.8 as the report's third oracle (`benches/peers/xgrammar_oracle.py`), run
//! against a venv `benches/peers/xgrammar-venv.sh` makes: not in CI (no XGrammar there).

use grammask::tool_calling::Family;
use grammask_conformance::case::{tool_cases, Case, Constraint};
use grammask_conformance::validate::Validator;

#[test]
#[ignore = "needs XGrammar 0.2.8: run benches/peers/xgrammar-venv.sh first (.venv-xgrammar/)"]
fn xgrammar_compiles_the_cases_and_judges_outputs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv-xgrammar/bin/python");
    assert!(python.exists(), "{} is missing: run benches/peers/xgrammar-venv.sh", python.display());
    let tok = grammask_conformance::engines::tokenizer().unwrap();
    let tokenizer_json =
        std::env::temp_dir().join(format!("xgrammar-oracle-test-{}.json", std::process::id()));
    std::fs::write(&tokenizer_json, grammask_router::server::embedded_qwen3().unwrap().0).unwrap();
    let mut cases: Vec<Case> = tool_cases(Family::Hermes).unwrap();
    cases.push(Case {
        id: "digits".into(),
        prompt: String::new(),
        validator: Validator::regex("[0-9]{3}").unwrap(),
        constraint: Constraint::Regex("[0-9]{3}".into()),
    });
    cases.push(Case {
        id: "broken".into(),
        prompt: String::new(),
        validator: Validator::regex("x").unwrap(),
        constraint: Constraint::Ebnf("root ::= \"a\" |".into()),
    });
    let required = cases.iter().position(|c| c.id.ends_with("required")).unwrap();
    let digits = cases.len() - 2;
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n</tool_call>";
    let outputs = [
        (required, call, true),
        (required, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\"", false),
        (digits, "123", true),
        (digits, "12", true),
        (digits, "12", false),
    ];
    let answer = grammask_conformance::xgrammar::ask(
        &python,
        &tokenizer_json,
        tok.info.stop_tokens(),
        &cases,
        &outputs,
    )
    .unwrap();
    let _ = std::fs::remove_file(&tokenizer_json);
    assert_eq!(answer.version, "0.2.8");
    assert!(answer.compiles["digits"].is_null());
    assert!(answer.compiles["broken"].as_str().unwrap().contains("EBNF"), "{:?}", answer.compiles);
    let v = &answer.outputs;
    assert_eq!(v[0], None, "{v:?}");
    assert!(v[1].as_deref().unwrap().contains("rejects byte"), "{v:?}");
    assert_eq!(v[2], None);
    assert!(v[3].as_deref().unwrap().contains("unfinished"), "{v:?}");
    assert_eq!(v[4], None);
}
