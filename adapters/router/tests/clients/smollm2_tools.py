"""OpenAI's own client asks SmolLM2 (served by grammask-router) for tool calls with every
`tool_choice`, streamed and not, and prints what came back as one JSON line per request;
the Rust test (`tests/smollm2.rs`) validates the arguments against the tools' schemas with
the `jsonschema` crate.

    python smollm2_tools.py http://127.0.0.1:PORT
"""
import json
import sys

import openai

BASE = sys.argv[1]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 30}},
        "required": ["timezone"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "The time in a timezone",
                                           "parameters": TIME}}]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]

client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=300)
choices = ["auto", "required", "none", {"type": "function", "function": {"name": "get_time"}}]
for k, choice in enumerate(choices):
    r = client.chat.completions.create(model="smollm2", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                       max_tokens=120, temperature=0.7, seed=k)
    m = r.choices[0].message
    calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in (m.tool_calls or [])]
    print(json.dumps({"tool_choice": choice, "stream": False, "finish_reason": r.choices[0].finish_reason,
                      "content": m.content, "calls": calls}), flush=True)
    # The same request streamed: the deltas put together.
    parts, names, content, finish = {}, {}, "", None
    for chunk in client.chat.completions.create(model="smollm2", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                                max_tokens=120, temperature=0.7, seed=k, stream=True):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            content += c.delta.content or ""
            for t in c.delta.tool_calls or []:
                if t.function and t.function.name:
                    names[t.index] = t.function.name
                parts[t.index] = parts.get(t.index, "") + ((t.function and t.function.arguments) or "")
    calls = [{"name": names.get(i), "arguments": parts[i]} for i in sorted(parts)]
    print(json.dumps({"tool_choice": choice, "stream": True, "finish_reason": finish, "content": content,
                      "calls": calls}), flush=True)
