#!/usr/bin/env python3
"""Writes core/tests/data/structural_tag_xml_styles.json: XGrammar 0.2.8's verdicts on
texts for `json_schema` formats in the XML argument styles, for the differential test in
core/tests/integration/structural_tag_xml.rs.

For each style and schema the script writes valid argument texts with its own writer
for the style (random values, whitespace variants) and near misses (a wrong or missing
key, a bad value, a repeated argument, whitespace inside markers, the closing marker
inside a string value, a cut-off text), wraps each in a tag as the XGrammar presets do,
and records whether XGrammar accepts the whole text (`_is_grammar_accept_string`). The
verdicts are XGrammar's, not the writer's: a "near miss" XGrammar accepts is recorded as
accepted.

A text in an `any_order` case that repeats an argument or leaves out a required one gets a
`note`: grammask rejects those on purpose (see the structural_tag::xml module docs).

    /work/xgvenv/bin/python benches/structural_tag/xml_styles_fixture.py
"""
import importlib.metadata, json, os, random
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

OUT = os.path.join(os.path.dirname(__file__), "../../core/tests/data/structural_tag_xml_styles.json")
rng = random.Random(20260501)

# style -> (begin, end) of the tool-call tag, as the presets write them.
TAGS = {
    "qwen_xml": ("<function=f>\n", "\n</function>"),
    "minimax_xml": ('<invoke name="f">\n', "</invoke>\n"),
    "deepseek_xml": ('<\uff5cDSML\uff5cinvoke name="f">\n', "</\uff5cDSML\uff5cinvoke>\n"),
    "deepseek_v4_1_xml": ('<\uff5cDSML\uff5c invoke name="f">\n', "</\uff5cDSML\uff5c invoke>\n"),
    "glm_xml": ("<tool_call>f", "</tool_call>"),
    "kimi_k3_xml": ('<|open|>call tool="f"<|sep|>', "<|close|>call<|sep|>"),
    "minimax_m3_xml": (']<]minimax[>[<invoke name="f">', "]<]minimax[>[</invoke>\n"),
}
NS = "]<]minimax[>["
CLOSE = {
    "qwen_xml": "</parameter>",
    "minimax_xml": "</parameter>",
    "deepseek_xml": "</\uff5cDSML\uff5cparameter>",
    "deepseek_v4_1_xml": "</\uff5cDSML\uff5c parameter>",
    "glm_xml": "</arg_value>",
    "kimi_k3_xml": "<|close|>argument<|sep|>",
    "minimax_m3_xml": NS,
}


def m3_body(value, pad, sep):
    """MiniMax-M3: objects and arrays as nested elements, scalars bare (`pad` around them)."""
    if isinstance(value, dict):
        if not value:
            return ""
        return sep + sep.join(f"{NS}<{k}>{m3_body(v, pad, sep)}{NS}</{k}>" for k, v in value.items()) + sep
    if isinstance(value, list):
        if not value:
            return ""
        return sep + sep.join(f"{NS}<item>{m3_body(v, pad, sep)}{NS}</item>" for v in value) + sep
    return value if isinstance(value, str) else pad + json.dumps(value) + pad


def kimi_type(v):
    if isinstance(v, str):
        return "string"
    if isinstance(v, bool):
        return "boolean"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return "number"
    return "array" if isinstance(v, list) else "object"


def arg(style, key, value, pad="", ktype=None):
    """One argument: strings raw, everything else JSON (`pad` around JSON values)."""
    raw = isinstance(value, str)
    body = value if raw else pad + json.dumps(value) + pad
    close = CLOSE[style]
    if style == "minimax_m3_xml":
        return f"{NS}<{key}>{m3_body(value, pad, chr(10))}{NS}</{key}>"
    if style == "qwen_xml":
        return f"<parameter={key}>{body}{close}"
    if style == "minimax_xml":
        return f'<parameter name="{key}">{body}{close}'
    if style in ("deepseek_xml", "deepseek_v4_1_xml"):
        sp = " " if style == "deepseek_v4_1_xml" else ""
        flag = "true" if raw else "false"
        return f'<\uff5cDSML\uff5c{sp}parameter name="{key}" string="{flag}">{body}{close}'
    if style == "glm_xml":
        return f"<arg_key>{key}</arg_key>{pad}<arg_value>{body}{close}"
    if style == "kimi_k3_xml":
        t = ktype or kimi_type(value)
        return f'<|open|>argument key="{key}" type="{t}"<|sep|>{body}{close}'
    raise ValueError(style)


def content(style, args, sep="\n", lead="", trail="", pad="", ktypes=None):
    ktypes = ktypes or {}
    return lead + sep.join(arg(style, k, v, pad, ktypes.get(k)) for k, v in args) + trail


ALPHA = "abcXYZ 09_-<>/\"'&;:\n\t\u00e9\u4e2d{}[]"


def rand_text(n=None):
    n = rng.randint(0, 8) if n is None else n
    return "".join(rng.choice(ALPHA) for _ in range(n))


# name -> (schema, extra format fields, [valid argument lists], [near-miss argument lists])
# Argument lists are [(key, value)] in writing order; string values are written raw.
def cases():
    out = []
    s1 = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
    v1 = [[("name", rand_text()), ("age", rng.randint(-50, 5000))] for _ in range(4)]
    v1 += [[("name", ""), ("age", 0)], [("name", " Bob <b> & 'x' "), ("age", 7)]]
    bad1 = [[("name", "Bob")], [("age", 3), ("name", "Bob")], [("name", "Bob"), ("age", "x3")],
            [("name", "Bob"), ("age", 1.5)], [("Name", "Bob"), ("age", 3)], [("name", "Bob"), ("age", 3), ("age", 4)],
            [("name", "a</parameter>b"), ("age", 1)], [("name", "a</arg_value>b"), ("age", 1)],
            [("name", "a<|close|>argument<|sep|>b"), ("age", 1)], [("name", "x</\uff5cDSML\uff5cparameter>"), ("age", 2)],
            [("name", "x</\uff5cDSML\uff5c parameter>"), ("age", 2)], [("name", "Bob"), ("age", 3), ("extra", 1)]]
    out.append(("required_string_int", s1, {}, v1, bad1))

    s2 = {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit", "b<"]},
        "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]+$"},
        "day": {"type": "string", "format": "date"}}, "required": ["unit"]}
    v2 = [[("unit", "celsius")], [("unit", "b<"), ("code", "AB12")], [("unit", "fahrenheit"), ("day", "2024-02-29")],
          [("unit", "celsius"), ("code", "ZZ0"), ("day", "1999-12-31")]]
    bad2 = [[("unit", "kelvin")], [("unit", "celsius"), ("code", "ab12")], [("unit", "celsius"), ("day", "2024-13-01")],
            [("code", "AB1")], [("unit", "celsius "), ("code", "AB1")], [("unit", "\"celsius\"")],
            [("day", "2024-01-01"), ("unit", "celsius")]]
    out.append(("string_enum_pattern_format", s2, {}, v2, bad2))

    s3 = {"type": "object", "properties": {"x": {"type": "number"}, "ok": {"type": "boolean"},
                                           "nothing": {"type": "null"}, "n": {"type": "integer", "minimum": 0}}}
    v3 = [[], [("x", 1.5)], [("x", -0.25e3), ("ok", True)], [("ok", False), ("nothing", None)],
          [("x", 3), ("ok", True), ("nothing", None), ("n", 12)], [("n", 0)]]
    bad3 = [[("x", "abc")], [("ok", "yes")], [("nothing", "nil")], [("ok", True), ("x", 1)], [("n", -1)], [("y", 1)]]
    out.append(("optional_scalars", s3, {}, v3, bad3))

    s4 = {"type": "object", "properties": {
        "loc": {"type": "object", "properties": {"lat": {"type": "number"}, "tag": {"type": "string"}}, "required": ["lat"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}},
        "required": ["loc"]}
    v4 = [[("loc", {"lat": 1.5})], [("loc", {"lat": -2, "tag": "a</parameter>"}), ("tags", ["x", "y<z", ""])],
          [("loc", {"lat": 0, "tag": "\n"}), ("tags", []), ("matrix", [[1, 2], []])]]
    bad4 = [[("loc", {"tag": "x"})], [("loc", {"lat": 1}), ("tags", "x")], [("loc", {"lat": 1}), ("tags", [1])],
            [("loc", {"lat": 1, "z": 2})], [("loc", "lat")]]
    out.append(("nested_json", s4, {}, v4, bad4))

    s5 = {"type": "object", "properties": {"maybe": {"type": ["string", "null"]},
                                           "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
          "required": ["maybe", "either"]}
    v5 = [[("maybe", None), ("either", 3)], [("maybe", "hi"), ("either", "there")], [("maybe", "null"), ("either", "4x")],
          [("maybe", ""), ("either", -7)]]
    bad5 = [[("maybe", None)], [("either", 1), ("maybe", None)], [("maybe", "x</parameter>y"), ("either", 1)]]
    out.append(("nullable_and_anyof", s5, {}, v5, bad5))

    s6 = {"type": "object", "properties": {"any": {}}, "required": ["any"]}
    v6 = [[("any", "text")], [("any", 12)], [("any", {"k": [1, "</parameter>"]})], [("any", ["a", None])], [("any", True)]]
    bad6 = [[], [("any", "a</parameter>b")], [("other", 1)]]
    out.append(("unconstrained_value", s6, {}, v6, bad6))

    v_free = [[], [("a", "x")], [("a", 1), ("b_2", {"k": 1}), ("_c", "text\nmore")], [("a", [1]), ("a", "again")]]
    bad_free = [[("1a", "x")], [("a-b", "x")], [("a", "x</parameter>")]]
    out.append(("true_schema", True, {}, v_free, bad_free))
    out.append(("empty_schema", {}, {}, v_free, bad_free))
    out.append(("object_without_properties", {"type": "object"}, {}, v_free, bad_free))

    s9 = {"type": "object", "properties": {}}
    out.append(("empty_properties", s9, {}, [[]], [[("a", "x")]]))

    s10 = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"],
           "additionalProperties": {"type": "integer"}}
    v10 = [[("id", "x")], [("id", "x"), ("n", 1), ("m_2", -3)], [("id", "x"), ("id", 2)]]
    bad10 = [[("n", 1), ("id", "x")], [("id", "x"), ("n", "one")], [("id", "x"), ("9", 1)], [("n", 1)]]
    out.append(("additional_properties_schema", s10, {}, v10, bad10))

    s11 = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
           "additionalProperties": False}
    v11 = [[], [("a", "x")], [("b", 2)], [("a", "x"), ("b", 2)]]
    bad11 = [[("b", 2), ("a", "x")], [("c", 1)], [("a", "x"), ("a", "y")]]
    out.append(("all_optional_closed", s11, {}, v11, bad11))

    s12 = {"anyOf": [{"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                     {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}]}
    v12 = [[("q", "hello")], [("id", 5)]]
    bad12 = [[("q", "hello"), ("id", 5)], [], [("id", "5x")]]
    out.append(("top_level_anyof", s12, {}, v12, bad12))

    s13 = {"$ref": "#/$defs/args", "$defs": {
        "args": {"type": "object", "properties": {"p": {"$ref": "#/$defs/point"}, "s": {"$ref": "#/$defs/str"}},
                 "required": ["p"]},
        "point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        "str": {"type": "string"}}}
    v13 = [[("p", {"x": 1})], [("p", {"x": -1}), ("s", "text")], [("p", {"x": 2}), ("s", "")]]
    bad13 = [[("s", "t")], [("p", {"y": 1})], [("p", {"x": 1}), ("s", 3)]]
    out.append(("refs", s13, {}, v13, bad13))

    s14 = {"type": "object", "properties": {"kind": {"const": "search"}, "q": {"type": "string", "minLength": 2, "maxLength": 4}},
           "required": ["kind", "q"]}
    v14 = [[("kind", "search"), ("q", "ab")], [("kind", "search"), ("q", "a</b")], [("kind", "search"), ("q", "    ")]]
    bad14 = [[("kind", "find"), ("q", "ab")], [("kind", "search"), ("q", "a")], [("kind", "search"), ("q", "abcde")]]
    out.append(("const_and_lengths", s14, {}, v14, bad14))

    s15 = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
           "required": ["a", "b"]}
    v15 = [[("a", "x"), ("b", 1)], [("b", 1), ("a", "x")], [("c", True), ("b", 2), ("a", "y")]]
    bad15 = [[("a", "x")], [("a", "x"), ("b", 1), ("a", "z")], [("b", 1), ("b", 2), ("a", "q")], [("d", 1)]]
    out.append(("any_order", s15, {"any_order": True}, v15, bad15))

    s16 = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]}
    v16 = [[("a", "  x  ")], [("a", "x"), ("b", 1)]]
    out.append(("max_whitespace_2", s16, {"max_whitespace_cnt": 2}, v16, [[("b", 1)]]))
    return out


def note_for(case_name, fields, args, schema):
    """Why grammask rejects an `any_order` text on purpose, if it does."""
    if not fields.get("any_order"):
        return None
    keys = [k for k, _ in args]
    if len(keys) != len(set(keys)):
        return "any_order: repeated argument"
    if any(r not in keys for r in schema.get("required", [])):
        return "any_order: required argument missing"
    return None


def texts_for(style, name, schema, fields, valid, bad):
    """(text, note) pairs: each argument list in several layouts, plus marker near misses."""
    out = []
    ws_layouts = [("\n", "", "", ""), ("", "", "", ""), (" \n\t", "\n", "\n", " "), ("\n\n", "  ", "\t", "\n ")]
    for args in valid + bad:
        note = note_for(name, fields, args, schema if isinstance(schema, dict) else {})
        for sep, lead, trail, pad in rng.sample(ws_layouts, 2):
            out.append((content(style, args, sep, lead, trail, pad), note))
    for args in valid[:2]:
        if not args:
            continue
        text = content(style, args)
        # Marker near misses: whitespace inside markers, a lost closing marker, cut-offs,
        # arguments glued to text, kimi's type attribute.
        out.append((text.replace("parameter", "parameter ", 1), None))
        out.append((text.replace("<", "< ", 1), None))
        out.append((text.replace('="', '= "', 1), None))
        out.append((text.replace("</arg_key><arg_value>", "</arg_key>\n<arg_value>", 1), None))
        out.append((text[: len(text) - 1], None))
        out.append((text[: len(text) // 2], None))
        out.append(("x" + text, None))
        out.append((text + "x", None))
        out.append((text.replace(CLOSE[style], "", 1), None))
        out.append((text.replace(CLOSE[style], " " + CLOSE[style], 1), None))
        out.append((text.replace('string="true"', 'string="false"', 1), None))
        out.append((text.replace('string="false"', 'string="true"', 1), None))
        out.append((text.replace('type="string"', 'type="integer"', 1), None))
        out.append((text.replace('type="number"', 'type="str"', 1), None))
        out.append((text.replace('type="number"', 'type="boolean"', 1), None))
        out.append((text.replace(NS + "</", NS + "</x", 1), None))
        out.append((text.replace(NS, "", 1), None))
        out.append((text.replace(NS + "<", NS + "<\n", 1), None))
    seen, uniq = set(), []
    for t, n in out:
        if t not in seen:
            seen.add(t)
            uniq.append((t, n))
    return uniq


def main():
    records = []
    for style, (begin, end) in TAGS.items():
        for name, schema, fields, valid, bad in cases():
            fmt = {"type": "json_schema", "json_schema": schema, "style": style, **fields}
            tag = {"type": "structural_tag", "format": {"type": "tag", "begin": begin, "content": fmt, "end": end}}
            tag_text = json.dumps(tag, ensure_ascii=False)
            try:
                g = xgr.Grammar.from_structural_tag(tag_text)
            except Exception as e:  # XGrammar refuses the schema in this style
                msg = str(e).strip().splitlines()[-1]
                records.append({"style": style, "name": name, "tag": tag_text, "xgrammar_error": msg[:300], "texts": []})
                continue
            texts = []
            for body, note in texts_for(style, name, schema, fields, valid, bad):
                full = begin + body + end
                rec = {"text": full, "xgrammar": bool(_is_grammar_accept_string(g, full))}
                if note:
                    rec["note"] = note
                texts.append(rec)
            records.append({"style": style, "name": name, "tag": tag_text, "texts": texts})
    # The deprecated format, once.
    s = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}
    tag = {"type": "structural_tag", "format": {"type": "tag", "begin": "<function=f>\n",
                                                "content": {"type": "qwen_xml_parameter", "json_schema": s}, "end": "\n</function>"}}
    tag_text = json.dumps(tag)
    g = xgr.Grammar.from_structural_tag(tag_text)
    texts = []
    for body in ["<parameter=name>Bob</parameter><parameter=age>100</parameter>",
                 "<parameter=name>\"Bob&lt;\"</parameter>\n<parameter=age> 100 </parameter>",
                 "<parameter=age>100</parameter><parameter=name>Bob</parameter>", "<parameter=name>Bob</parameter>"]:
        full = "<function=f>\n" + body + "\n</function>"
        texts.append({"text": full, "xgrammar": bool(_is_grammar_accept_string(g, full))})
    records.append({"style": "qwen_xml_parameter", "name": "deprecated_format", "tag": tag_text, "texts": texts})
    with open(OUT, "w") as f:
        json.dump({"xgrammar_version": importlib.metadata.version("xgrammar"), "cases": records}, f, ensure_ascii=False, indent=1)
    n = sum(len(r["texts"]) for r in records)
    acc = sum(t["xgrammar"] for r in records for t in r["texts"])
    print(f"{len(records)} cases, {n} texts, {acc} accepted by XGrammar")


if __name__ == "__main__":
    main()
