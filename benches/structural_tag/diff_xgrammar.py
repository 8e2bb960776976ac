#!/usr/bin/env python3
"""Differential check of structural tags: grammask (the `grammask masks` CLI, Llama-3.1
tokenizer) against XGrammar 0.2.8 (`_is_grammar_accept_string`) on hand-picked texts for
every supported format type. Prints each disagreement and a count; the expected
disagreements are `any_order: true` (grammask requires the required members and
rejects repeated ones: see the structural_tag module docs).

    GRAMMASK=target/release/grammask TOKENIZER=../shared/data/tokenizers/llama3_1 \
        python3 benches/structural_tag/diff_xgrammar.py
"""
import json, subprocess, itertools, sys, tempfile, os
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string
GM = os.environ.get('GRAMMASK', 'target/release/grammask')
TOK = os.environ.get('TOKENIZER', '../shared/data/tokenizers/llama3_1')
def gm_accepts(tag, text):
    with tempfile.NamedTemporaryFile('w', suffix='.json', delete=False) as f:
        f.write(tag); p = f.name
    out = subprocess.run([GM, 'masks', '--tokenizer', TOK, '--structural-tag', p, '--text', text], capture_output=True, text=True)
    os.unlink(p)
    if out.returncode != 0: return 'ERR ' + out.stderr.strip()[:200]
    last = json.loads(out.stdout.strip().splitlines()[-1])
    return last['accepted'] and last['can_terminate']
def xg_accepts(tag, text):
    try:
        g = xgr.Grammar.from_structural_tag(tag)
    except Exception as e:
        return 'ERR ' + str(e)[:200]
    return _is_grammar_accept_string(g, text)
C = lambda v: {"type": "const_string", "value": v}
D = {"type": "regex", "pattern": "[0-9]+"}
J = {"type": "json_schema", "json_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}}
cases = []
def add(fmt, texts): cases.append((json.dumps({"type": "structural_tag", "format": fmt}), texts))
tt_texts = ["", "hi", "<f=a>1</f>", "x <f=a>12</f> y <f=bb>3</f>", "<f=a>1</f><f=bb>2</f>", "x <f=c>1</f>", "x <f=a>1</f", "x <f", "x <f=", "<f=a>1</f> tail", "a<<f=a>1</f>", "<f<f=a>1</f>", "<f=a>1</f>x<f=a>2</f>"]
for alo, saf in itertools.product([False, True], [False, True]):
    add({"type": "triggered_tags", "triggers": ["<f="], "at_least_one": alo, "stop_after_first": saf,
         "tags": [{"begin": "<f=a>", "content": D, "end": "</f>"}, {"begin": "<f=bb>", "content": D, "end": "</f>"}]}, tt_texts)
add({"type": "triggered_tags", "triggers": ["aa"], "tags": [{"begin": "aab", "content": C("X"), "end": "."}]},
    ["", "a", "aabX.", "aaabX.", "x aabX. a", "aa", "aaa", "abaabX."])
add({"type": "triggered_tags", "triggers": ["<t"], "excludes": ["zz"], "tags": [{"begin": "<t1>", "content": C("zz"), "end": "</t>"}]},
    ["", "z z", "zz", "<t1>zz</t>", "<t1>zz</t>zz", "<tx"])
add({"type": "tag", "begin": "<a>", "content": {"type": "any_text", "excludes": ["zz"]}, "end": ["</a>", "</b>"]},
    ["<a></a>", "<a>x</b>", "<a><a> </a", "<a>x</a></a>", "<a>x</b>y</a>", "<a>zz</a>", "<a>z z</a>", "<a>x", "<a></a</a>"])
add({"type": "tag", "begin": "<a>", "content": {"type": "triggered_tags", "triggers": ["<t"], "tags": [{"begin": "<t1>", "content": C("X"), "end": "</t>"}]}, "end": "</a>"},
    ["<a></a>", "<a>hi <t1>X</t> ho</a>", "<a><t1>X</t></a>", "<a>x</a>y</a>", "<a><tx</a>", "<a></t</a>"])
add({"type": "tag", "begin": "<a>", "content": {"type": "sequence", "elements": [{"type": "any_text"}, C("q")]}, "end": "</a>"},
    ["<a>q</a>", "<a>xxq</a>", "<a>x</a>q</a>", "<a>qq</a>"])
add({"type": "sequence", "elements": [{"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
     {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [{"begin": "<tool_call>", "content": J, "end": "</tool_call>"}]}]},
    ["<think>hm</think>", "<think>a</think>b<tool_call>{\"a\": 1}</tool_call>", "<think>a</think><tool_call>{ \"a\" : 1 , \"b\":\"x\" }</tool_call>",
     "<think>a</think><tool_call>{\"b\": \"x\", \"a\": 1}</tool_call>", "<think>a</think><tool_call>\n{\"a\": 1}\n</tool_call>",
     "<think>a</think><tool_call>{\"a\": 1, \"c\": 2}</tool_call>", "<think></think></think>"])
for loop in [True, False]:
    add({"type": "dispatch", "loop": loop, "excludes": ["no"], "rules": [["<x", C(">1")], ["<y", {"type": "regex", "pattern": "[0-9]"}]]},
        ["", "text <x>1 more", "text <x>1", "<x>1<y5", "<x>2", "a no", "<x", "<", "n o"])
for alo, saf in itertools.product([False, True], [False, True]):
    add({"type": "tags_with_separator", "separator": ",", "at_least_one": alo, "stop_after_first": saf,
         "tags": [{"begin": "<a>", "content": C("1"), "end": "</a>"}, {"begin": "<b>", "content": C("2"), "end": "</b>"}]},
        ["", "<a>1</a>", "<a>1</a>,<b>2</b>", "<a>1</a>,", "x<a>1</a>", "<a>1</a><b>2</b>"])
add({"type": "sequence", "elements": [C("a"), {"type": "or", "elements": [C("b"), C("c")]}, {"type": "optional", "content": C("d")},
     {"type": "star", "content": C("e")}, {"type": "plus", "content": C("f")}, {"type": "repeat", "min": 1, "max": 2, "content": C("g")}]},
    ["abfg", "acdeeffgg", "abfggg", "abg", "adfg"])
add({"type": "any_text", "excludes": ["ab", "ba"]}, ["", "aa", "ab", "xbay", "a b", "bba"])
add(J, ["{\"a\": 1}", "{\"a\":1,\"b\":\"x\"}", " {\"a\": 1}", "{\"a\": 1} ", "{\"b\": \"x\"}", "{\n\"a\"\n:\n1\n}"])
add({"type": "json_schema", "json_schema": J["json_schema"], "any_order": True}, ["{\"b\": \"x\", \"a\": 1}", "{\"a\": 1, \"a\": 2}", "{\"b\": \"x\"}"])
add({"type": "grammar", "grammar": "root ::= \"(\" root \")\" | x\nx ::= [0-9]+"}, ["7", "((42))", "((4)", "()"])
agree = dis = 0
for tag, texts in cases:
    for t in texts:
        g, x = gm_accepts(tag, t), xg_accepts(tag, t)
        if g == x: agree += 1
        else:
            dis += 1; print("DIFF grammask", g, "xgrammar", x, "|", repr(t), "|", tag[:220])
print("agree", agree, "differ", dis)
