//! `/regex/` terminals → grammar IR, in Rust's `regex` syntax (llguidance's dialect).
//!
//! llguidance reads `/…/` with the `regex` crate's syntax, not ECMA-262 (which
//! [`crate::regex`] implements for JSON Schema) nor Python's `re`: `\d`, `\w` and `\s`
//! are Unicode classes, `.` is any character but `\n`, and flags come as `(?i)`,
//! `(?s:…)` and so on. So the pattern is parsed by `regex-syntax` itself, and its
//! high-level IR (case folding and Unicode classes already resolved) is lowered here
//! node for node. A regex matches whole lexemes, so it is anchored on both sides.
//!
//! Anchors: as in llguidance, `^` where nothing can have been matched yet and `$` where
//! nothing more can follow (`^a$`, `(^a|b)`) match the empty string — a lexeme is
//! matched whole anyway; an anchor anywhere else (`a^b`) and word boundaries (`\b`) are
//! errors. Lazy quantifiers parse, and match the same strings as greedy ones.

use super::error::LarkErrorKind;
use crate::grammar::Expr;
use regex_syntax::hir::{Class, Hir, HirKind};

/// The pattern (flags already applied as a `(?flags)` prefix) as an expression.
pub(crate) fn regex_expr(pattern: &str, max_depth: u32) -> Result<Expr, LarkErrorKind> {
    let bad = |message: String| LarkErrorKind::BadRegex { pattern: pattern.to_string(), message };
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(max_depth)
        .build()
        .parse(pattern)
        .map_err(|e| bad(one_line(&e.to_string())))?;
    lower(&hir, true, true).map_err(bad)
}

/// `regex-syntax` errors draw the pattern over several lines; keep the message.
fn one_line(msg: &str) -> String {
    msg.lines().rev().find(|l| l.starts_with("error:")).map_or_else(|| msg.to_string(), |l| l.to_string())
}

/// `first`: nothing can have been matched before `h`; `last`: nothing can follow it.
fn lower(h: &Hir, first: bool, last: bool) -> Result<Expr, String> {
    use regex_syntax::hir::Look;
    Ok(match h.kind() {
        HirKind::Empty => Expr::Empty,
        HirKind::Literal(lit) => Expr::Literal(
            String::from_utf8(lit.0.to_vec()).map_err(|_| "a literal that is not UTF-8".to_string())?,
        ),
        HirKind::Class(Class::Unicode(c)) => {
            Expr::Class(c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect())
        }
        HirKind::Class(Class::Bytes(c)) => {
            // In UTF-8 mode `regex-syntax` only builds byte classes within ASCII.
            if c.ranges().iter().any(|r| r.end() >= 0x80) {
                return Err("a byte class outside ASCII (grammask matches UTF-8 text)".into());
            }
            Expr::Class(c.ranges().iter().map(|r| (u32::from(r.start()), u32::from(r.end()))).collect())
        }
        HirKind::Look(Look::Start | Look::StartLF | Look::StartCRLF) if first => Expr::Empty,
        HirKind::Look(Look::End | Look::EndLF | Look::EndCRLF) if last => Expr::Empty,
        HirKind::Look(l) => {
            return Err(format!(
                "the assertion {l:?} (only `^` at the start and `$` at the end of a lexeme can be expressed)"
            ))
        }
        // A repeated body can follow and be followed by itself.
        HirKind::Repetition(r) => {
            let once = r.max == Some(1);
            Expr::Repeat {
                expr: Box::new(lower(&r.sub, first && once, last && once)?),
                min: r.min,
                max: r.max,
            }
        }
        HirKind::Capture(c) => lower(&c.sub, first, last)?,
        HirKind::Concat(v) => {
            let is_look = |h: &Hir| matches!(h.kind(), HirKind::Look(_));
            let mut out = Vec::with_capacity(v.len());
            for (i, h) in v.iter().enumerate() {
                let f = first && v[..i].iter().all(is_look);
                let l = last && v[i + 1..].iter().all(is_look);
                out.push(lower(h, f, l)?);
            }
            Expr::Seq(out)
        }
        HirKind::Alternation(v) => {
            Expr::Alt(v.iter().map(|h| lower(h, first, last)).collect::<Result<_, _>>()?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_syntax_and_flags() {
        assert_eq!(
            regex_expr("ab|cd", 64).unwrap(),
            Expr::Alt(vec![Expr::Literal("ab".into()), Expr::Literal("cd".into())])
        );
        // Case folding is resolved into classes.
        assert!(matches!(regex_expr("(?i)k", 64).unwrap(), Expr::Class(r) if r.contains(&(0x212A, 0x212A))));
        assert!(regex_expr("^a$", 64).is_ok());
        assert!(regex_expr("(^a|b$)", 64).is_ok());
        assert!(matches!(regex_expr("a^b", 64), Err(LarkErrorKind::BadRegex { .. })));
        assert!(matches!(regex_expr(r"\ba", 64), Err(LarkErrorKind::BadRegex { .. })));
        assert!(matches!(regex_expr("(a", 64), Err(LarkErrorKind::BadRegex { .. })));
    }
}
