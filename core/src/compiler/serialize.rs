//! Compiled grammars as bytes: [`CompiledGrammar::to_bytes`] / [`CompiledGrammar::from_bytes`].
//!
//! What is saved is what cannot be rebuilt cheaply or at all: the optimized grammar IR
//! (the automata are rebuilt from it on load, state for state, and checked against a
//! digest of the saved ones) and every token mask computed so far — the warm part of the
//! cache, the part that costs vocabulary walks. A grammar loaded from bytes serves its
//! first fills from the saved masks without recomputing them.
//!
//! # Format (version [`FORMAT_VERSION`]; little-endian throughout; `docs/serialization.md`)
//! ```text
//! magic    8 bytes  "GRAMMASK"
//! format   u32      FORMAT_VERSION
//! engine   str      the grammask version that wrote it (automata layouts may change)
//! tokfp    u64      TokenizerInfo::fingerprint of the tokenizer it was compiled for
//! digest   u64      digest of the automata (checked after the rebuild)
//! length   u64      payload bytes
//! crc32    u32      CRC-32 of the payload
//! payload  grammar, then masks (see `write_grammar` and `write_masks`)
//! ```
//! `str` is a u32 byte count then UTF-8; lists are a u32 count then their items.
//!
//! # Safety on hostile input
//! Every read is bounds-checked and every count is checked against the bytes left
//! before anything is allocated; expression nesting is bounded; the grammar goes
//! through the same checks as any grammar built in code; every saved mask is checked
//! against the automata and the tokenizer (state numbers, token ids, trie ranks, row
//! lengths). Corrupt, truncated or foreign bytes are a [`CompileError::Format`], never a panic.

use super::mask::StateMask;
use super::store::Accepted;
use super::CompileError;
use super::{CompiledGrammar, Slot};
use crate::automata::{Automata, AutomataLimits};
use crate::bitmask::words_per_row;

type Result<T, E = CompileError> = std::result::Result<T, E>;
use crate::grammar::{CharDfa, Expr, Grammar, MemberSet, Rule, RuleId};
use crate::tokenizer::TokenizerInfo;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Version of the byte format; bumped whenever its layout changes.
pub const FORMAT_VERSION: u32 = 5;

const MAGIC: &[u8; 8] = b"GRAMMASK";

/// Deepest expression nesting read back (the EBNF parser's default bound).
const MAX_NESTING: usize = 200;

/// Appends little-endian values.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        // Every list here is bounded by u32 ids and counts.
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn words(&mut self, v: &[u32]) {
        self.len(v.len());
        self.0.reserve(v.len() * 4);
        v.iter().for_each(|&x| self.u32(x));
    }
    fn opt(&mut self, x: Option<u32>) {
        match x {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u32(v);
            }
        }
    }
}

/// Reads little-endian values, every read checked.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Offset of `bytes[0]` in the whole input (for error messages).
    base: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, what: impl Into<String>) -> CompileError {
        CompileError::Format { offset: self.base + self.pos, what: what.into() }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else { return Err(self.err(format!("{n} bytes expected, the input ends"))) };
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A count of items of at least `item_bytes` bytes each: never more than the bytes
    /// left could hold, so a corrupt count cannot make us allocate.
    fn count(&mut self, item_bytes: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        let left = self.bytes.len() - self.pos;
        if n.saturating_mul(item_bytes.max(1)) > left {
            return Err(self.err(format!("a count of {n} items does not fit the {left} bytes left")));
        }
        Ok(n)
    }
    fn str(&mut self) -> Result<String> {
        let n = self.count(1)?;
        let at = self.pos;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| CompileError::Format { offset: self.base + at, what: "text is not UTF-8".into() })
    }
    fn words(&mut self) -> Result<Vec<u32>> {
        let n = self.count(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
    fn opt(&mut self) -> Result<Option<u32>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.u32()?)),
            t => Err(self.err(format!("option tag {t}"))),
        }
    }
}

fn write_expr(w: &mut Writer, e: &Expr) {
    match e {
        Expr::Empty => w.u8(0),
        Expr::Literal(s) => {
            w.u8(1);
            w.str(s);
        }
        Expr::Class(ranges) => {
            w.u8(2);
            write_ranges(w, ranges);
        }
        Expr::Rule(r) => {
            w.u8(3);
            w.u32(r.0);
        }
        Expr::Seq(v) | Expr::Alt(v) | Expr::And(v) => {
            w.u8(match e {
                Expr::Seq(_) => 4,
                Expr::Alt(_) => 5,
                _ => 7,
            });
            w.len(v.len());
            v.iter().for_each(|x| write_expr(w, x));
        }
        Expr::Repeat { expr, min, max } => {
            w.u8(6);
            w.u32(*min);
            w.opt(*max);
            write_expr(w, expr);
        }
        Expr::Dfa(d) => {
            w.u8(8);
            w.len(d.len());
            for s in 0..d.len() {
                w.u8(d.is_final(s) as u8);
                w.len(d.moves(s).len());
                for (class, t) in d.moves(s) {
                    write_ranges(w, class);
                    w.u32(*t);
                }
            }
            // The expression it prints as (a format's spelling), when it has one.
            match d.source() {
                Some(e) => {
                    w.u8(1);
                    write_expr(w, e);
                }
                None => w.u8(0),
            }
        }
    }
}

fn write_ranges(w: &mut Writer, ranges: &[(u32, u32)]) {
    w.len(ranges.len());
    ranges.iter().for_each(|&(a, b)| {
        w.u32(a);
        w.u32(b);
    });
}

/// A character class: sorted, non-overlapping, non-adjacent scalar-value ranges (the
/// IR's rule).
fn read_ranges(r: &mut Reader) -> Result<Vec<(u32, u32)>> {
    let n = r.count(8)?;
    let mut ranges = Vec::with_capacity(n);
    for _ in 0..n {
        let (a, b) = (r.u32()?, r.u32()?);
        let ok = a <= b && b <= 0x10_FFFF && ranges.last().map_or(true, |&(_, pb): &(u32, u32)| a > pb + 1);
        if !ok {
            return Err(r.err(format!("character range {a:#x}-{b:#x} is malformed")));
        }
        ranges.push((a, b));
    }
    Ok(ranges)
}

fn read_expr(r: &mut Reader, depth: usize) -> Result<Expr> {
    if depth > MAX_NESTING {
        return Err(r.err(format!("expressions nest deeper than {MAX_NESTING}")));
    }
    Ok(match r.u8()? {
        0 => Expr::Empty,
        1 => Expr::Literal(r.str()?),
        2 => Expr::Class(read_ranges(r)?),
        3 => Expr::Rule(RuleId(r.u32()?)),
        t @ (4 | 5 | 7) => {
            let n = r.count(1)?;
            let v = (0..n).map(|_| read_expr(r, depth + 1)).collect::<Result<Vec<_>>>()?;
            match t {
                4 => Expr::Seq(v),
                5 => Expr::Alt(v),
                _ => Expr::And(v),
            }
        }
        6 => {
            let (min, max) = (r.u32()?, r.opt()?);
            if max.is_some_and(|m| m < min) {
                return Err(r.err(format!("repetition {{{min},{max:?}}} is reversed")));
            }
            Expr::Repeat { expr: Box::new(read_expr(r, depth + 1)?), min, max }
        }
        8 => {
            let n = r.count(2)?;
            let (mut moves, mut finals) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..n {
                finals.push(r.u8()? != 0);
                let k = r.count(8)?;
                let mut m = Vec::with_capacity(k);
                for _ in 0..k {
                    let class = read_ranges(r)?;
                    m.push((class, r.u32()?));
                }
                moves.push(m);
            }
            // As written, an automaton is already trimmed: one that is not (or has a move
            // out of range, or two moves on one character) did not come from this writer.
            let d = match CharDfa::new(moves, finals) {
                Some(d) if d.len() == n => d,
                _ => return Err(r.err("character automaton is malformed".to_string())),
            };
            match r.u8()? {
                0 => Expr::Dfa(Arc::new(d)),
                1 => Expr::Dfa(Arc::new(d.with_source(read_expr(r, depth + 1)?))),
                f => return Err(r.err(format!("character automaton source flag {f}"))),
            }
        }
        t => return Err(r.err(format!("expression tag {t}"))),
    })
}

fn write_grammar(w: &mut Writer, g: &Grammar) {
    w.len(g.rules.len());
    for rule in &g.rules {
        w.str(&rule.name);
        // Bit 0: `keep`; bit 1: `stand_in` (files from before it have 0 or 1 here).
        w.u8(rule.keep as u8 | (rule.stand_in as u8) << 1);
        match &rule.members {
            None => w.u8(0),
            Some(set) => {
                w.u8(1);
                w.len(set.members.len());
                for &(id, req) in &set.members {
                    w.u32(id.0);
                    w.u8(req as u8);
                }
                w.opt(set.extra.map(|r| r.0));
                w.u32(set.sep.0);
                w.u32(set.close.0);
                w.u32(set.min);
                w.opt(set.max);
            }
        }
        write_expr(w, &rule.body);
    }
    w.u32(g.root.0);
    w.len(g.markers.len());
    for m in &g.markers {
        w.str(m);
    }
}

fn read_grammar(r: &mut Reader) -> Result<Grammar> {
    let n = r.count(6)?;
    let mut rules = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str()?;
        let flags = r.u8()?;
        let (keep, stand_in) = (flags & 1 != 0, flags & 2 != 0);
        let members = match r.u8()? {
            0 => None,
            1 => {
                let k = r.count(5)?;
                let members =
                    (0..k).map(|_| Ok((RuleId(r.u32()?), r.u8()? != 0))).collect::<Result<Vec<_>>>()?;
                let extra = r.opt()?.map(RuleId);
                let (sep, close, min, max) = (RuleId(r.u32()?), RuleId(r.u32()?), r.u32()?, r.opt()?);
                Some(Box::new(MemberSet { members, extra, sep, close, min, max }))
            }
            t => return Err(r.err(format!("member-set tag {t}"))),
        };
        let body = read_expr(r, 0)?;
        rules.push(Rule { name, body, keep, stand_in, members });
    }
    let root = RuleId(r.u32()?);
    let n = r.count(4)?;
    let markers = (0..n).map(|_| r.str()).collect::<Result<Vec<_>>>()?;
    Ok(Grammar { rules, root, markers })
}

/// Ids of the distinct shared lists behind `masks`, in first-use order.
struct Blobs<'a> {
    index: FxHashMap<*const u32, u32>,
    list: Vec<&'a Arc<[u32]>>,
}

impl<'a> Blobs<'a> {
    fn id(&mut self, a: &'a Arc<[u32]>) -> u32 {
        let next = self.list.len() as u32;
        *self.index.entry(a.as_ptr()).or_insert_with(|| {
            self.list.push(a);
            next
        })
    }
}

/// Kinds of [`Accepted`] in the byte format.
const LIST: u8 = 0;
const ALL_EXCEPT: u8 = 1;
const BITSET: u8 = 2;
const DELTA: u8 = 3;

fn write_masks(w: &mut Writer, c: &CompiledGrammar) {
    // States with a mask, and the lists they share (a bitset base is written once, not
    // once per state that starts from it).
    let mut blobs = Blobs { index: FxHashMap::default(), list: Vec::new() };
    let mut states = Vec::new();
    for (s, slot) in c.masks.iter().enumerate() {
        let Some(slot) = slot.get() else { continue };
        let m = &slot.mask;
        let (kind, a, b) = match &m.accepted {
            Accepted::List(x) => (LIST, blobs.id(x), 0),
            Accepted::AllExcept(x) => (ALL_EXCEPT, blobs.id(x), 0),
            Accepted::Bitset(x) => (BITSET, blobs.id(x), 0),
            Accepted::Delta { base, flips } => (DELTA, blobs.id(base), blobs.id(flips)),
        };
        states.push((s as u32, slot.alike, m.walk_steps, kind, a, b, blobs.id(&m.uncertain)));
    }
    w.len(blobs.list.len());
    blobs.list.iter().for_each(|b| w.words(b));
    w.len(states.len());
    for (s, alike, steps, kind, a, b, unc) in states {
        [s, alike, steps].iter().for_each(|&x| w.u32(x));
        w.u8(kind);
        [a, b, unc].iter().for_each(|&x| w.u32(x));
    }
}

/// Reads the masks into `c` (whose automata are rebuilt), checking each against the
/// automata and the tokenizer.
fn read_masks(r: &mut Reader, c: &CompiledGrammar) -> Result<()> {
    let a = &c.automata;
    let tok = &c.tokenizer;
    let (vocab, ranks) = (tok.vocab_size(), tok.trie().token_ids.len());
    let words = words_per_row(vocab);
    let n = r.count(4)?;
    let mut blobs: Vec<Arc<[u32]>> = Vec::with_capacity(n);
    for _ in 0..n {
        blobs.push(c.store.intern(r.words()?));
    }
    let blob = |r: &Reader, i: u32| {
        blobs.get(i as usize).cloned().ok_or_else(|| r.err(format!("list {i} does not exist")))
    };
    let ids_in =
        |r: &Reader, v: &[u32], below: usize, what: &str| match v.iter().find(|&&x| x as usize >= below) {
            Some(x) => Err(r.err(format!("{what} {x} is out of range ({below})"))),
            None => Ok(()),
        };
    let scannable = |s: u32| a.nodes.get(s as usize).is_some_and(|n| n.scannable);
    let states = r.count(25)?;
    for _ in 0..states {
        let (s, alike, walk_steps, kind) = (r.u32()?, r.u32()?, r.u32()?, r.u8()?);
        let (x, y, unc) = (r.u32()?, r.u32()?, r.u32()?);
        if !scannable(s) || !scannable(alike) {
            return Err(r.err(format!("state {s} (like {alike}) is not a scanning state of these automata")));
        }
        let accepted = match kind {
            LIST | ALL_EXCEPT => {
                let v = blob(r, x)?;
                ids_in(r, &v, vocab, "token id")?;
                if kind == LIST {
                    Accepted::List(v)
                } else {
                    Accepted::AllExcept(v)
                }
            }
            BITSET | DELTA => {
                let base = blob(r, x)?;
                if base.len() != words {
                    return Err(
                        r.err(format!("a bitset of {} words for a vocabulary of {vocab}", base.len()))
                    );
                }
                c.store.adopt_base(base.clone());
                if kind == BITSET {
                    Accepted::Bitset(base)
                } else {
                    let flips = blob(r, y)?;
                    ids_in(r, &flips, vocab, "token id")?;
                    Accepted::Delta { base, flips }
                }
            }
            k => return Err(r.err(format!("mask kind {k}"))),
        };
        let uncertain = blob(r, unc)?;
        ids_in(r, &uncertain, ranks, "trie rank")?;
        if !uncertain.windows(2).all(|p| p[0] < p[1]) {
            return Err(r.err("uncertain tokens are not in trie order"));
        }
        let slot = Slot { mask: StateMask { accepted, uncertain, walk_steps, stand_in: false }, alike };
        if c.masks[s as usize].set(slot).is_err() {
            return Err(r.err(format!("state {s} has two masks")));
        }
    }
    if r.pos != r.bytes.len() {
        return Err(r.err("bytes after the end"));
    }
    Ok(())
}

impl CompiledGrammar {
    /// The grammar and every token mask computed so far, as bytes (format in the
    /// `docs/serialization.md`). Save a grammar after it has served for a while, or after
    /// [`Self::precompute`], and [`Self::from_bytes`] starts warm.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{CompiledGrammar, GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "ab", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![3]), ..Default::default() };
    /// let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?);
    /// let compiled = GrammarCompiler::new(tok.clone()).compile_ebnf(r#"root ::= "a"+ "b""#)?;
    /// compiled.precompute();
    /// let bytes = compiled.to_bytes();
    /// let loaded = Arc::new(CompiledGrammar::from_bytes(&bytes, tok)?);
    /// assert_eq!(loaded.mask_stats(), compiled.mask_stats()); // every mask came along
    /// let mut m = GrammarMatcher::new(loaded);
    /// let mut mask = TokenBitmask::new(1, 4);
    /// m.fill_next_token_bitmask(mask.row_mut(0))?;
    /// assert_eq!(mask.allowed_ids(0), [0, 2]);
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        // A staged compile's shell is written as its finished grammar (a shell alone
        // cannot be loaded: its stand-ins have nothing to stand for).
        if let Some(full) = self.finishing().and_then(|f| f.wait().ok()) {
            return full.to_bytes();
        }
        let mut p = Writer::default();
        write_grammar(&mut p, self.automata.grammar());
        write_masks(&mut p, self);
        let mut w = Writer::default();
        w.0.extend_from_slice(MAGIC);
        w.u32(FORMAT_VERSION);
        w.str(env!("CARGO_PKG_VERSION"));
        w.u64(self.tokenizer.fingerprint());
        w.u64(self.automata.digest());
        w.u64(p.0.len() as u64);
        w.u32(crc32fast::hash(&p.0));
        w.0.extend_from_slice(&p.0);
        w.0
    }

    /// A grammar from [`Self::to_bytes`]'s output, for `tokenizer` (which must be the one
    /// it was compiled for: its fingerprint is checked). The automata are rebuilt with
    /// default limits; the saved masks are in place before the first fill.
    pub fn from_bytes(bytes: &[u8], tokenizer: Arc<TokenizerInfo>) -> crate::Result<CompiledGrammar> {
        Ok(Self::decode(bytes, tokenizer, &AutomataLimits::default())?)
    }

    pub(crate) fn decode(
        bytes: &[u8],
        tokenizer: Arc<TokenizerInfo>,
        limits: &AutomataLimits,
    ) -> Result<Self> {
        let mut r = Reader { bytes, pos: 0, base: 0 };
        if r.take(MAGIC.len()).ok() != Some(MAGIC.as_slice()) {
            return Err(CompileError::Format {
                offset: 0,
                what: "not a compiled grammar (magic bytes differ)".into(),
            });
        }
        let version = r.u32()?;
        if version != FORMAT_VERSION {
            return Err(r.err(format!("format version {version}; this build reads {FORMAT_VERSION}")));
        }
        let engine = r.str()?;
        if engine != env!("CARGO_PKG_VERSION") {
            return Err(r.err(format!("written by grammask {engine}; this is {}", env!("CARGO_PKG_VERSION"))));
        }
        let fingerprint = r.u64()?;
        if fingerprint != tokenizer.fingerprint() {
            return Err(r.err(format!(
                "compiled for another tokenizer (fingerprint {fingerprint:016x}, this one {:016x})",
                tokenizer.fingerprint()
            )));
        }
        let (digest, len, crc) = (r.u64()?, r.u64()?, r.u32()?);
        let at = r.pos;
        let payload = usize::try_from(len).ok().and_then(|n| r.take(n).ok());
        let Some(payload) = payload else {
            return Err(CompileError::Format {
                offset: at,
                what: format!("a payload of {len} bytes, the input ends"),
            });
        };
        if r.pos != bytes.len() {
            return Err(r.err("bytes after the payload"));
        }
        if crc32fast::hash(payload) != crc {
            return Err(CompileError::Format {
                offset: at,
                what: "checksum mismatch: the bytes are corrupt".into(),
            });
        }
        let mut p = Reader { bytes: payload, pos: 0, base: at };
        let grammar = read_grammar(&mut p)?;
        if grammar.rules.iter().any(|r| r.stand_in) {
            return Err(CompileError::Format {
                offset: at,
                what: "a staged compile's shell, whose finished grammar failed to build".into(),
            });
        }
        let automata = Automata::rebuild(grammar, limits)?;
        if automata.digest() != digest {
            return Err(CompileError::Format {
                offset: at,
                what: "the automata rebuilt from the grammar differ from the saved ones".into(),
            });
        }
        let compiled = Self::from_automata(automata, tokenizer, None);
        read_masks(&mut p, &compiled)?;
        Ok(compiled)
    }
}
