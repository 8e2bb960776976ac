//! Family detection from chat templates: the real configs in ../shared, and the marker each
//! family's template writes calls with.

use crate::common;

use grammask::tool_calling::{DetectError, Family};

fn config(name: &str) -> String {
    std::fs::read_to_string(common::data_dir().join("tokenizers").join(name).join("tokenizer_config.json"))
        .unwrap()
}

#[test]
fn real_tokenizer_configs() {
    assert_eq!(Family::detect_from_tokenizer_config(&config("qwen3")).unwrap(), Some(Family::Qwen3));
    assert_eq!(Family::detect_from_tokenizer_config(&config("llama3_1")).unwrap(), Some(Family::Llama));
    // Llama 2's config has no chat template.
    assert_eq!(Family::detect_from_tokenizer_config(&config("llama2")).unwrap(), None);
}

#[test]
fn each_family_by_its_call_markers() {
    // The lines a template writes an earlier call with (abridged from each family's template).
    let cases: &[(&str, Family)] = &[
        ("<|start|>assistant<|channel|>commentary to=functions.{{ name }}", Family::Harmony),
        ("]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"{{ name }}\">", Family::MinimaxM3),
        ("<minimax:tool_call>\n<invoke name=\"{{ name }}\">", Family::Minimax),
        ("<|open|>call tool=\"{{ name }}\"", Family::KimiK3),
        ("<|tool_calls_section_begin|><|tool_call_begin|>{{ id }}", Family::Kimi),
        ("<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"{{ name }}\">", Family::DeepseekV4_1),
        ("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"{{ name }}\">", Family::DeepseekV4),
        ("<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"{{ name }}\">", Family::DeepseekV3_2),
        ("<cofl:tool_calls><cofl:tool_call id=\"{{ i }}\"", Family::Cohere),
        ("<|tool_call>call:{{ name }}{{ args }}<tool_call|>", Family::Gemma4),
        ("<tool_call>{{ name }}<arg_key>{{ k }}</arg_key>", Family::Glm4_7),
        ("[TOOL_CALLS][{\"name\": \"{{ name }}\"", Family::Mistral),
        (
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ name }}\n```json\n",
            Family::DeepseekR1,
        ),
        ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{{ name }}<｜tool▁sep｜>", Family::DeepseekV3_1),
        ("<tool_call>\n<function={{ name }}>\n<parameter=", Family::Qwen3Coder),
        ("<think>\n</think><tool_call>\n<function={{ name }}>", Family::Qwen3_5),
        ("[|assistant|]<tool_call>{\"name\": \"{{ name }}\"", Family::Exaone),
        ("<think></think><tool_call>\n{\"name\": \"{{ name }}\"", Family::Qwen3),
        ("<tool_call>\n{\"name\": \"{{ name }}\", \"arguments\": ", Family::Hermes),
        (
            "<|start_header_id|>assistant<|end_header_id|>{\"name\": \"{{ name }}\", \"parameters\": ",
            Family::Llama,
        ),
    ];
    for (template, family) in cases {
        assert_eq!(Family::detect(template), Some(*family), "{template}");
    }
    assert_eq!(Family::detect("{% for m in messages %}{{ m.content }}{% endfor %}"), None);
}

#[test]
fn named_template_lists_and_bad_configs() {
    let list = r#"{"chat_template": [{"name": "default", "template": "{{ m }}"},
        {"name": "tool_use", "template": "<tool_call>\n{{ c }}</tool_call>"}]}"#;
    assert_eq!(Family::detect_from_tokenizer_config(list).unwrap(), Some(Family::Hermes));
    assert!(matches!(Family::detect_from_tokenizer_config("{"), Err(DetectError::Json(_))));
    assert!(matches!(
        Family::detect_from_tokenizer_config(r#"{"chat_template": 3}"#),
        Err(DetectError::Template("/chat_template"))
    ));
    assert!(matches!(
        Family::detect_from_tokenizer_config(r#"{"chat_template": [{"name": "default"}]}"#),
        Err(DetectError::Template(_))
    ));
    assert_eq!(Family::detect_from_tokenizer_config("{}").unwrap(), None);
}
