//! `type: number` / `integer`: exact bounds through digit automata.
//!
//! Integers: `minimum`/`maximum`/`exclusive*` become an exact range over canonical
//! decimal integers (no leading zeros, no `-0`), built per digit length by the classic
//! range-splitting construction ([`int_range`]). `multipleOf` is exact for `1/n` (no-op),
//! powers of ten (the range is built on the quotient and followed by zeros), and small
//! bounded ranges (enumerated, up to [`SchemaLimits::max_enumerated_multiples`]).
//!
//! Numbers: with bounds or `multipleOf: 10^-d`, numbers are generated without exponent
//! (`-?int(.frac)?`) and the bounds are exact over that form: the integer part is an
//! [`int_range`] and the fraction digits are compared digit by digit against the bound's
//! ([`frac_digits`]). Without them, any JSON number is allowed.
//!
//! [`SchemaLimits::max_enumerated_multiples`]: super::SchemaLimits::max_enumerated_multiples

use super::types::Builder;
use super::whitespace::{alt, lit, nothing, seq};
use super::NumberSyntax;
use super::SchemaError;
use crate::grammar::Expr;
use serde_json::{Map, Number, Value};

/// Magnitudes at or above this are treated as "no bound" (10^30).
const HUGE: u128 = 1_000_000_000_000_000_000_000_000_000_000;

fn digit_class(lo: u8, hi: u8) -> Expr {
    Expr::Class(vec![(lo as u32 + 48, hi as u32 + 48)])
}

fn digits(min: u32, max: Option<u32>) -> Expr {
    if max == Some(min) && min == 0 {
        return Expr::Empty;
    }
    Expr::Repeat { expr: Box::new(digit_class(0, 9)), min, max }
}

/// JSON numbers (ECMA-404) with at most `syntax.max_int_digits` integer digits and an
/// exponent of at most `syntax.max_exponent_digits` digits (none when 0).
pub(crate) fn any_number(syntax: NumberSyntax) -> Expr {
    let exponent = if syntax.max_exponent_digits == 0 {
        Expr::Empty
    } else {
        Expr::Repeat {
            expr: Box::new(seq(vec![
                Expr::Class(vec![(69, 69), (101, 101)]),
                Expr::Repeat { expr: Box::new(Expr::Class(vec![(43, 43), (45, 45)])), min: 0, max: Some(1) },
                digits(1, Some(syntax.max_exponent_digits)),
            ])),
            min: 0,
            max: Some(1),
        }
    };
    seq(vec![
        Expr::Repeat { expr: Box::new(lit("-")), min: 0, max: Some(1) },
        alt(vec![lit("0"), seq(vec![digit_class(1, 9), digits(0, Some(syntax.max_int_digits - 1))])]),
        Expr::Repeat { expr: Box::new(seq(vec![lit("."), digits(1, None)])), min: 0, max: Some(1) },
        exponent,
    ])
}

/// Largest decimal digits of an integer written with an exponent that
/// [`exponent_integers`] takes: every such value is inside the i64 range of a plain
/// `integer`, whatever its spelling.
pub(crate) const EXPONENT_INTEGER_DIGITS: u32 = 18;

/// Integers of at most [`EXPONENT_INTEGER_DIGITS`] digits written with an exponent of
/// magnitude at most 17 (`6e3`, `6.0E+3`, `1.5e1`, `600e-2`, `0e5`; not `0.1e18`), within
/// `syntax`'s digit limits: a mantissa whose fraction ends (before its trailing zeros) no
/// further right than the exponent reaches, or, for a negative exponent, an integer part
/// with that many trailing zeros. Regular because the exponent is bounded; the automaton remembers the
/// mantissa's integer digits and significant fraction digits (each at most 18) until
/// the exponent is read. `None` when `syntax` allows no exponent.
pub(crate) fn exponent_integers(syntax: NumberSyntax) -> Option<Expr> {
    /// Built per `(max_int_digits, max_exponent_digits)`.
    static BUILT: crate::memo::Memo<(u32, u32), Option<Expr>> = crate::memo::Memo::new();
    BUILT.get_or(&(syntax.max_int_digits, syntax.max_exponent_digits), || {
        let re = exponent_integers_regex(syntax)?;
        let limits = crate::regex::RegexLimits { max_size: 1_000_000, ..Default::default() };
        let e = crate::regex::regex_to_expr(&re, &limits);
        // Our own regex, within these limits for every digit syntax the options allow
        // (`json_exactness::integers_with_exponents_are_part_of_the_option`).
        debug_assert!(e.is_ok(), "{e:?}");
        e.ok()
    })
}

fn exponent_integers_regex(syntax: NumberSyntax) -> Option<String> {
    let max_exp = syntax.max_exponent_digits;
    if max_exp == 0 {
        return None;
    }
    let top = EXPONENT_INTEGER_DIGITS;
    // The exponent `e` written with up to `max_exp` digits (leading zeros allowed, as
    // JSON allows them), or nothing when `e` needs more digits than that.
    let written = |e: u32, sign: &str| -> Option<String> {
        let len = e.to_string().len() as u32;
        (len <= max_exp).then(|| format!("[eE]{sign}0{{0,{}}}{e}", max_exp - len))
    };
    let mut alts = vec![
        // Zero, with any exponent.
        format!("0(?:\\.0+)?[eE][+-]?[0-9]{{1,{max_exp}}}"),
        // `-0`, `-00`: an exponent of zero.
        format!("[1-9][0-9]{{0,{}}}(?:\\.0+)?[eE]-0{{1,{max_exp}}}", syntax.max_int_digits.min(top) - 1),
    ];
    for e in 0..top {
        let Some(exp) = written(e, "\\+?") else { break };
        // Integer digits `a` with `a + e <= top`; significant fraction digits at most `e`.
        let int_digits = (top - e).min(syntax.max_int_digits);
        let frac = if e == 0 {
            "(?:\\.0+)?".to_string()
        } else {
            format!("(?:\\.[0-9]{{0,{}}}[1-9]0*|\\.0+)?", e - 1)
        };
        alts.push(format!("[1-9][0-9]{{0,{}}}{frac}{exp}", int_digits - 1));
        if e > 0 {
            alts.push(format!("0\\.[0-9]{{0,{}}}[1-9]0*{exp}", e - 1));
        }
    }
    for m in 1..syntax.max_int_digits {
        let Some(exp) = written(m, "-") else { break };
        // `1 + j + m` integer digits, `m` of them the trailing zeros the exponent removes.
        let j = (syntax.max_int_digits - 1 - m).min(top - 1);
        alts.push(format!("[1-9][0-9]{{0,{j}}}0{{{m}}}(?:\\.0+)?{exp}"));
    }
    Some(format!("-?(?:{})", alts.join("|")))
}

/// Canonical integers with `a.len() == b.len()` digits between `a` and `b` inclusive.
fn same_len(a: &[u8], b: &[u8]) -> Expr {
    let n = a.len();
    if n == 0 {
        return Expr::Empty;
    }
    if n == 1 {
        return digit_class(a[0], b[0]);
    }
    if a[0] == b[0] {
        return seq(vec![digit_class(a[0], a[0]), same_len(&a[1..], &b[1..])]);
    }
    let nines = vec![9u8; n - 1];
    let zeros = vec![0u8; n - 1];
    let mut alts = Vec::new();
    let lo_full = a[1..].iter().all(|&d| d == 0);
    let hi_full = b[1..].iter().all(|&d| d == 9);
    let (mid_lo, mid_hi) = (if lo_full { a[0] } else { a[0] + 1 }, if hi_full { b[0] } else { b[0] - 1 });
    if !lo_full {
        alts.push(seq(vec![digit_class(a[0], a[0]), same_len(&a[1..], &nines)]));
    }
    if mid_lo <= mid_hi {
        alts.push(seq(vec![digit_class(mid_lo, mid_hi), digits(n as u32 - 1, Some(n as u32 - 1))]));
    }
    if !hi_full {
        alts.push(seq(vec![digit_class(b[0], b[0]), same_len(&zeros, &b[1..])]));
    }
    alt(alts)
}

fn digits_of(x: u128) -> Vec<u8> {
    x.to_string().bytes().map(|b| b - b'0').collect()
}

/// Canonical non-negative integers in `lo..=hi` (`hi == None`: unbounded).
pub(crate) fn int_range(lo: u128, hi: Option<u128>) -> Expr {
    let Some(hi) = hi else {
        let len = digits_of(lo).len() as u32;
        let top = 10u128.saturating_pow(len) - 1;
        return alt(vec![int_range(lo, Some(top)), seq(vec![digit_class(1, 9), digits(len, None)])]);
    };
    if lo > hi {
        return nothing();
    }
    let mut alts = Vec::new();
    let (la, lb) = (digits_of(lo).len() as u32, digits_of(hi).len() as u32);
    // Consecutive lengths taken whole (`[1-9][0-9]{k}` for k in a..=b) are written as one
    // counted repetition: the i64 range has 17 of them, and as separate alternatives they
    // were a ~900-state NFA for a ~60-state DFA.
    let mut whole: Option<(u32, u32)> = None;
    for len in la..=lb {
        let start = if len == la { lo } else { 10u128.pow(len - 1) };
        let end = if len == lb { hi } else { 10u128.pow(len) - 1 };
        if start == 10u128.pow(len - 1).max(1) && end == 10u128.pow(len) - 1 {
            whole = Some((whole.map_or(len, |w| w.0), len));
            continue;
        }
        if let Some((a, b)) = whole.take() {
            alts.push(seq(vec![digit_class(1, 9), digits(a - 1, Some(b - 1))]));
        }
        alts.push(same_len(&digits_of(start), &digits_of(end)));
    }
    if let Some((a, b)) = whole {
        alts.push(seq(vec![digit_class(1, 9), digits(a - 1, Some(b - 1))]));
    }
    alt(alts)
}

/// Canonical integers in `lo..=hi` (either side may be open).
pub(crate) fn signed_range(lo: Option<i128>, hi: Option<i128>) -> Expr {
    // Every plain `integer` is the i64 range: built once per process, since its 19-digit
    // bounds made it a tenth of a typical tool schema's conversion (a 20-tool tag built
    // it once per tool).
    if (lo, hi) == (Some(i64::MIN as i128), Some(i64::MAX as i128)) {
        static I64: std::sync::OnceLock<Expr> = std::sync::OnceLock::new();
        return I64.get_or_init(|| split_range(lo, hi)).clone();
    }
    split_range(lo, hi)
}

/// [`signed_range`], built.
fn split_range(lo: Option<i128>, hi: Option<i128>) -> Expr {
    if let (Some(a), Some(b)) = (lo, hi) {
        if a > b {
            return nothing();
        }
    }
    let mut alts = Vec::new();
    if hi.map_or(true, |h| h >= 0) {
        alts.push(int_range(lo.map_or(0, |l| l.max(0)) as u128, hi.map(|h| h as u128)));
    }
    if lo.map_or(true, |l| l < 0) {
        let mlo = hi.map_or(1, |h| (-h).max(1)) as u128;
        let mhi = lo.map(|l| (-l) as u128);
        alts.push(seq(vec![lit("-"), int_range(mlo, mhi)]));
    }
    alt(alts)
}

/// A decimal: sign, integer part, fraction digits without trailing zeros.
#[derive(Debug, Clone, PartialEq)]
struct Dec {
    neg: bool,
    int: u128,
    frac: Vec<u8>,
}

impl Dec {
    fn parse(n: &Number) -> Option<Dec> {
        if let Some(u) = n.as_u64() {
            return Some(Dec { neg: false, int: u as u128, frac: vec![] });
        }
        if let Some(i) = n.as_i64() {
            return Some(Dec { neg: i < 0, int: i.unsigned_abs() as u128, frac: vec![] });
        }
        let f = n.as_f64()?;
        if !f.is_finite() || f.abs() >= 1e30 {
            return None;
        }
        let s = format!("{}", f.abs());
        let (i, fr) = s.split_once('.').unwrap_or((&s, ""));
        let mut frac: Vec<u8> = fr.bytes().map(|b| b - b'0').collect();
        while frac.last() == Some(&0) {
            frac.pop();
        }
        Some(Dec { neg: f < 0.0, int: i.parse().ok()?, frac })
    }
    fn is_zero(&self) -> bool {
        self.int == 0 && self.frac.is_empty()
    }
    fn negated(&self) -> Dec {
        Dec { neg: !self.neg && !self.is_zero(), ..self.clone() }
    }
}

type Bound = (Dec, bool);

/// Fraction digit strings `r` (possibly empty) with `0.r` within the bounds, at most
/// `budget` digits. Returns (empty allowed, non-empty strings).
fn frac_digits(
    lo: Option<(&[u8], bool)>,
    hi: Option<(&[u8], bool)>,
    budget: Option<u32>,
) -> (bool, Option<Expr>) {
    let lo = lo.filter(|l| !l.0.is_empty() || l.1);
    let empty_ok = lo.is_none() && hi.map_or(true, |h| !h.0.is_empty() || !h.1);
    if budget == Some(0) {
        return (empty_ok, None);
    }
    let b1 = budget.map(|b| b - 1);
    match (lo, hi) {
        (None, None) => return (true, Some(digits(1, budget))),
        (Some(([], true)), None) => {
            // At least one non-zero digit.
            let e = match budget {
                None => seq(vec![digits(0, None), digit_class(1, 9), digits(0, None)]),
                Some(b) => alt((0..b)
                    .map(|k| {
                        seq(vec![
                            Expr::Repeat { expr: Box::new(lit("0")), min: k, max: Some(k) },
                            digit_class(1, 9),
                            digits(0, Some(b - k - 1)),
                        ])
                    })
                    .collect()),
            };
            return (false, Some(e));
        }
        (None, Some(([], false))) => {
            return (true, Some(Expr::Repeat { expr: Box::new(lit("0")), min: 1, max: budget }))
        }
        (_, Some(([], true))) => return (false, None),
        // Above `.0` and at most `.0`: nothing (and the digit loop below would recur
        // on these same bounds forever).
        (Some(([], true)), Some(([], false))) => return (false, None),
        _ => {}
    }
    let mut groups: Vec<(u8, u8, Expr)> = Vec::new();
    for d in 0..=9u8 {
        let nl = match lo {
            None => None,
            Some((l, s)) if l.is_empty() => {
                if d > 0 {
                    None
                } else {
                    Some((l, s))
                }
            }
            Some((l, s)) => match d.cmp(&l[0]) {
                std::cmp::Ordering::Greater => None,
                std::cmp::Ordering::Equal => Some((&l[1..], s)),
                std::cmp::Ordering::Less => continue,
            },
        };
        let nh = match hi {
            None => None,
            Some((h, s)) if h.is_empty() => {
                if d == 0 {
                    Some((h, s))
                } else {
                    continue;
                }
            }
            Some((h, s)) => match d.cmp(&h[0]) {
                std::cmp::Ordering::Less => None,
                std::cmp::Ordering::Equal => Some((&h[1..], s)),
                std::cmp::Ordering::Greater => continue,
            },
        };
        let (re, rn) = frac_digits(nl, nh, b1);
        let tail = match (re, rn) {
            (true, Some(e)) => Expr::Repeat { expr: Box::new(e), min: 0, max: Some(1) },
            (true, None) => Expr::Empty,
            (false, Some(e)) => e,
            (false, None) => continue,
        };
        match groups.last_mut() {
            Some(g) if g.1 + 1 == d && g.2 == tail => g.1 = d,
            _ => groups.push((d, d, tail)),
        }
    }
    let alts: Vec<Expr> = groups.into_iter().map(|(a, b, t)| seq(vec![digit_class(a, b), t])).collect();
    (empty_ok, if alts.is_empty() { None } else { Some(alt(alts)) })
}

fn frac_expr(lo: Option<(&[u8], bool)>, hi: Option<(&[u8], bool)>, budget: Option<u32>) -> Expr {
    let (e, n) = frac_digits(lo, hi, budget);
    let ne = n.map(|n| seq(vec![lit("."), n]));
    match (e, ne) {
        (true, Some(n)) => Expr::Repeat { expr: Box::new(n), min: 0, max: Some(1) },
        (true, None) => Expr::Empty,
        (false, Some(n)) => n,
        (false, None) => nothing(),
    }
}

/// Non-negative decimals (no exponent) in `[lower, upper]`.
fn nonneg_range(lower: Bound, upper: Option<Bound>, budget: Option<u32>, int_digits: u32) -> Expr {
    let (l, ls) = lower;
    let lf = Some((l.frac.as_slice(), ls));
    let any_frac = frac_expr(None, None, budget);
    match upper {
        None => alt(vec![
            seq(vec![lit(&l.int.to_string()), frac_expr(lf, None, budget)]),
            seq(vec![int_range(l.int + 1, Some(10u128.pow(int_digits) - 1)), any_frac]),
        ]),
        Some((h, hs)) => {
            let hf = Some((h.frac.as_slice(), hs));
            if l.int > h.int {
                return nothing();
            }
            if l.int == h.int {
                return seq(vec![lit(&l.int.to_string()), frac_expr(lf, hf, budget)]);
            }
            let mut alts = vec![seq(vec![lit(&l.int.to_string()), frac_expr(lf, None, budget)])];
            if l.int + 1 < h.int {
                alts.push(seq(vec![int_range(l.int + 1, Some(h.int - 1)), any_frac]));
            }
            alts.push(seq(vec![lit(&h.int.to_string()), frac_expr(None, hf, budget)]));
            alt(alts)
        }
    }
}

/// Decimals without exponent in `[lo, hi]` (signed; either side open).
fn real_range(lo: Option<Bound>, hi: Option<Bound>, budget: Option<u32>, int_digits: u32) -> Expr {
    let zero = Dec { neg: false, int: 0, frac: vec![] };
    let mut alts = Vec::new();
    // x >= 0 part.
    let hi_nonneg = hi.as_ref().map_or(true, |(h, s)| !(h.neg || h.is_zero() && *s));
    if hi_nonneg {
        let lower = match &lo {
            Some((l, s)) if !l.neg => (l.clone(), *s),
            _ => (zero.clone(), false),
        };
        alts.push(nonneg_range(lower, hi.clone().filter(|(h, _)| !h.neg), budget, int_digits));
    }
    // x < 0 part: x = -y, y > 0.
    if lo.as_ref().map_or(true, |(l, _)| l.neg) {
        let ylo = match &hi {
            Some((h, s)) if h.neg || h.is_zero() => (h.negated(), *s || h.is_zero()),
            _ => (zero.clone(), true),
        };
        let ylo = if ylo.0.is_zero() { (zero, true) } else { ylo };
        let yhi = lo.map(|(l, s)| (l.negated(), s));
        alts.push(seq(vec![lit("-"), nonneg_range(ylo, yhi, budget, int_digits)]));
    }
    alt(alts)
}

fn num(b: &Builder, m: &Map<String, Value>, key: &str, ptr: &str) -> Result<Option<Dec>, SchemaError> {
    match m.get(key) {
        None | Some(Value::Bool(_)) => Ok(None),
        Some(Value::Number(n)) => Ok(Dec::parse(n)),
        Some(_) => Err(b.not_schema(format!("`{key}` must be a number"), ptr)),
    }
}

fn cmp(a: &Dec, b: &Dec) -> std::cmp::Ordering {
    let key = |d: &Dec| -> (i8, u128, Vec<u8>) { (if d.neg { -1 } else { 1 }, d.int, d.frac.clone()) };
    let (sa, ia, fa) = key(a);
    let (sb, ib, fb) = key(b);
    if a.is_zero() && b.is_zero() {
        return std::cmp::Ordering::Equal;
    }
    if sa != sb {
        return sa.cmp(&sb);
    }
    let o = ia.cmp(&ib).then_with(|| fa.cmp(&fb));
    if sa < 0 {
        o.reverse()
    } else {
        o
    }
}

/// The tighter of two bounds; `upper` says which direction is tighter.
fn tighter(a: Option<Bound>, b: Option<Bound>, upper: bool) -> Option<Bound> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(x), Some(y)) => {
            let o = cmp(&x.0, &y.0);
            let pick_x = match o {
                std::cmp::Ordering::Equal => x.1,
                std::cmp::Ordering::Less => upper,
                std::cmp::Ordering::Greater => !upper,
            };
            Some(if pick_x { x } else { y })
        }
    }
}

fn to_int(d: &Dec, ceil: bool, strict: bool) -> i128 {
    let mut v = d.int as i128;
    let has_frac = !d.frac.is_empty();
    if d.neg {
        v = -v;
    }
    // ceil for lower bounds, floor for upper bounds
    if has_frac {
        if ceil && !d.neg {
            v += 1;
        } else if !ceil && d.neg {
            v -= 1;
        }
    } else if strict {
        v += if ceil { 1 } else { -1 };
    }
    v
}

pub(crate) fn build(
    b: &mut Builder,
    m: &Map<String, Value>,
    integer: bool,
    ptr: &str,
) -> Result<Expr, SchemaError> {
    let draft4_excl = |k: &str| m.get(k) == Some(&Value::Bool(true));
    let lo = tighter(
        num(b, m, "minimum", ptr)?.map(|d| (d, draft4_excl("exclusiveMinimum"))),
        num(b, m, "exclusiveMinimum", ptr)?.map(|d| (d, true)),
        false,
    );
    let hi = tighter(
        num(b, m, "maximum", ptr)?.map(|d| (d, draft4_excl("exclusiveMaximum"))),
        num(b, m, "exclusiveMaximum", ptr)?.map(|d| (d, true)),
        true,
    );
    let mult = match m.get("multipleOf") {
        None => None,
        Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f > 0.0) => Dec::parse(n),
        Some(_) => return Err(b.not_schema("`multipleOf` must be a positive number", ptr)),
    };
    let mut integer = integer;
    let mut budget = None;
    let mut int_mult: Option<u128> = None;
    if let Some(k) = &mult {
        let f = m.get("multipleOf").and_then(Value::as_f64).unwrap_or(1.0);
        let pow10_frac =
            k.int == 0 && k.frac.last() == Some(&1) && k.frac.iter().rev().skip(1).all(|&d| d == 0);
        if k.frac.is_empty() && k.int > 0 {
            integer = true;
            if k.int > 1 {
                int_mult = Some(k.int);
            }
        } else if pow10_frac {
            if !integer {
                budget = Some(k.frac.len() as u32);
            }
        } else if integer && (1.0 / f).fract() == 0.0 {
            // 1/n: every integer is a multiple.
        } else {
            b.unsupported(
                "multipleOf",
                "only integers, 1/n on integers and powers of ten are enforced",
                "ignored",
                ptr,
            )?;
        }
    }
    if integer {
        // Open sides default to the i64 range (see MAX_INT_DIGITS).
        let ilo = Some(
            lo.as_ref().filter(|(d, _)| d.int < HUGE).map_or(i64::MIN as i128, |(d, s)| to_int(d, true, *s)),
        );
        let ihi = Some(
            hi.as_ref().filter(|(d, _)| d.int < HUGE).map_or(i64::MAX as i128, |(d, s)| to_int(d, false, *s)),
        );
        let Some(k) = int_mult else {
            return b.int_range(ilo, ihi);
        };
        let pow10 = {
            let s = k.to_string();
            s.starts_with('1') && s[1..].bytes().all(|c| c == b'0')
        };
        if pow10 {
            let zeros = "0".repeat(k.to_string().len() - 1);
            let k = k as i128;
            let qlo = ilo.map(|l| l.div_euclid(k) + i128::from(l.rem_euclid(k) != 0));
            let qhi = ihi.map(|h| h.div_euclid(k));
            let mut alts = Vec::new();
            if qlo.map_or(true, |q| q <= 0) && qhi.map_or(true, |q| q >= 0) {
                alts.push(lit("0"));
            }
            let pos = if qhi.map_or(true, |q| q >= 1) {
                int_range(qlo.map_or(1, |q| q.max(1)) as u128, qhi.map(|q| q as u128))
            } else {
                nothing()
            };
            let neg = if qlo.map_or(true, |q| q <= -1) {
                int_range(qhi.map_or(1, |q| (-q).max(1)) as u128, qlo.map(|q| (-q) as u128))
            } else {
                nothing()
            };
            alts.push(seq(vec![pos, lit(&zeros)]));
            alts.push(seq(vec![lit("-"), neg, lit(&zeros)]));
            return Ok(alt(alts
                .into_iter()
                .filter(|e| !matches!(e, Expr::Seq(v) if v.iter().any(super::whitespace::is_nothing)))
                .collect()));
        }
        if let (Some(l), Some(h)) = (ilo, ihi) {
            let k = k as i128;
            let first = l.div_euclid(k) + i128::from(l.rem_euclid(k) != 0);
            let last = h.div_euclid(k);
            let count = (last - first + 1).max(0) as u64;
            if count <= b.opts.limits.max_enumerated_multiples {
                return Ok(alt((first..=last).map(|q| lit(&(q * k).to_string())).collect()));
            }
        }
        b.unsupported(
            "multipleOf",
            "integer multiples over an unbounded or large range",
            "multipleOf ignored",
            ptr,
        )?;
        return b.int_range(ilo, ihi);
    }
    if lo.is_none() && hi.is_none() && budget.is_none() {
        return b.any_number();
    }
    Ok(real_range(lo, hi, budget, b.opts.numbers.max_int_digits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::testing::matches;

    #[test]
    fn integer_ranges_are_exact() {
        for (lo, hi) in [
            (Some(-15i128), Some(123i128)),
            (Some(7), None),
            (None, Some(-3)),
            (Some(0), Some(0)),
            (Some(99), Some(1001)),
            (Some(-5), Some(100_000_000)),
            (Some(1), Some(99_999)),
            (Some(i64::MIN as i128), Some(i64::MAX as i128)),
        ] {
            let e = signed_range(lo, hi);
            let edges = (1..=19).map(|k| 10i128.pow(k)).flat_map(|p| [p - 1, p, p + 1, -p - 1, -p, -p + 1]);
            let bounds = [lo, hi].into_iter().flatten().flat_map(|b| [b - 1, b, b + 1]);
            for x in (-300i128..1200).chain(edges).chain(bounds) {
                let want = lo.map_or(true, |l| x >= l) && hi.map_or(true, |h| x <= h);
                assert_eq!(matches(&e, &x.to_string()), want, "{lo:?}..{hi:?} {x}");
            }
            assert!(!matches(&e, "-0") && !matches(&e, "01"));
        }
    }

    #[test]
    fn real_ranges_are_exact() {
        let d = |s: &str| Dec::parse(&serde_json::from_str::<Number>(s).unwrap()).unwrap();
        let cases = [
            ("-1.5", false, "2.25", true),
            ("0", true, "0.5", false),
            ("-0.25", false, "-0.125", false),
            ("1.05", false, "1.2", true),
        ];
        for (l, ls, h, hs) in cases {
            let e = real_range(Some((d(l), ls)), Some((d(h), hs)), None, 20);
            let (lf, hf): (f64, f64) = (l.parse().unwrap(), h.parse().unwrap());
            for i in -300..300 {
                for s in [format!("{}", i as f64 / 100.0), format!("{:.3}", i as f64 / 100.0 + 0.005)] {
                    let x: f64 = s.parse().unwrap();
                    let want = (if ls { x > lf } else { x >= lf }) && (if hs { x < hf } else { x <= hf });
                    if s.starts_with("-0") && x == 0.0 || s == "-0" {
                        continue;
                    }
                    assert_eq!(matches(&e, &s), want, "[{l},{h}] {s}");
                }
            }
        }
    }
}
