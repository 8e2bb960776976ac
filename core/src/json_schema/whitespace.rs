//! Separators and layout for the three [`Whitespace`] modes, and JSON literals written in
//! the same layout (for `enum` / `const`).
//!
//! | mode | object | members | key/value | empty |
//! |---|---|---|---|---|
//! | `Compact` | `{` … `}` | `, ` | `: ` | `{}` |
//! | `Any{max}` | `{` ws … ws `}` | ws `,` ws | ws `:` ws | `{` ws `}` |
//! | `Indent(n)` | `{\n` ind(l+1) … `\n` ind(l) `}` | `,\n` ind(l+1) | `: ` | `{}` |
//!
//! `ws` is `[ \t\n\r]{0,max}`; `ind(l)` is `l × n` spaces. In `Indent` mode the layout
//! depends on the nesting level, so the builder passes the level along.

use super::Whitespace;
use crate::grammar::Expr;
use serde_json::Value;

pub(crate) fn lit(s: &str) -> Expr {
    Expr::Literal(s.to_string())
}

pub(crate) fn seq(v: Vec<Expr>) -> Expr {
    let v: Vec<Expr> = v.into_iter().filter(|e| *e != Expr::Empty).collect();
    match v.len() {
        0 => Expr::Empty,
        1 => v.into_iter().next().unwrap_or(Expr::Empty),
        _ => Expr::Seq(v),
    }
}

pub(crate) fn alt(mut v: Vec<Expr>) -> Expr {
    v.retain(|e| !is_nothing(e));
    if v.len() == 1 {
        v.pop().unwrap_or(Expr::Empty)
    } else {
        Expr::Alt(v)
    }
}

/// The empty language.
pub(crate) fn nothing() -> Expr {
    Expr::Alt(Vec::new())
}

pub(crate) fn is_nothing(e: &Expr) -> bool {
    matches!(e, Expr::Alt(v) if v.is_empty()) || matches!(e, Expr::Class(v) if v.is_empty())
}

/// Layout helper for one [`Whitespace`] mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout(pub Whitespace);

impl Layout {
    fn ws(&self) -> Expr {
        match self.0 {
            Whitespace::Any { max } => Expr::Repeat {
                expr: Box::new(Expr::Class(vec![(9, 10), (13, 13), (32, 32)])),
                min: 0,
                max: (max != u32::MAX).then_some(max),
            },
            _ => Expr::Empty,
        }
    }

    fn indent(&self, level: u32) -> String {
        match self.0 {
            Whitespace::Indent(n) => " ".repeat((n * level) as usize),
            _ => String::new(),
        }
    }

    /// Opening bracket of a container at `level` (followed by the first item's indent).
    pub fn open(&self, c: char, level: u32) -> Expr {
        match self.0 {
            Whitespace::Compact => lit(&c.to_string()),
            Whitespace::Any { .. } => seq(vec![lit(&c.to_string()), self.ws()]),
            Whitespace::Indent(_) => lit(&format!("{c}\n{}", self.indent(level + 1))),
        }
    }

    /// Closing bracket of a non-empty container at `level`.
    pub fn close(&self, c: char, level: u32) -> Expr {
        match self.0 {
            Whitespace::Compact => lit(&c.to_string()),
            Whitespace::Any { .. } => seq(vec![self.ws(), lit(&c.to_string())]),
            Whitespace::Indent(_) => lit(&format!("\n{}{c}", self.indent(level))),
        }
    }

    /// An empty container.
    pub fn empty(&self, open: char, close: char) -> Expr {
        match self.0 {
            Whitespace::Any { .. } => seq(vec![lit(&open.to_string()), self.ws(), lit(&close.to_string())]),
            _ => lit(&format!("{open}{close}")),
        }
    }

    /// Separator between items of a container at `level`.
    pub fn comma(&self, level: u32) -> Expr {
        match self.0 {
            Whitespace::Compact => lit(", "),
            Whitespace::Any { .. } => seq(vec![self.ws(), lit(","), self.ws()]),
            Whitespace::Indent(_) => lit(&format!(",\n{}", self.indent(level + 1))),
        }
    }

    /// Separator between a key and its value.
    pub fn colon(&self) -> Expr {
        match self.0 {
            Whitespace::Any { .. } => seq(vec![self.ws(), lit(":"), self.ws()]),
            _ => lit(": "),
        }
    }

    /// Whitespace allowed around the root value.
    pub fn outer(&self) -> Expr {
        self.ws()
    }

    /// `value` written as JSON in this layout at `level`, as one literal; numbers that
    /// are integers also match their `.0` spelling unless `integer_only` (the schema's
    /// type is `integer`: Draft-04 validators reject `1.0` there, and integer values are
    /// written without a fraction everywhere else in this module).
    pub fn literal(&self, v: &Value, level: u32, integer_only: bool) -> Expr {
        match v {
            Value::Number(_) if integer_only && super::types::value_type(v) == super::types::INTEGER => {
                match v.as_f64() {
                    Some(f) if !(v.is_i64() || v.is_u64()) && f.abs() < 1e16 => lit(&format!("{}", f as i64)),
                    _ => lit(&v.to_string()),
                }
            }
            Value::Number(n) if n.is_i64() || n.is_u64() => {
                alt(vec![lit(&n.to_string()), lit(&format!("{n}.0"))])
            }
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 1e16 => {
                    alt(vec![lit(&format!("{}", f as i64)), lit(&format_float(f))])
                }
                _ => lit(&write_value(v, self.0, level)),
            },
            _ => lit(&write_value(v, self.0, level)),
        }
    }
}

/// Python `repr(float)`: shortest round-trip digits, exponent form outside `1e-4..1e16`.
pub(crate) fn format_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let e = format!("{f:e}"); // like "1.5e-7"
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    }
}

/// JSON string literal as `json.dumps(…, ensure_ascii=False)` writes it.
pub(crate) fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `value` serialized in layout `ws` at nesting `level`.
pub(crate) fn write_value(v: &Value, ws: Whitespace, level: u32) -> String {
    let mut out = String::new();
    write_into(v, ws, level, &mut out);
    out
}

fn write_into(v: &Value, ws: Whitespace, level: u32, out: &mut String) {
    let ind = |l: u32| match ws {
        Whitespace::Indent(n) => " ".repeat((n * l) as usize),
        _ => String::new(),
    };
    let (sep, open_nl) = match ws {
        Whitespace::Indent(_) => (",\n".to_string(), true),
        _ => (", ".to_string(), false),
    };
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                out.push_str(&n.to_string());
            } else {
                out.push_str(&format_float(n.as_f64().unwrap_or(0.0)));
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Object(m) if m.is_empty() => out.push_str("{}"),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(&sep);
                }
                if open_nl {
                    if i == 0 {
                        out.push('\n');
                    }
                    out.push_str(&ind(level + 1));
                }
                write_into(x, ws, level + 1, out);
            }
            if open_nl {
                out.push('\n');
                out.push_str(&ind(level));
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(&sep);
                }
                if open_nl {
                    if i == 0 {
                        out.push('\n');
                    }
                    out.push_str(&ind(level + 1));
                }
                write_string(k, out);
                out.push_str(": ");
                write_into(x, ws, level + 1, out);
            }
            if open_nl {
                out.push('\n');
                out.push_str(&ind(level));
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_like_output() {
        let v = serde_json::json!({"a": [1, 2.5, "x\n\u{1}"], "b": {}});
        assert_eq!(write_value(&v, Whitespace::Compact, 0), "{\"a\": [1, 2.5, \"x\\n\\u0001\"], \"b\": {}}");
        assert_eq!(
            write_value(&v, Whitespace::Indent(2), 0),
            "{\n  \"a\": [\n    1,\n    2.5,\n    \"x\\n\\u0001\"\n  ],\n  \"b\": {}\n}"
        );
        assert_eq!(format_float(1e100), "1e+100");
        assert_eq!(format_float(1.0), "1.0");
        assert_eq!(format_float(1e-7), "1e-07");
        assert_eq!(format_float(0.0001), "0.0001");
    }
}
