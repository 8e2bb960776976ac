"""The official clients, unchanged, against a running grammask-router.

    python contract.py BASE_URL

Drives Hugging Face's `text_generation` (TGI's client) and OpenAI's `openai` client the way
their users do, and checks what comes back field by field: plain and constrained
generations, streams, details, usage, tool calls, and the refusals of what the server does
not support (a 422 the client raises, naming the field). Run by `official_clients_work_unchanged`
in `adapters/router/tests/http.rs` against the simulated model (random logits: only the
grammar keeps structured answers valid; Hermes-style tool calls), with the pinned clients of
`adapters/router/scripts/client-venv.sh`. Exits non-zero on the first failure.
"""

import json
import sys

import openai
import text_generation
from text_generation.types import Grammar, GrammarType

BASE = sys.argv[1]
FLAGS = {
    "type": "object",
    "properties": {"on": {"type": "boolean"}, "level": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["on", "level"],
    "additionalProperties": False,
}
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    checks += 1


def flags_ok(text, what):
    value = json.loads(text)
    check(set(value) == {"on", "level"}, f"{what}: keys of {text!r}")
    check(isinstance(value["on"], bool) and value["level"] in range(10), f"{what}: values of {text!r}")


def refused(call, field, what):
    try:
        call()
    except Exception as e:  # each client raises its own 422 type
        check(field in str(e), f"{what}: the refusal names `{field}`: {e}")
        return
    check(False, f"{what}: `{field}` was not refused")


# --- TGI's client -----------------------------------------------------------------------
tgi = text_generation.Client(BASE, timeout=60)
r = tgi.generate("Hello", max_new_tokens=6, seed=1)
check(isinstance(r.generated_text, str), "tgi generate: text")
check(r.details.generated_tokens == len(r.details.tokens) <= 6, "tgi generate: details.tokens")
check(r.details.finish_reason.value in ("length", "eos_token", "stop_sequence"), "tgi generate: finish_reason")
check(r.details.seed == 1, "tgi generate: seed")
again = tgi.generate("Hello", max_new_tokens=6, seed=1)
check(again.generated_text == r.generated_text, "tgi generate: the same seed, the same text")

r = tgi.generate("Flags:", max_new_tokens=40, seed=2,
                 grammar=Grammar(type=GrammarType.Json, value=FLAGS))
if r.details.finish_reason.value == "eos_token":
    flags_ok(r.generated_text, "tgi generate with a grammar")
check(r.generated_text.startswith("{"), "tgi generate with a grammar: JSON")

r = tgi.generate("Code:", max_new_tokens=8, seed=3, grammar=Grammar(type=GrammarType.Regex, value="[0-9]{3}-[a-z]{2}"))
check(len(r.generated_text) <= 6 and r.generated_text[:3].isdigit(), f"tgi regex: {r.generated_text!r}")

tokens = list(tgi.generate_stream("Hello", max_new_tokens=5, seed=1))
check(len(tokens) == 5 and tokens[-1].generated_text is not None, "tgi generate_stream: the last carries the text")
check("".join(t.token.text for t in tokens) == tokens[-1].generated_text, "tgi generate_stream: tokens make the text")

r = tgi.generate("Hello", max_new_tokens=8, seed=4, stop_sequences=["e"])
if r.details.finish_reason.value == "stop_sequence":
    check("e" in r.generated_text, "tgi stop_sequences: kept in the text")

r = tgi.generate("Hello", max_new_tokens=5, seed=11, top_n_tokens=3)
top = r.details.top_tokens
check(top is not None and len(top) == len(r.details.tokens), "tgi top_n_tokens: a list per token")
check(all(1 <= len(t) <= 3 and all(a.logprob >= b.logprob for a, b in zip(t, t[1:])) for t in top),
      "tgi top_n_tokens: up to 3, most likely first")
check(all(x.logprob <= 0 for t in top for x in t), "tgi top_n_tokens: log-probabilities")
same = tgi.generate("Hello", max_new_tokens=5, seed=11)
check(same.generated_text == r.generated_text, "tgi top_n_tokens: the same tokens as without")
streamed = list(tgi.generate_stream("Hello", max_new_tokens=5, seed=11, top_n_tokens=3))
check([[x.id for x in s.top_tokens] for s in streamed] == [[x.id for x in t] for t in top],
      "tgi top_n_tokens: streamed as not streamed")
refused(lambda: tgi.generate("Hello", max_new_tokens=2, top_n_tokens=6), "top_n_tokens", "tgi top_n_tokens over 5")
r = tgi.generate("Hello there world", max_new_tokens=2, seed=5, decoder_input_details=True)
pre = r.details.prefill
check(len(pre) >= 3 and "".join(t.text for t in pre) == "Hello there world",
      f"tgi decoder_input_details: the prompt's tokens {[t.text for t in pre]}")
check(pre[0].logprob is None and all(t.logprob is not None and t.logprob <= 0 for t in pre[1:]),
      "tgi decoder_input_details: log-probabilities, none for the first")
check(r.generated_text == tgi.generate("Hello there world", max_new_tokens=2, seed=5).generated_text,
      "tgi decoder_input_details: the same tokens as without")
r = tgi.generate("Hello", max_new_tokens=4, do_sample=True, best_of=2)
seqs = r.details.best_of_sequences
check(seqs is not None and len(seqs) == 1, "tgi best_of: the other candidate")
check(sum(t.logprob for t in r.details.tokens) >= sum(t.logprob for t in seqs[0].tokens),
      "tgi best_of: the answer is the likelier candidate")
r = tgi.generate("Hello", max_new_tokens=4, seed=14, typical_p=0.5)
check(r.details.generated_tokens == len(r.details.tokens) <= 4, "tgi typical_p: sampled")
again = tgi.generate("Hello", max_new_tokens=4, seed=14, typical_p=0.5)
check(again.generated_text == r.generated_text, "tgi typical_p: the same seed, the same text")

# --- OpenAI's client ----------------------------------------------------------------------
oai = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)
r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=6, seed=5)
check(isinstance(r.choices[0].message.content, str), "openai chat: content")
check(r.choices[0].finish_reason in ("length", "stop"), "openai chat: finish_reason")
check(r.usage.completion_tokens <= 6 and r.usage.prompt_tokens > 0, "openai chat: usage")

r = oai.chat.completions.create(
    model="m", messages=[{"role": "user", "content": "Flags?"}], max_tokens=60, seed=6,
    response_format={"type": "json_schema", "json_schema": {"name": "flags", "schema": FLAGS}})
if r.choices[0].finish_reason == "stop":
    flags_ok(r.choices[0].message.content, "openai chat json_schema")

chunks = list(oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                          seed=7, stream=True, stream_options={"include_usage": True}))
check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5, "openai chat stream: usage last")
check(any(c.choices and c.choices[0].finish_reason for c in chunks), "openai chat stream: a finish_reason")

tool = {"type": "function", "function": {"name": "set_flags", "parameters": FLAGS}}
r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Flags?"}], max_tokens=200, seed=8,
                                tools=[tool], tool_choice={"type": "function", "function": {"name": "set_flags"}})
calls = r.choices[0].message.tool_calls or []
check(len(calls) >= 1 and calls[0].function.name == "set_flags", f"openai tools: a call: {r}")
if r.choices[0].finish_reason == "tool_calls":
    flags_ok(calls[0].function.arguments, "openai tools: arguments")

r = oai.completions.create(model="m", prompt="Hello", max_tokens=4, seed=9)
check(isinstance(r.choices[0].text, str) and r.usage.completion_tokens <= 4, "openai completions")
chunks = list(oai.completions.create(model="m", prompt="Hello", max_tokens=4, seed=9, stream=True,
                                     stream_options={"include_usage": True}))
check("".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text,
      "openai completions stream: the same text as not streamed")
check(chunks[-1].usage is not None, "openai completions stream: usage")

r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5, seed=12,
                                temperature=0, logprobs=True, top_logprobs=2)
content = r.choices[0].logprobs.content
check(len(content) == r.usage.completion_tokens or r.choices[0].finish_reason == "stop",
      "openai chat logprobs: one entry per token")
check(all(c.top_logprobs and c.top_logprobs[0].token == c.token and c.top_logprobs[0].logprob == c.logprob
          for c in content), "openai chat logprobs: greedy picks the most likely")
check("".join(bytes(c.bytes).decode("utf-8", "replace") for c in content) == r.choices[0].message.content,
      "openai chat logprobs: the bytes make the content")
chunks = list(oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                          seed=12, temperature=0, logprobs=True, top_logprobs=2, stream=True))
streamed = [c for ch in chunks if ch.choices and ch.choices[0].logprobs for c in ch.choices[0].logprobs.content]
check([c.token for c in streamed] == [c.token for c in content], "openai chat logprobs: streamed as not streamed")
refused(lambda: oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                            top_logprobs=2), "top_logprobs", "openai top_logprobs without logprobs")
r = oai.completions.create(model="m", prompt="Hello", max_tokens=4, seed=13, logprobs=2)
lp = r.choices[0].logprobs
check(len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
      and (len(lp.tokens) == r.usage.completion_tokens or r.choices[0].finish_reason == "stop"),
      "openai completions logprobs: one entry per token")
check("".join(lp.tokens) == r.choices[0].text, "openai completions logprobs: the tokens make the text")
check(all(1 <= len(t) <= 2 for t in lp.top_logprobs), "openai completions logprobs: up to 2 alternatives")
refused(lambda: oai.completions.create(model="m", prompt="hi", max_tokens=2, logprobs=6), "logprobs",
        "openai completions logprobs over 5")
r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4, n=3, seed=15)
check([c.index for c in r.choices] == [0, 1, 2], "openai chat n: three choices in order")
one = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4, seed=16)
check(one.choices[0].message.content == r.choices[1].message.content, "openai chat n: choice k is the seed + k")
chunks = list(oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4, n=3,
                                          seed=15, stream=True))
texts = ["", "", ""]
for ch in chunks:
    for c in ch.choices:
        texts[c.index] += c.delta.content or ""
check(texts == [c.message.content for c in r.choices], "openai chat n: streamed as not streamed")
r = oai.completions.create(model="m", prompt=["Hello", "Bye"], max_tokens=3, n=2, seed=17, echo=True)
check(len(r.choices) == 4 and r.choices[3].text.startswith("Bye"), "openai completions: prompts × n, echoed")
r = oai.completions.create(model="m", prompt="Hello", max_tokens=3, seed=18, best_of=3)
check(len(r.choices) == 1, "openai completions best_of: one choice of three")
ids = oai.completions.create(model="m", prompt=[9707], max_tokens=3, seed=17)
check(isinstance(ids.choices[0].text, str), "openai completions: a prompt of token ids")
refused(lambda: oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2, n=17),
        "`n`", "openai n over 16")
r = oai.completions.create(model="m", prompt="hi", max_tokens=3, temperature=0, logit_bias={"15": 100})
check(r.choices[0].text == "000", f"openai logit_bias: +100 on Qwen3's token 15, '0': {r.choices[0].text!r}")
r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                presence_penalty=1.0, frequency_penalty=0.5, seed=10)
check(r.usage.completion_tokens <= 3, "openai penalties")
refused(lambda: oai.completions.create(model="m", prompt="hi", max_tokens=2, n=2, best_of=1), "best_of",
        "openai best_of under n")
r = oai.completions.create(model="m", prompt="hi there", max_tokens=2, echo=True, logprobs=2, temperature=0)
lp = r.choices[0].logprobs
k = len(lp.tokens) - len(oai.completions.create(model="m", prompt="hi there", max_tokens=2, logprobs=2,
                                                temperature=0).choices[0].logprobs.tokens)
check(r.choices[0].text.startswith("hi there") and "".join(lp.tokens[:k]) == "hi there",
      f"openai echo with logprobs: the prompt's tokens first {lp.tokens}")
check(lp.token_logprobs[0] is None and lp.top_logprobs[0] is None and all(x <= 0 for x in lp.token_logprobs[1:k]),
      "openai echo with logprobs: the prompt's log-probabilities, none for the first")
check(lp.text_offset[0] == 0 and lp.text_offset[k] == len("hi there"), "openai echo with logprobs: text offsets")
check(all(len(t) <= 2 for t in lp.top_logprobs[1:]), "openai echo with logprobs: top tokens")
refused(lambda: list(oai.completions.create(model="m", prompt="hi", max_tokens=2, echo=True, logprobs=1,
                                            stream=True)), "echo", "openai echo with logprobs, streamed")

print(f"ok: {checks} checks")
