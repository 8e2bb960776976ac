//! Printing the IR back as EBNF that [`super::parse_ebnf`] reads to the same IR — except
//! [`MemberSet`](super::MemberSet)s, which EBNF cannot say: a member-set rule prints its
//! body (which over-approximates) and the set as a comment.

use super::{Expr, Grammar};
use std::fmt::{self, Write};

impl fmt::Display for Grammar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The root rule comes first, then the others in definition order.
        let order = std::iter::once(self.root.index())
            .chain((0..self.rules.len()).filter(|&i| i != self.root.index()));
        for i in order {
            let rule = &self.rules[i];
            write!(f, "{} ::= ", rule.name)?;
            write_expr(f, self, &rule.body, Prec::Alt)?;
            if let Some(set) = &rule.members {
                write_member_set(f, self, set)?;
            }
            f.write_char('\n')?;
        }
        Ok(())
    }
}

/// ` # each member at most once, any order; required: a, b; 1..=3 members`.
fn write_member_set(f: &mut fmt::Formatter<'_>, g: &Grammar, set: &super::MemberSet) -> fmt::Result {
    let name = |r: super::RuleId| g.rules.get(r.index()).map_or("?", |r| r.name.as_str());
    f.write_str("  # each member at most once, any order")?;
    let required: Vec<&str> = set.members.iter().filter(|m| m.1).map(|m| name(m.0)).collect();
    if !required.is_empty() {
        write!(f, "; required: {}", required.join(", "))?;
    }
    match (set.min, set.max) {
        (0, None) => Ok(()),
        (lo, None) => write!(f, "; at least {lo} members"),
        (lo, Some(hi)) => write!(f, "; {lo}..={hi} members"),
    }
}

/// Largest expression a character automaton prints as, in [`Expr::size`] nodes.
const PRINT_DFA_MAX_SIZE: usize = 400_000;

/// Binding strength of the context an expression is printed in.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Prec {
    Alt,
    And,
    Seq,
    Postfix,
}

fn write_expr(f: &mut fmt::Formatter<'_>, g: &Grammar, e: &Expr, ctx: Prec) -> fmt::Result {
    match e {
        Expr::Empty => f.write_str("\"\""),
        Expr::Literal(s) => write_literal(f, s),
        Expr::Class(ranges) => write_class(f, ranges),
        Expr::Rule(r) => f.write_str(&g.rule(*r).name),
        Expr::Seq(v) if v.is_empty() => f.write_str("\"\""),
        Expr::Alt(v) if v.is_empty() => f.write_str("[]"),
        Expr::Seq(v) => paren(f, ctx > Prec::Seq, |f| write_list(f, g, v, " ", Prec::Postfix)),
        Expr::Alt(v) => paren(f, ctx > Prec::Alt, |f| write_list(f, g, v, " | ", Prec::And)),
        Expr::And(v) => paren(f, ctx > Prec::And, |f| write_list(f, g, v, " & ", Prec::Seq)),
        // Printed as the equivalent expression (a structural tag's free text is a few
        // kilobytes of EBNF). One whose expression would pass the size limit (patterns
        // that overlap in many ways, a pattern's spelling under a length bound) prints
        // as the empty set with a comment saying so: the printed grammar is then for
        // reading only.
        Expr::Dfa(d) => match d.to_expr(PRINT_DFA_MAX_SIZE) {
            Some(e) => write_expr(f, g, &e, ctx),
            // Said in a comment, which the EBNF reader skips to the line's end.
            None => writeln!(f, "[] # a character automaton of {} states, too large to print", d.len()),
        },
        Expr::Repeat { expr, min, max } => {
            // A postfix operator applied to a postfix expression needs parentheses:
            // `a**` is not EBNF.
            let inner = if matches!(**expr, Expr::Repeat { .. }) { Prec::Alt } else { Prec::Postfix };
            paren(f, inner == Prec::Alt, |f| write_expr(f, g, expr, Prec::Postfix))?;
            match (min, max) {
                (0, None) => f.write_char('*'),
                (1, None) => f.write_char('+'),
                (0, Some(1)) => f.write_char('?'),
                (m, None) => write!(f, "{{{m},}}"),
                (m, Some(n)) if m == n => write!(f, "{{{m}}}"),
                (m, Some(n)) => write!(f, "{{{m},{n}}}"),
            }
        }
    }
}

/// `v` joined by `sep`, each item printed in context `item`.
fn write_list(f: &mut fmt::Formatter<'_>, g: &Grammar, v: &[Expr], sep: &str, item: Prec) -> fmt::Result {
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write_expr(f, g, x, item)?;
    }
    Ok(())
}

fn paren(
    f: &mut fmt::Formatter<'_>,
    wrap: bool,
    body: impl FnOnce(&mut fmt::Formatter<'_>) -> fmt::Result,
) -> fmt::Result {
    if wrap {
        f.write_char('(')?;
    }
    body(f)?;
    if wrap {
        f.write_char(')')?;
    }
    Ok(())
}

fn write_literal(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            _ => write_char_escaped(f, c)?,
        }
    }
    f.write_char('"')
}

fn write_class(f: &mut fmt::Formatter<'_>, ranges: &[(u32, u32)]) -> fmt::Result {
    f.write_char('[')?;
    for &(lo, hi) in ranges {
        write_class_char(f, lo)?;
        if hi > lo {
            f.write_char('-')?;
            write_class_char(f, hi)?;
        }
    }
    f.write_char(']')
}

fn write_class_char(f: &mut fmt::Formatter<'_>, cp: u32) -> fmt::Result {
    match char::from_u32(cp) {
        Some(c @ (']' | '[' | '-' | '^')) => write!(f, "\\{c}"),
        Some(c) => write_char_escaped(f, c),
        None => write!(f, "\\U{cp:08x}"),
    }
}

fn write_char_escaped(f: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c {
        '\\' => f.write_str("\\\\"),
        '\n' => f.write_str("\\n"),
        '\r' => f.write_str("\\r"),
        '\t' => f.write_str("\\t"),
        c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(f, "\\x{:02x}", c as u32),
        c if c.is_control() || (c as u32) >= 0x80 && !c.is_alphanumeric() => {
            if (c as u32) <= 0xffff {
                write!(f, "\\u{:04x}", c as u32)
            } else {
                write!(f, "\\U{:08x}", c as u32)
            }
        }
        c => f.write_char(c),
    }
}
