"""Writes core/tests/data/xgrammar_presets.json: XGrammar 0.2.8's model presets
(`get_model_structural_tag`) for every family over a grid of tool lists, tool choices,
reasoning modes, parallel_tool_calls and the JSON-schema options, so that
core/tests/integration/tool_presets.rs can check that grammask's presets write the same structural
tags (and fail where XGrammar fails).

Run with the venv that has xgrammar 0.2.8:

    /work/xgvenv/bin/python benches/structural_tag/xgrammar_presets.py

Output layout (kept small by sharing): `tools` names each tool list once, `outputs` holds
each distinct structural tag once, and every case refers to both by key / index:

    {"xgrammar": "0.2.8",
     "tools": {"one": [...], ...},
     "outputs": [<structural tag JSON>, ...],
     "cases": [{"family", "tools", "tool_choice", "reasoning", "parallel_tool_calls",
                "any_order", "exclude_special_tokens", "max_whitespace_cnt",
                "output": <index>} | {..., "error": {"type": "ValueError", "message": ...}}]}
"""

import importlib.metadata
import json
import pathlib


from xgrammar import builtin_structural_tag as bst

# Gemma 4's builder is defined but commented out of XGrammar's registry (its string
# format is not supported by XGrammar yet); register it here so its output is pinned too.
bst._structural_tag_registry.setdefault("gemma_4", bst._get_gemma_4_structural_tag)

FAMILIES = [
    "llama",
    "kimi",
    "kimi_k3",
    "deepseek_r1",
    "deepseek_v3_1",
    "qwen_3_coder",
    "qwen_3_5",
    "mimo",
    "qwen_3",
    "harmony",
    "deepseek_v3_2",
    "minimax",
    "minimax_m3",
    "glm_4_7",
    "deepseek_v4",
    "deepseek_v4_1",
    "cohere",
    "exaone",
    "gemma_4",
]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
}
BROWSER = {
    "type": "web_search_preview",
    "name": "browser.search",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
}
PYTHON = {"type": "code_interpreter"}

TOOLS = {
    "none": [],
    "one": [WEATHER],
    "three": [WEATHER, TIME, SEARCH],
    "builtin": [WEATHER, BROWSER],
    "builtin_only": [PYTHON],
}

NAMED_WEATHER = {"type": "function", "function": {"name": "get_weather"}}
CHOICES = {
    "auto": "auto",
    "required": "required",
    "none": "none",
    "named": NAMED_WEATHER,
    "allowed_auto": {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [NAMED_WEATHER]},
    },
    "allowed_required": {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "required",
            "tools": [
                {"type": "function", "function": {"name": "get_time"}},
                {"type": "function", "function": {"name": "search"}},
            ],
        },
    },
}
# Choices that only make sense with builtin tools.
BUILTIN_CHOICES = {
    "builtin": {"type": "web_search_preview"},
    "builtin_python": {"type": "code_interpreter"},
    "allowed_builtin": {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "web_search_preview"}]},
    },
}
# Choices that fail in normalize_tool_choice.
ERROR_CHOICES = {
    "named_missing": {"type": "function", "function": {"name": "nope"}},
    "allowed_missing": {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "nope"}}]},
    },
    "allowed_function_without_name": {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function"}]},
    },
    "builtin_missing": {"type": "file_search"},
    "bad_string": "sometimes",
}

REASONING = ["enabled", "disabled", "auto"]


def run(family, tools_key, choice, reasoning, parallel, any_order=False, exclude=True, max_ws=None):
    case = {
        "family": family,
        "tools": tools_key,
        "tool_choice": choice,
        "reasoning": reasoning,
        "parallel_tool_calls": parallel,
        "any_order": any_order,
        "exclude_special_tokens": exclude,
        "max_whitespace_cnt": max_ws,
    }
    try:
        tag = bst.get_model_structural_tag(
            family,
            tools=TOOLS[tools_key],
            tool_choice=choice,
            reasoning=reasoning,
            any_order=any_order,
            exclude_special_tokens=exclude,
            max_whitespace_cnt=max_ws,
            parallel_tool_calls=parallel,
        )
    except (ValueError, AssertionError) as e:  # pydantic's ValidationError is a ValueError
        case["error"] = {"type": type(e).__name__, "message": str(e)}
        return case, None
    return case, tag.model_dump(mode="json")


def main():
    cases = []
    outputs = []
    index = {}

    def add(case, output):
        if output is not None:
            key = json.dumps(output, sort_keys=True)
            if key not in index:
                index[key] = len(outputs)
                outputs.append(output)
            case["output"] = index[key]
        cases.append(case)

    for family in FAMILIES:
        # The full grid over ordinary function tools.
        for tools_key in ["none", "one", "three"]:
            for choice_key, choice in CHOICES.items():
                if tools_key != "three" and choice_key == "allowed_required":
                    continue
                for reasoning in REASONING:
                    for parallel in [True, False]:
                        add(*run(family, tools_key, choice, reasoning, parallel))
        # Builtin tools (used by Harmony, refused by MiMo / MiniMax M3, ignored elsewhere).
        for tools_key in ["builtin", "builtin_only"]:
            for choice_key, choice in {**CHOICES, **BUILTIN_CHOICES}.items():
                if choice_key == "allowed_required":
                    continue
                for reasoning in ["enabled", "disabled"]:
                    for parallel in [True, False]:
                        add(*run(family, tools_key, choice, reasoning, parallel))
        # The JSON-schema and free-text options.
        for choice in ["auto", "required", NAMED_WEATHER]:
            for reasoning in ["enabled", "auto"]:
                add(*run(family, "three", choice, reasoning, True, any_order=True))
                add(*run(family, "three", choice, reasoning, True, exclude=False))
                add(*run(family, "three", choice, reasoning, False, max_ws=2))
                add(*run(family, "one", choice, reasoning, True, True, False, 0))
        # Bad tool choices.
        for choice in ERROR_CHOICES.values():
            add(*run(family, "three", choice, "enabled", True))
    # An unknown family.
    add(*run("gpt_5", "one", "auto", "enabled", True))

    out = {
        "xgrammar": importlib.metadata.version("xgrammar"),
        "tools": TOOLS,
        "outputs": outputs,
        "cases": cases,
    }
    path = pathlib.Path(__file__).resolve().parents[2] / "core/tests/data/xgrammar_presets.json"
    # One output / case per line: small diffs when XGrammar changes.
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"xgrammar": %s,\n"tools": %s,\n"outputs": [\n' % (
            json.dumps(out["xgrammar"]), json.dumps(TOOLS, ensure_ascii=False)))
        f.write(",\n".join(json.dumps(o, ensure_ascii=False) for o in outputs))
        f.write('\n],\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"{path}: {len(cases)} cases ({errors} errors), {len(outputs)} distinct outputs")


if __name__ == "__main__":
    main()
