//! An independent brute-force recognizer used as the oracle for token masks.
//!
//! It shares nothing with grammask's automata or matcher: the grammar IR is expanded into
//! plain byte-level BNF productions and recognized with a textbook Earley parser over dotted
//! productions (with the Aycock–Horspool nullable fix). A byte string is a viable prefix
//! when the Earley set after it is non-empty; productions that use unproductive
//! nonterminals are dropped first, so that is exact.

use grammask::grammar::{Expr, Grammar};
use regex_syntax::utf8::Utf8Sequences;
// (The recognizer's keys are small integers and nothing is adversarial: SipHash was a
// third of the oracle's time.)
use rustc_hash::FxHashSet;

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
            // Right-linear: a nonterminal per state, `S_s ::= <bytes of c> S_t` per move
            // and `S_s ::= ""` where the automaton may stop.
            Expr::Dfa(d) => {
                let first = self.n;
                self.n += d.len();
                for s in 0..d.len() {
                    for (class, t) in d.moves(s) {
                        for seq in utf8_seqs(class) {
                            let mut rhs = seq;
                            rhs.push(Sym::Nt(first + *t as usize));
                            self.prods.push((first + s, rhs));
                        }
                    }
                    if d.is_final(s) {
                        self.prods.push((first + s, vec![]));
                    }
                }
                self.prods.push((x, vec![Sym::Nt(first)]));
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
                for seq in utf8_seqs(ranges) {
                    self.prods.push((x, seq));
                }
                vec![Sym::Nt(x)]
            }
            other => vec![self.nt(other)],
        }
    }
}

/// The byte sequences of a character class's characters.
fn utf8_seqs(ranges: &[(u32, u32)]) -> Vec<Vec<Sym>> {
    let mut out = Vec::new();
    for &(lo, hi) in ranges {
        for seq in Utf8Sequences::new(char::from_u32(lo).unwrap(), char::from_u32(hi).unwrap()) {
            out.push(seq.as_slice().iter().map(|r| Sym::Byte(r.start, r.end)).collect());
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct It {
    prod: u32,
    dot: u32,
    origin: u32,
}

/// Earley sets over a byte input, with push/pop.
///
/// The oracle walks the whole vocabulary at every checked position, pushing and popping
/// millions of bytes, so the sets' buffers are kept and reused across pops rather than
/// freed, and the dedupe table is one reused hash set.
pub struct Recognizer<'a> {
    g: &'a Bnf,
    /// `sets[..len]` are live; the buffers beyond are kept for reuse.
    sets: Vec<Vec<It>>,
    /// Per set, its items waiting on a nonterminal, sorted by that nonterminal: completing
    /// one looks up the items waiting on it instead of scanning the whole origin set.
    waiting: Vec<Vec<(usize, It)>>,
    len: usize,
    seen: FxHashSet<It>,
}

impl<'a> Recognizer<'a> {
    pub fn new(g: &'a Bnf) -> Self {
        let mut r = Recognizer { g, sets: vec![], waiting: vec![], len: 0, seen: FxHashSet::default() };
        let mut set = Vec::new();
        // Virtual start: predict all productions of the start symbol at 0.
        for &p in &g.by_lhs[g.start] {
            set.push(It { prod: p as u32, dot: 0, origin: 0 });
        }
        r.close_and_store(set);
        r
    }

    fn next_sym(g: &Bnf, it: &It) -> Option<Sym> {
        g.prods[it.prod as usize].1.get(it.dot as usize).copied()
    }

    /// Closes `set` (predictions and completions) at position `self.len` and stores it
    /// there as the last live set, with its index of waiting items.
    fn close_and_store(&mut self, mut set: Vec<It>) {
        let pos = self.len;
        let Recognizer { g, waiting, seen, .. } = self;
        seen.clear();
        seen.extend(set.iter().copied());
        let mut add = |set: &mut Vec<It>, n: It| {
            if seen.insert(n) {
                set.push(n);
            }
        };
        let mut i = 0;
        while i < set.len() {
            let it = set[i];
            i += 1;
            match Self::next_sym(g, &it) {
                Some(Sym::Nt(x)) => {
                    for &p in &g.by_lhs[x] {
                        add(&mut set, It { prod: p as u32, dot: 0, origin: pos as u32 });
                    }
                    if g.nullable[x] {
                        add(&mut set, It { dot: it.dot + 1, ..it });
                    }
                }
                Some(Sym::Byte(..)) => {}
                None => {
                    let lhs = g.prods[it.prod as usize].0;
                    // Completions at this very position were advanced through `nullable`.
                    if (it.origin as usize) < pos {
                        let w = &waiting[it.origin as usize];
                        let from = w.partition_point(|&(x, _)| x < lhs);
                        for &(_, p) in w[from..].iter().take_while(|&&(x, _)| x == lhs) {
                            add(&mut set, It { dot: p.dot + 1, ..p });
                        }
                    }
                }
            }
        }
        if self.sets.len() == pos {
            self.sets.push(Vec::new());
            self.waiting.push(Vec::new());
        }
        let w = &mut self.waiting[pos];
        w.clear();
        w.extend(set.iter().filter_map(|it| match Self::next_sym(self.g, it) {
            Some(Sym::Nt(x)) => Some((x, *it)),
            _ => None,
        }));
        w.sort_unstable_by_key(|&(x, _)| x);
        self.sets[pos] = set;
        self.len = pos + 1;
    }

    pub fn push(&mut self, b: u8) -> bool {
        let (g, len) = (self.g, self.len);
        let mut set = if len < self.sets.len() { std::mem::take(&mut self.sets[len]) } else { Vec::new() };
        set.clear();
        set.extend(
            self.sets[len - 1]
                .iter()
                .filter(|it| matches!(Self::next_sym(g, it), Some(Sym::Byte(lo, hi)) if lo <= b && b <= hi))
                .map(|it| It { dot: it.dot + 1, ..*it }),
        );
        if set.is_empty() {
            if len < self.sets.len() {
                self.sets[len] = set;
            }
            return false;
        }
        self.close_and_store(set);
        true
    }

    pub fn depth(&self) -> usize {
        self.len - 1
    }

    pub fn truncate(&mut self, depth: usize) {
        self.len = self.len.min(depth + 1);
    }

    pub fn accepts(&self) -> bool {
        let start = self.g.start;
        self.sets[self.len - 1].iter().any(|it| {
            it.origin == 0
                && self.g.prods[it.prod as usize].0 == start
                && Self::next_sym(self.g, it).is_none()
        })
    }
}

/// The vocabulary as the oracle walks it: producible tokens sorted by their bytes, each
/// with the length of the prefix it shares with the one before, so that a walk pushes
/// every byte of the vocabulary's trie once (sorting per call was a fifth of the time).
pub struct Vocab {
    /// (token id, shared prefix length with the previous token in the order).
    order: Vec<(u32, usize)>,
    tokens: Vec<Option<Vec<u8>>>,
}

impl Vocab {
    /// `tokens[id] = Some(bytes)` for producible tokens, `None` for special ones.
    pub fn new(tokens: Vec<Option<Vec<u8>>>) -> Vocab {
        let mut ids: Vec<usize> =
            (0..tokens.len()).filter(|&i| tokens[i].as_ref().is_some_and(|t| !t.is_empty())).collect();
        ids.sort_by(|&a, &b| tokens[a].cmp(&tokens[b]));
        let mut prev: &[u8] = &[];
        let mut order = Vec::with_capacity(ids.len());
        for id in ids {
            let t = tokens[id].as_deref().unwrap();
            order.push((id as u32, t.iter().zip(prev).take_while(|(a, b)| a == b).count()));
            prev = t;
        }
        Vocab { order, tokens }
    }
}

/// The oracle's mask: for every producible token, push its bytes from the current state.
pub fn oracle_mask(r: &mut Recognizer, vocab: &Vocab, stops: &[u32], vocab_size: usize) -> Vec<u32> {
    let mut words = vec![0u32; vocab_size.div_ceil(32)];
    let base = r.depth();
    // Bytes of the previous token the recognizer holds (it stops at the first rejected one).
    let mut pushed = 0;
    for &(id, shared) in &vocab.order {
        let t = vocab.tokens[id as usize].as_deref().unwrap();
        let lcp = shared.min(pushed);
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
            words[id as usize / 32] |= 1 << (id % 32);
        }
    }
    r.truncate(base);
    if r.accepts() {
        for &s in stops {
            words[s as usize / 32] |= 1 << (s % 32);
        }
    }
    words
}
