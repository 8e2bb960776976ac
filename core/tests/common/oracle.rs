//! An independent brute-force recognizer used as the oracle for token masks.
//!
//! It shares nothing with grammask's automata or matcher: the grammar IR is expanded into
//! plain byte-level BNF productions and recognized with a textbook Earley parser over dotted
//! productions (with the Aycock–Horspool nullable fix). A byte string is a viable prefix
//! when the Earley set after it is non-empty; productions that use unproductive
//! nonterminals are dropped first, so that is exact.

use grammask::grammar::{Expr, Grammar};
use regex_syntax::utf8::Utf8Sequences;
use std::collections::HashSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Sym {
    Byte(u8, u8),
    Nt(usize),
}

pub struct Bnf {
    /// Productions: (lhs, rhs).
    prods: Vec<(usize, Vec<Sym>)>,
    by_lhs: Vec<Vec<usize>>,
    nullable: Vec<bool>,
    start: usize,
}

impl Bnf {
    pub fn new(g: &Grammar) -> Bnf {
        let mut b = Builder { prods: Vec::new(), n: g.rules.len() };
        for (i, r) in g.rules.iter().enumerate() {
            let rhs = b.expr_seq(&r.body);
            b.prods.push((i, rhs));
        }
        let n = b.n;
        let mut prods = b.prods;
        // Drop productions with unproductive symbols.
        let mut productive = vec![false; n];
        loop {
            let mut ch = false;
            for (l, rhs) in &prods {
                if !productive[*l]
                    && rhs.iter().all(|s| match s {
                        Sym::Byte(..) => true,
                        Sym::Nt(x) => productive[*x],
                    })
                {
                    productive[*l] = true;
                    ch = true;
                }
            }
            if !ch {
                break;
            }
        }
        prods.retain(|(_, rhs)| {
            rhs.iter().all(|s| match s {
                Sym::Byte(..) => true,
                Sym::Nt(x) => productive[*x],
            })
        });
        let mut by_lhs = vec![Vec::new(); n];
        for (i, (l, _)) in prods.iter().enumerate() {
            by_lhs[*l].push(i);
        }
        let mut nullable = vec![false; n];
        loop {
            let mut ch = false;
            for (l, rhs) in &prods {
                if !nullable[*l] && rhs.iter().all(|s| matches!(s, Sym::Nt(x) if nullable[*x])) {
                    nullable[*l] = true;
                    ch = true;
                }
            }
            if !ch {
                break;
            }
        }
        Bnf { prods, by_lhs, nullable, start: g.root.index() }
    }
}

struct Builder {
    prods: Vec<(usize, Vec<Sym>)>,
    n: usize,
}

impl Builder {
    fn fresh(&mut self) -> usize {
        self.n += 1;
        self.n - 1
    }
    /// A nonterminal for `e`.
    fn nt(&mut self, e: &Expr) -> Sym {
        if let Expr::Rule(r) = e {
            return Sym::Nt(r.index());
        }
        let x = self.fresh();
        match e {
            Expr::And(_) => panic!("the oracle takes no intersections: write the language out"),
            Expr::Alt(v) => {
                for a in v {
                    let rhs = self.expr_seq(a);
                    self.prods.push((x, rhs));
                }
            }
            Expr::Repeat { expr, min, max } => {
                let item = self.nt(expr);
                let mut rhs = vec![item; *min as usize];
                match max {
                    None => {
                        let tail = self.fresh();
                        self.prods.push((tail, vec![]));
                        self.prods.push((tail, vec![item, Sym::Nt(tail)]));
                        rhs.push(Sym::Nt(tail));
                    }
                    Some(m) => {
                        // opt_k ::= "" | item opt_{k-1}
                        let mut next: Option<usize> = None;
                        for _ in *min..*m {
                            let o = self.fresh();
                            self.prods.push((o, vec![]));
                            let mut r = vec![item];
                            if let Some(n) = next {
                                r.push(Sym::Nt(n));
                            }
                            self.prods.push((o, r));
                            next = Some(o);
                        }
                        if let Some(n) = next {
                            rhs.push(Sym::Nt(n));
                        }
                    }
                }
                self.prods.push((x, rhs));
            }
            other => {
                let rhs = self.expr_seq(other);
                self.prods.push((x, rhs));
            }
        }
        Sym::Nt(x)
    }
    /// A symbol sequence for `e` (inline where possible).
    fn expr_seq(&mut self, e: &Expr) -> Vec<Sym> {
        match e {
            Expr::Empty => vec![],
            Expr::Literal(s) => s.bytes().map(|b| Sym::Byte(b, b)).collect(),
            Expr::Seq(v) => v.iter().flat_map(|x| self.expr_seq(x)).collect(),
            Expr::Class(ranges) => {
                let x = self.fresh();
                for &(lo, hi) in ranges {
                    for seq in Utf8Sequences::new(char::from_u32(lo).unwrap(), char::from_u32(hi).unwrap()) {
                        self.prods
                            .push((x, seq.as_slice().iter().map(|r| Sym::Byte(r.start, r.end)).collect()));
                    }
                }
                vec![Sym::Nt(x)]
            }
            other => vec![self.nt(other)],
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct It {
    prod: u32,
    dot: u32,
    origin: u32,
}

/// Earley sets over a byte input, with push/pop.
pub struct Recognizer<'a> {
    g: &'a Bnf,
    sets: Vec<Vec<It>>,
}

impl<'a> Recognizer<'a> {
    pub fn new(g: &'a Bnf) -> Self {
        let mut r = Recognizer { g, sets: vec![] };
        let mut set = Vec::new();
        // Virtual start: predict all productions of the start symbol at 0.
        for &p in &g.by_lhs[g.start] {
            set.push(It { prod: p as u32, dot: 0, origin: 0 });
        }
        r.sets.push(Vec::new());
        r.close(&mut set);
        r.sets[0] = set;
        r
    }

    fn next_sym(&self, it: &It) -> Option<Sym> {
        self.g.prods[it.prod as usize].1.get(it.dot as usize).copied()
    }

    fn close(&self, set: &mut Vec<It>) {
        let pos = self.sets.len() - 1;
        let mut seen: HashSet<It> = set.iter().copied().collect();
        let mut i = 0;
        while i < set.len() {
            let it = set[i];
            i += 1;
            match self.next_sym(&it) {
                Some(Sym::Nt(x)) => {
                    for &p in &self.g.by_lhs[x] {
                        let n = It { prod: p as u32, dot: 0, origin: pos as u32 };
                        if seen.insert(n) {
                            set.push(n);
                        }
                    }
                    if self.g.nullable[x] {
                        let n = It { dot: it.dot + 1, ..it };
                        if seen.insert(n) {
                            set.push(n);
                        }
                    }
                }
                Some(Sym::Byte(..)) => {}
                None => {
                    let lhs = self.g.prods[it.prod as usize].0;
                    if (it.origin as usize) < pos {
                        for p in &self.sets[it.origin as usize] {
                            if self.next_sym(p) == Some(Sym::Nt(lhs)) {
                                let n = It { dot: p.dot + 1, ..*p };
                                if seen.insert(n) {
                                    set.push(n);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    pub fn push(&mut self, b: u8) -> bool {
        let last = self.sets.last().unwrap();
        let mut set: Vec<It> = last
            .iter()
            .filter(|it| matches!(self.next_sym(it), Some(Sym::Byte(lo, hi)) if lo <= b && b <= hi))
            .map(|it| It { dot: it.dot + 1, ..*it })
            .collect();
        if set.is_empty() {
            return false;
        }
        self.sets.push(Vec::new());
        self.close(&mut set);
        *self.sets.last_mut().unwrap() = set;
        true
    }

    pub fn depth(&self) -> usize {
        self.sets.len() - 1
    }

    pub fn truncate(&mut self, depth: usize) {
        self.sets.truncate(depth + 1);
    }

    pub fn accepts(&self) -> bool {
        let start = self.g.start;
        self.sets.last().unwrap().iter().any(|it| {
            it.origin == 0 && self.g.prods[it.prod as usize].0 == start && self.next_sym(it).is_none()
        })
    }
}

/// The oracle's mask: for every token (by id), push its bytes from the current state.
/// `tokens[id] = Some(bytes)` for producible tokens, `None` for special ones.
pub fn oracle_mask(
    r: &mut Recognizer,
    tokens: &[Option<Vec<u8>>],
    stops: &[u32],
    vocab_size: usize,
) -> Vec<u32> {
    let mut words = vec![0u32; vocab_size.div_ceil(32)];
    let base = r.depth();
    let mut order: Vec<usize> =
        (0..tokens.len()).filter(|&i| tokens[i].as_ref().is_some_and(|t| !t.is_empty())).collect();
    order.sort_by(|&a, &b| tokens[a].cmp(&tokens[b]));
    let mut prev: &[u8] = &[];
    let mut pushed = 0;
    for id in order {
        let t = tokens[id].as_deref().unwrap();
        let lcp = t.iter().zip(prev).take_while(|(a, b)| a == b).count().min(pushed);
        r.truncate(base + lcp);
        pushed = lcp;
        let mut ok = true;
        for &b in &t[lcp..] {
            if !r.push(b) {
                ok = false;
                break;
            }
            pushed += 1;
        }
        if ok {
            words[id / 32] |= 1 << (id % 32);
        }
        prev = t;
    }
    r.truncate(base);
    if r.accepts() {
        for &s in stops {
            words[s as usize / 32] |= 1 << (s % 32);
        }
    }
    words
}
