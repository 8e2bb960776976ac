//! The adaptive token mask of one automaton state, and how it is computed.
//!
//! For a scannable DFA state `s` of rule `R`, every producible token falls in one class:
//! - **accepted**: its bytes can be consumed starting at `s` without `R` having to end
//!   (sub-rules `R` calls are parsed normally). True in any context.
//! - **rejected**: its bytes cannot be consumed from `s` even if `R` ends somewhere inside
//!   the token — either `R` never ends on the way, or the byte after every place it could
//!   end is not in `FOLLOW(R)` (context expansion, paper §3.2).
//! - **uncertain**: `R` can end inside the token and the rest might fit what follows `R`.
//!   Only the full parse state can tell; the matcher checks these at run time.
//!
//! The classification walks the vocabulary trie with an Earley parser seeded at `s`
//! (see `matcher::earley`): one push per trie node, popping back to the common prefix,
//! and skipping a whole subtree when a prefix dies.
//!
//! # Storage
//! Accepted sets are stored adaptively (XGrammar's store): a list of accepted ids when
//! few tokens are accepted, the complement as a list of excluded ids when almost all are
//! (masks like "any string character"), and otherwise a bitset over the vocabulary. Lists
//! are capped at a quarter of the bitset's words, where applying them starts to cost more
//! than OR-ing the bitset; so a state's mask costs at most `V/8` bytes. Uncertain tokens are kept as trie ranks
//! (positions in byte-sorted order) so the run-time check walks them in sorted order and
//! shares prefixes between neighbours.

use super::store::{Accepted, MaskStore};
use crate::automata::{Automata, ByteSet, DEAD};
use crate::crew::{self, Share};
use crate::matcher::earley::{Earley, Item, Stamps};
use crate::tokenizer::{first_clear_bit, utf8, TokenTrie, TokenizerInfo, TrieNode};
use std::sync::Arc;
use std::time::Instant;

/// Which tokens a walk must classify; it may skip the subtrees holding none of them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Focus<'f> {
    /// Every token.
    All,
    /// The tokens of more than this many bytes.
    LongerThan(usize),
    /// The tokens in these trie node ranges (`k..subtree_end`, ascending, disjoint).
    Subtrees(&'f [(u32, u32)]),
}

impl Focus<'_> {
    /// Where the walk goes instead of node `k` when it may skip `k`'s subtree (and maybe
    /// more); `None` when it must visit `k`.
    #[inline]
    fn skip_from(&self, trie: &TokenTrie, k: usize) -> Option<usize> {
        let end = trie.nodes[k].subtree_end;
        match *self {
            Focus::All => None,
            Focus::LongerThan(n) => (trie.deepest[k] as usize <= n).then_some(end as usize),
            Focus::Subtrees(ranges) => {
                // The first range ending after `k` overlaps `k`'s subtree (holds `k`, or
                // starts below it) unless it starts past the subtree's end; then the walk
                // goes to the sibling on its way (none left: the walk is over).
                let i = ranges.partition_point(|r| r.1 <= k as u32);
                match ranges.get(i) {
                    None => Some(trie.nodes.len()),
                    Some(r) if r.0 < end => None,
                    Some(r) => Some(trie.sibling_towards(k, r.0)),
                }
            }
        }
    }
}

/// The token ranks of trie node ranges (`k..subtree_end`), ascending.
pub(crate) fn rank_ranges(trie: &TokenTrie, subtrees: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let rank_at = |k: u32| trie.nodes.get(k as usize).map_or(trie.token_ids.len() as u32, |n| n.tokens.0);
    subtrees.iter().map(|&(k, end)| (rank_at(k), rank_at(end))).collect()
}

/// Token classification for one DFA state.
#[derive(Debug, Clone)]
pub(crate) struct StateMask {
    pub accepted: Accepted,
    /// Trie ranks (indices into the trie's byte-sorted token list) of uncertain tokens.
    pub uncertain: Arc<[u32]>,
    /// Trie nodes the walk that computed this mask visited — for a mask derived from
    /// another's, that one's: what computing it afresh would roughly cost.
    pub walk_steps: u32,
    /// The walk predicted a stand-in rule ([`crate::grammar::Rule::stand_in`]): the
    /// mask may differ from the finished grammar's, so a matcher must not use it.
    pub stand_in: bool,
}

impl StateMask {
    /// Classifies every producible token for DFA state `state`, storing its lists in
    /// `store` (many states share masks: every place a grammar is inside an identifier
    /// or a string, say). Gives up (`None`) once `deadline` has passed (checked every few
    /// thousand trie nodes): the compiler's eager phase uses it to skip states too wide
    /// for its time budget, leaving them lazy.
    pub fn compute_until(
        a: &Automata,
        tok: &TokenizerInfo,
        state: u32,
        store: &MaskStore,
        deadline: Option<Instant>,
    ) -> Option<StateMask> {
        Some(Self::classify(a, tok, state, deadline, Focus::All)?.encode(tok, store))
    }

    /// [`Self::compute_until`] without a deadline, its walk split into `parts` runs of the
    /// trie's top-level subtrees shared with the helpers of the compile under way
    /// ([`crew::map_init`]): a compile's first mask, the start state's, is a walk of the
    /// whole vocabulary (~0.2 ms for 151k tokens), and the helper that built rule
    /// automata is awake and idle by then. The same mask as one walk: each run classifies
    /// its tokens (and maybe a few past them, dropped here).
    pub fn compute_shared(
        a: &Automata,
        tok: &TokenizerInfo,
        state: u32,
        store: &MaskStore,
        parts: usize,
    ) -> StateMask {
        let runs = tok.trie().top_level_parts(parts);
        let walks = crew::map_init(
            &runs,
            Share::IfHired,
            || (),
            |_, &(nodes, ranks)| {
                Some((
                    Self::classify(a, tok, state, None, Focus::Subtrees(std::slice::from_ref(&nodes)))?,
                    ranks,
                ))
            },
        );
        let mut all = Classes::default();
        for walk in walks {
            // (A walk without a deadline always finishes.)
            let Some((c, ranks)) = walk else { return Self::classify_all(a, tok, state, store) };
            c.clip_into(ranks, &mut all);
        }
        all.encode(tok, store)
    }

    /// One walk of every token, without a deadline.
    fn classify_all(a: &Automata, tok: &TokenizerInfo, state: u32, store: &MaskStore) -> StateMask {
        match Self::classify(a, tok, state, None, Focus::All) {
            Some(c) => c.encode(tok, store),
            None => unreachable!("a walk without a deadline always finishes"),
        }
    }

    /// The mask of `state` given `base`, the mask of a state that classifies every token of
    /// at most `known` bytes alike ([`Automata::agreement_depth`]): only the subtrees holding
    /// longer tokens are walked. Near the end of a bounded string (`maxLength: 100`) the
    /// positions differ only for tokens longer than the room left, a few dozen.
    pub fn compute_beyond(
        a: &Automata,
        tok: &TokenizerInfo,
        state: u32,
        store: &MaskStore,
        deadline: Option<Instant>,
        base: &StateMask,
        known: usize,
    ) -> Option<StateMask> {
        let c = Self::classify(a, tok, state, deadline, Focus::LongerThan(known))?;
        let trie = tok.trie();
        let long = trie.ranks_longer_than(known).iter().copied();
        let walked = |r: u32| tok.token_bytes(trie.token_ids[r as usize]).len() > known;
        Some(Self::overlay(tok, store, base, &c, long, walked))
    }

    /// The mask of `state` given `base`, the mask of a state that classifies alike every
    /// token outside the trie node ranges `subtrees` ([`super::diverge`]): only those
    /// are walked.
    pub fn compute_focused(
        a: &Automata,
        tok: &TokenizerInfo,
        state: u32,
        store: &MaskStore,
        deadline: Option<Instant>,
        base: &StateMask,
        subtrees: &[(u32, u32)],
    ) -> Option<StateMask> {
        let c = Self::classify(a, tok, state, deadline, Focus::Subtrees(subtrees))?;
        let ranges = rank_ranges(tok.trie(), subtrees);
        let walked = |r: u32| {
            let i = ranges.partition_point(|x| x.1 <= r);
            ranges.get(i).is_some_and(|x| x.0 <= r)
        };
        let ranks = ranges.iter().flat_map(|&(lo, hi)| lo..hi);
        Some(Self::overlay(tok, store, base, &c, ranks, walked))
    }

    /// `base` with the classes of `ranks` — the tokens for which `walked` holds — taken
    /// from the walk `c`, which classified each of them.
    fn overlay(
        tok: &TokenizerInfo,
        store: &MaskStore,
        base: &StateMask,
        c: &Classes,
        ranks: impl Iterator<Item = u32>,
        walked: impl Fn(u32) -> bool,
    ) -> StateMask {
        let ids = &tok.trie().token_ids;
        let runs = &c.accepted.0;
        // The ids whose verdict differs from `base`'s, looked up one by one in the walk's
        // sorted runs: a few dozen to a few thousand, where re-encoding the whole mask
        // (a pass over the vocabulary, then a search for the nearest stored bitset) cost
        // tens of microseconds even when nothing changed.
        let mut bits = base.accepted.to_words(tok);
        let mut flips = Vec::new();
        let mut uncertain_walked = Vec::new();
        // Ascending ranks (whole subtrees) advance through the runs in step; others
        // (the longest-first order of `compute_beyond`) search them.
        let (mut i, mut last) = (0usize, 0u32);
        for r in ranks {
            let id = ids[r as usize];
            if r >= last {
                while runs.get(i).is_some_and(|run| run.1 <= r) {
                    i += 1;
                }
            } else {
                i = runs.partition_point(|run| run.1 <= r);
            }
            last = r;
            let accepted = runs.get(i).is_some_and(|run| run.0 <= r);
            if accepted != (bits[id as usize / 32] >> (id % 32) & 1 == 1) {
                flips.push(id);
            }
            if !accepted && c.uncertain.binary_search(&r).is_ok() {
                uncertain_walked.push(r);
            }
        }
        let mut uncertain: Vec<u32> =
            base.uncertain.iter().copied().filter(|&r| !walked(r)).chain(uncertain_walked).collect();
        uncertain.sort_unstable();
        flips.sort_unstable();
        flips.iter().for_each(|&id| bits[id as usize / 32] ^= 1 << (id % 32));
        if flips.len() * 4 > bits.len() {
            // Too many changes for a patch to stay compact: encode afresh.
            return encode_words(bits, uncertain, base.walk_steps, base.stand_in || c.stand_in, tok, store);
        }
        StateMask {
            accepted: base.accepted.patched(&flips, &bits, store),
            uncertain: store.intern(uncertain),
            walk_steps: base.walk_steps,
            stand_in: base.stand_in || c.stand_in,
        }
    }

    /// Classifies the producible tokens for `state` (at least those `focus` names).
    fn classify(
        a: &Automata,
        tok: &TokenizerInfo,
        state: u32,
        deadline: Option<Instant>,
        focus: Focus<'_>,
    ) -> Option<Classes> {
        thread_local! {
            // One set of stamp arrays per thread (4 bytes × 2 × the largest automaton's
            // states seen on it), instead of two zeroed arrays per computed state.
            static STAMPS: std::cell::Cell<Stamps> = Default::default();
        }
        let mut parser = Earley::with_stamps(a, state, STAMPS.take());
        parser.set_memoize(true);
        let mut classes = Self::classify_with(&mut parser, a, tok, state, deadline, focus);
        if let Some(c) = &mut classes {
            c.stand_in = parser.take_stand_in();
        }
        STAMPS.set(parser.into_stamps());
        classes
    }

    /// [`StateMask::classify`] with its parser, seeded with `state`.
    fn classify_with(
        parser: &mut Earley,
        a: &Automata,
        tok: &TokenizerInfo,
        state: u32,
        deadline: Option<Instant>,
        focus: Focus<'_>,
    ) -> Option<Classes> {
        let trie = tok.trie();
        let follow = &a.follow[a.nodes[state as usize].rule as usize];
        let max = trie.max_depth + 1;
        // Per depth (bytes consumed): the byte, whether the seed rule could end there, and
        // (in DFA mode) the single item's state.
        let mut path: Vec<u8> = vec![0; max];
        let mut ends: Vec<bool> = vec![false; max + 1];
        let mut dstate: Vec<u32> = vec![0; max + 1];
        // Accepted tokens as runs of trie ranks: whole subtrees are consecutive, so a state
        // accepting 100k tokens usually holds a few thousand runs, not 100k ids.
        let mut accepted = RankRuns::default();
        let mut excluded_ranks: Vec<(u32, u32)> = Vec::new();
        let mut uncertain: Vec<u32> = Vec::new();
        let nodes = &trie.nodes;
        // DFA mode: while the parse is one item whose moves reach states with no rule edges
        // (and no completion into a parent), a move is one table lookup; the Earley parser
        // stays at depth `e_depth` and is synced only when a move needs it.
        let mut e_depth = 0usize;
        // First bytes some item of the seed set can scan. A token starting with any other
        // byte dies at its first byte, before any rule could end, so it is rejected
        // outright (never uncertain): the walk jumps over such root subtrees in runs.
        // (Leaving the first bytes of called rules to their start states' masks, which the
        // matcher ORs in anyway, made these walks a quarter cheaper but left the tokens that
        // close the callee uncertain, to be checked at every fill: MaskBench Github_medium's
        // mean mask time went from 9.5 to 27-35 µs.)
        let first_live = parser.last_set().iter().fold(ByteSet::default(), |mut set, it| {
            set.union(&a.out_bytes(it.state));
            set
        });
        // `Some(origin)` when the Earley set at `e_depth` is a single item (DFA mode usable).
        let mut single = single_item(a, parser, &mut dstate, 0);
        let mut loops: rustc_hash::FxHashMap<u32, Option<Skip>> = Default::default();
        let mut eloops = EarleyLoops::default();
        let (mut loop_state, mut loop_table): (u32, Option<Skip>) = (u32::MAX, None);
        // Spliced repetitions by (chain, origin 0), and the room at the last position seen.
        let mut chains: rustc_hash::FxHashMap<(usize, bool), Option<ChainSkip>> = Default::default();
        let (mut chain_at, mut chain_room): ((u32, bool), Option<(ChainSkip, usize)>) =
            ((u32::MAX, false), None);
        // Depth at which the walk went on past the seed rule's end into the continuation
        // every context reads (`Automata::cont_at`); `usize::MAX`: not on this path.
        let mut jumped_at = usize::MAX;
        let mut k = 0usize;
        let mut steps = 0u32;
        'walk: while k < nodes.len() {
            steps = steps.wrapping_add(1);
            // (A fill's meter counts the nodes: past its limit the mask is abandoned and
            // the fill refused; a compile's ignores them.)
            if steps % 4096 == 0
                && (deadline.is_some_and(|d| Instant::now() >= d)
                    || crate::budget::charge_walk(4096).is_err())
            {
                return None;
            }
            let node = nodes[k];
            let d = node.depth as usize - 1;
            if let Some(next) = focus.skip_from(trie, k) {
                k = next;
                continue;
            }
            if d == 0 && !first_live.contains(node.byte) {
                let (next, last) = trie.next_sibling_where(k, |b| first_live.contains(b));
                excluded_ranks.push((node.tokens.0, last));
                k = next;
                continue;
            }
            path[d] = node.byte;
            if d < jumped_at {
                jumped_at = usize::MAX;
            }
            if d < e_depth {
                parser.truncate(d);
                e_depth = d;
                single = single_item(a, parser, &mut dstate, d);
            }
            let ok = match single {
                Some(origin) => {
                    let mut here = dstate[d];
                    // At the end of the seed rule, with nothing more to read inside it:
                    // what every context reads next is read as if it were the rule's own
                    // (once per path), and the tokens it takes are accepted.
                    if origin == 0 && d > 0 && jumped_at == usize::MAX && a.nodes[here as usize].is_final {
                        if let Some(j) = a.cont_at(here) {
                            here = j;
                            dstate[d] = j;
                            jumped_at = d;
                        }
                    }
                    let t = dfa_move(a, here, a.byte_class[node.byte as usize] as usize, origin);
                    // A state looping on a wide byte set takes every subtree that stays
                    // inside the set in one step: all its tokens are accepted. Only a
                    // looping byte makes `here` a candidate (cheap for chains of states).
                    if t == here && loop_state != here {
                        loop_state = here;
                        loop_table =
                            loops.entry(here).or_insert_with(|| wide_loop(a, tok, here, origin)).clone();
                    }
                    if loop_state == here {
                        // This sibling and the following ones read whole: one run of ranks.
                        if let Some(j) = loop_table.as_ref().and_then(|w| whole_run(w, node.sib as usize)) {
                            accepted.push((node.tokens.0, trie.sib_rank[j]));
                            k = trie.sib_node[j] as usize;
                            continue;
                        }
                    } else if t == here + 1 {
                        // Maybe a position of a spliced repetition (its next one is the
                        // next state): siblings made of its characters, whose tokens fit
                        // in the positions left, are read whole.
                        // (Past a continuation, the same state has less room.)
                        let at = (here, jumped_at <= d);
                        if chain_at != at {
                            chain_at = at;
                            chain_room = a.chain_position(here).and_then(|(c, pos)| {
                                let mut skip = chains
                                    .entry((c, origin == 0))
                                    .or_insert_with(|| chain_skip(a, tok, c, origin))
                                    .clone()?;
                                let mut room = skip.lim.checked_sub(pos).filter(|&r| r > 0)? as usize;
                                // Where the repetition ends its rule into a continuation
                                // that reads as many more copies, they are room too (and
                                // a token too long for them is uncertain, not rejected).
                                let l = &a.chains[c].1;
                                if origin == 0 && !at.1 && skip.lim == l.max {
                                    if let Some((_, more)) = a.cont(l.positions + l.max - 1) {
                                        room += more as usize;
                                        skip.counted = false;
                                    }
                                }
                                Some((skip, room))
                            });
                        }
                        if let Some((skip, room)) = &chain_room {
                            let taken = skip.read_siblings(
                                trie,
                                *room,
                                &node,
                                &path[..d],
                                &ends[..=d],
                                follow,
                                &mut accepted,
                                &mut excluded_ranks,
                            );
                            if let Some(next) = taken {
                                k = next;
                                continue;
                            }
                        }
                    }
                    if t == DEAD {
                        false
                    } else {
                        let info = a.nodes[t as usize];
                        let calls = info.edges.0 != info.edges.1 && !(info.tail && origin == 0);
                        if !calls && (!info.is_final || origin == 0) {
                            dstate[d + 1] = t;
                            ends[d + 1] = info.is_final;
                        } else {
                            // Sync the parser along the DFA path, then take the move in Earley.
                            // (Never past a continuation: it is pure, so the walk stays in
                            // DFA mode there.)
                            debug_assert!(jumped_at > d);
                            for &b in &path[e_depth..=d] {
                                parser.push(a, b);
                            }
                            e_depth = d + 1;
                            ends[d + 1] = parser.can_end();
                            single = single_item(a, parser, &mut dstate, d + 1);
                        }
                        true
                    }
                }
                None => 'earley: {
                    // Nodes deeper than the parser lie on loop bytes of its latest set (see
                    // `EarleyLoops`): each stands for that same set, so needs no push.
                    if d > e_depth {
                        let (bytes, whole) = eloops.found(e_depth);
                        if let Some(j) = whole.and_then(|w| whole_run(w, node.sib as usize)) {
                            accepted.push((node.tokens.0, trie.sib_rank[j]));
                            k = trie.sib_node[j] as usize;
                            continue 'walk;
                        }
                        if contains(bytes, node.byte) {
                            ends[d + 1] = parser.can_end();
                            break 'earley true;
                        }
                        if eloops.dies(a, parser.last_set(), node.byte) {
                            break 'earley false;
                        }
                        // The byte leaves the loop alive: materialize the loop bytes.
                        for &b in &path[e_depth..d] {
                            parser.push(a, b);
                            eloops.inherit(e_depth, b, parser.last_uid());
                            e_depth += 1;
                        }
                    }
                    // An Earley set that reproduces itself on a wide byte set takes every
                    // subtree inside the set at once (an identifier inside an expression).
                    let prev = d.checked_sub(1).map(|i| path[i]);
                    if let Some(whole) = prev.and_then(|p| eloops.table(a, tok, parser, d, p, node.byte)) {
                        if let Some(j) = whole_run(whole, node.sib as usize) {
                            accepted.push((node.tokens.0, trie.sib_rank[j]));
                            k = trie.sib_node[j] as usize;
                            continue 'walk;
                        }
                    }
                    if eloops.loops_on(d, parser.last_uid(), node.byte) {
                        ends[d + 1] = parser.can_end();
                        break 'earley true;
                    }
                    if parser.push(a, node.byte) {
                        if eloops.at.get(d).is_some_and(|p| p.uid == parser.previous_uid()) {
                            eloops.inherit(d, node.byte, parser.last_uid());
                        }
                        e_depth = d + 1;
                        ends[d + 1] = parser.can_end();
                        single = single_item(a, parser, &mut dstate, d + 1);
                        true
                    } else {
                        false
                    }
                }
            };
            if ok {
                accepted.push(node.tokens);
                k += 1;
                continue;
            }
            // Every token below `k` dies at byte `d`. It is uncertain if the rule could end
            // after `i` bytes (1 ≤ i ≤ d) and byte `i` could follow the rule.
            if (1..d).any(|i| ends[i] && follow.contains(path[i])) {
                let (first, last) = trie.ranks_below(k);
                uncertain.extend(first..last);
                k = node.subtree_end as usize;
                continue;
            }
            // Rejected outright, and so is every following sibling that dies on its byte
            // without a chance to straddle: skip them all in one range.
            let ends_here = d > 0 && ends[d];
            if ends_here && follow.contains(node.byte) {
                let (first, last) = trie.ranks_below(k);
                uncertain.extend(first..last);
                k = node.subtree_end as usize;
                continue;
            }
            let dies = |b: u8| match single {
                Some(origin) => dfa_move(a, dstate[d], a.byte_class[b as usize] as usize, origin) == DEAD,
                None => eloops.dies(a, parser.last_set(), b),
            };
            let (next, last) = trie.next_sibling_where(k, |b| !dies(b) || (ends_here && follow.contains(b)));
            excluded_ranks.push((node.tokens.0, last));
            k = next;
        }
        crate::budget::charge_walk(u64::from(steps % 4096)).ok()?;
        Some(Classes { accepted, excluded: excluded_ranks, uncertain, steps, stand_in: false })
    }
}

/// The outcome of one classification walk, as trie ranks.
#[derive(Default)]
struct Classes {
    accepted: RankRuns,
    excluded: Vec<(u32, u32)>,
    uncertain: Vec<u32>,
    /// Trie nodes visited.
    steps: u32,
    /// The walk predicted a stand-in rule.
    stand_in: bool,
}

impl Classes {
    /// Appends the classes of the ranks `lo..hi` to `out`, whose classes all lie before
    /// `lo` (a focused walk may go on past its subtrees through siblings it rejects or
    /// accepts whole).
    fn clip_into(self, (lo, hi): (u32, u32), out: &mut Classes) {
        let clip = |(a, b): (u32, u32)| (a.max(lo), b.min(hi));
        for run in self.accepted.0.into_iter().map(clip).filter(|(a, b)| a < b) {
            out.accepted.push(run);
        }
        for (a, b) in self.excluded.into_iter().map(clip).filter(|(a, b)| a < b) {
            match out.excluded.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => out.excluded.push((a, b)),
            }
        }
        out.uncertain.extend(self.uncertain.into_iter().filter(|r| (lo..hi).contains(r)));
        out.steps = out.steps.saturating_add(self.steps);
        out.stand_in |= self.stand_in;
    }

    /// Stores the walk's result in the smallest fitting form (see the module docs).
    fn encode(self, tok: &TokenizerInfo, store: &MaskStore) -> StateMask {
        let trie = tok.trie();
        let Classes { accepted, excluded: excluded_ranks, uncertain, steps, stand_in } = self;
        let n_rejected: usize = excluded_ranks.iter().map(|&(a, b)| (b - a) as usize).sum();
        let n_except = n_rejected + uncertain.len();
        // A list is applied one bit at a time; a bitset is OR-ed a word at a time, about as
        // fast as a list of a quarter of its words. So a list is used only when it has at
        // most `words / 4` entries (1,002 for a 128k vocabulary — XGrammar's threshold too),
        // which also keeps it no larger than the bitset.
        let words = tok.vocab_size().div_ceil(32);
        let n_accepted = accepted.len();
        let accepted = if n_accepted <= n_except && n_accepted * 4 <= words {
            Accepted::List(store.intern(accepted.ranks().map(|r| trie.token_ids[r as usize]).collect()))
        } else if n_except * 4 <= words {
            let ex: Vec<u32> = excluded_ranks
                .iter()
                .flat_map(|&(a, b)| (a..b).map(|r| trie.token_ids[r as usize]))
                .chain(uncertain.iter().map(|&r| trie.token_ids[r as usize]))
                .collect();
            Accepted::AllExcept(store.intern(ex))
        } else if n_accepted <= n_except {
            let mut bits = vec![0u32; words];
            for id in accepted.ranks().map(|r| trie.token_ids[r as usize]) {
                bits[id as usize / 32] |= 1 << (id % 32);
            }
            store.bitset(bits)
        } else {
            // Mostly accepted (inside a string): clear the fewer excluded ids from the
            // producible set instead of setting 100k scattered bits.
            let mut bits = tok.normal_words().to_vec();
            let excluded = excluded_ranks.iter().flat_map(|&(a, b)| a..b).chain(uncertain.iter().copied());
            for id in excluded.map(|r| trie.token_ids[r as usize]) {
                bits[id as usize / 32] &= !(1 << (id % 32));
            }
            store.bitset(bits)
        };
        StateMask { accepted, uncertain: store.intern(uncertain), walk_steps: steps, stand_in }
    }
}

/// A mask from its accepted ids as a bitset in mask layout, choosing the form as
/// [`Classes::encode`] does.
fn encode_words(
    bits: Vec<u32>,
    uncertain: Vec<u32>,
    walk_steps: u32,
    stand_in: bool,
    tok: &TokenizerInfo,
    store: &MaskStore,
) -> StateMask {
    let words = bits.len();
    let normal = tok.normal_words();
    let n_accepted = bits.iter().map(|w| w.count_ones() as usize).sum::<usize>();
    let n_except = normal.iter().zip(&bits).map(|(n, b)| (n & !b).count_ones() as usize).sum::<usize>();
    let ids_of =
        |f: &dyn Fn(usize) -> u32| -> Vec<u32> { crate::bitmask::set_bits((0..words).map(f)).collect() };
    let accepted = if n_accepted <= n_except && n_accepted * 4 <= words {
        Accepted::List(store.intern(ids_of(&|w| bits[w])))
    } else if n_except * 4 <= words {
        Accepted::AllExcept(store.intern(ids_of(&|w| normal[w] & !bits[w])))
    } else {
        store.bitset(bits)
    };
    StateMask { accepted, uncertain: store.intern(uncertain), walk_steps, stand_in }
}

/// A set of trie ranks as sorted, merged half-open runs.
#[derive(Default)]
struct RankRuns(Vec<(u32, u32)>);

impl RankRuns {
    /// Adds `lo..hi`, which starts at or after every run added so far.
    #[inline]
    fn push(&mut self, (lo, hi): (u32, u32)) {
        if lo == hi {
            return;
        }
        match self.0.last_mut() {
            Some(last) if last.1 == lo => last.1 = hi,
            _ => self.0.push((lo, hi)),
        }
    }

    fn len(&self) -> usize {
        self.0.iter().map(|&(a, b)| (b - a) as usize).sum()
    }

    fn ranks(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().flat_map(|&(a, b)| a..b)
    }
}

/// Bytes with at least this many members make a self-loop worth a subtree-skip table.
const WIDE_LOOP: u32 = 32;

/// How a wide self-looping state takes whole trie subtrees: the
/// [`whole_siblings`](crate::tokenizer::TokenTrie::whole_siblings) bits of its loop bytes.
type Skip = Arc<[u64]>;

/// If sibling entry `i` is set in `whole`, the entry ending its run of set entries: the
/// walk accepts those siblings' subtrees as one run of ranks and goes on from there.
#[inline]
fn whole_run(whole: &[u64], i: usize) -> Option<usize> {
    (whole[i / 64] >> (i % 64) & 1 == 1).then(|| first_clear_bit(whole, i + 1))
}

/// The subtree-skip table for DFA state `s`, when the bytes on which it loops form a wide
/// set and staying in `s` is a DFA-mode move (no rule edges; not a final state with a
/// parent to complete into).
fn wide_loop(a: &Automata, tok: &TokenizerInfo, s: u32, origin: u32) -> Option<Skip> {
    if !stays_dfa(a, s, origin) {
        return None;
    }
    whole_moves(a, tok, s, s, origin).map(|(whole, _)| whole)
}

/// The [`whole_siblings`](crate::tokenizer::TokenTrie::whole_siblings) bits of the bytes on
/// which state `from` moves to state `to`, when they are a wide set, and whether `from`
/// also reads every well-formed non-ASCII character to `to` (the bits then take subtrees
/// of UTF-8 characters too). `to` is `from` for a self-loop, the next position of a chain.
fn whole_moves(a: &Automata, tok: &TokenizerInfo, from: u32, to: u32, origin: u32) -> Option<(Skip, bool)> {
    let mut set = [0u64; 4];
    let row = a.row(from);
    for b in 0..=255u8 {
        if row.get(a.byte_class[b as usize] as usize) == to {
            set[b as usize / 64] |= 1 << (b % 64);
        }
    }
    if set.iter().map(|w| w.count_ones()).sum::<u32>() < WIDE_LOOP {
        return None;
    }
    let utf8 = reads_utf8(a, from, to, |t| stays_dfa(a, t, origin));
    if utf8 {
        set[2] = 0;
        set[3] = 0;
    }
    Some((tok.trie().whole_siblings(&set, utf8), utf8))
}

/// Whether a move to `t` keeps a walk in DFA mode for an item of origin `origin`: not
/// dead, no rule edges, and not a final state with a parent to complete into.
fn stays_dfa(a: &Automata, t: u32, origin: u32) -> bool {
    t != DEAD && {
        let info = a.nodes[t as usize];
        info.edges.0 == info.edges.1 && (!info.is_final || origin == 0)
    }
}

/// Whether state `from` reads every well-formed non-ASCII character to state `to`, never
/// dying or leaving DFA mode (`ok_move`) inside one: explores (UTF-8 phase, state) pairs.
fn reads_utf8(a: &Automata, from: u32, to: u32, ok_move: impl Fn(u32) -> bool) -> bool {
    let next = |st: u32, b: u8| a.next(st, a.byte_class[b as usize] as usize);
    let mut seen = vec![(utf8::BOUNDARY, from)];
    let mut todo = vec![(utf8::BOUNDARY, from)];
    while let Some((p, st)) = todo.pop() {
        for b in 0x80..=0xFFu8 {
            let Some(q) = utf8::step(p, b) else { continue };
            let t = next(st, b);
            if !ok_move(t) || (q == utf8::BOUNDARY && t != to) {
                return false;
            }
            if q != utf8::BOUNDARY && !seen.contains(&(q, t)) {
                seen.push((q, t));
                todo.push((q, t));
            }
        }
    }
    true
}

/// How a DFA-mode walk takes whole subtrees at the positions of a spliced repetition
/// whose copies read one character each (`"\"" [^"]{0,100} "\""`, a JSON string with
/// `maxLength`): each position is its own state with no self-loop, so [`wide_loop`] never
/// applies, yet a token of `n` bytes in the character set read from position `k` only
/// moves to position `k + n` at most. So a subtree made of such bytes is accepted whole
/// where its longest token fits in the positions left.
#[derive(Clone)]
struct ChainSkip {
    /// The [`whole_siblings`](crate::tokenizer::TokenTrie::whole_siblings) bits of the
    /// bytes that move from one position to the next.
    whole: Skip,
    /// The last position a walk reaches without leaving DFA mode.
    lim: u32,
    /// Whether a token of these bytes that does not fit is rejected: the walk reaches
    /// the last position in DFA mode, no position ends the rule or none of these bytes
    /// may follow the rule (so ending early leads nowhere), and the bytes are read as
    /// UTF-8 characters (one position each), so the token's characters say how far it
    /// gets ([`TokenTrie::char_starts`](crate::tokenizer::TokenTrie)).
    counted: bool,
}

impl ChainSkip {
    /// At a position `room` positions before the walk's last one, with `node` the next
    /// child (its parent read along `head`, with `ends[i]` whether the rule could end after
    /// `i` bytes): takes the siblings from `node` on while their subtrees are made of the
    /// chain's bytes — whole when the longest token fits, and with `counted`, token by
    /// token otherwise: accepted when its characters fit, rejected when not (it reaches
    /// the last position, which reads none of them). The node to go on from, if any was
    /// taken.
    #[allow(clippy::too_many_arguments)]
    fn read_siblings(
        &self,
        trie: &TokenTrie,
        room: usize,
        node: &TrieNode,
        head: &[u8],
        ends: &[bool],
        follow: &ByteSet,
        accepted: &mut RankRuns,
        excluded: &mut Vec<(u32, u32)>,
    ) -> Option<usize> {
        let d = head.len();
        // (A token that could leave the rule before the node, onto a byte that may follow
        // it, is the general walk's to classify.)
        let counted = self.counted && !(1..d).any(|i| ends[i] && follow.contains(head[i]));
        // (Characters started: every byte but UTF-8 continuation bytes.)
        let head_chars = if counted { head.iter().filter(|&&b| b & 0xC0 != 0x80).count() as u16 } else { 0 };
        let first = node.sib as usize;
        let mut j = first;
        while self.whole[j / 64] >> (j % 64) & 1 == 1 {
            let (lo, hi) = (trie.sib_rank[j], trie.sib_rank[j + 1]);
            if trie.deepest[trie.sib_node[j] as usize] as usize - d <= room {
                accepted.push((lo, hi));
            } else if counted {
                for r in lo..hi {
                    if (trie.char_starts[r as usize] - head_chars) as usize <= room {
                        accepted.push((r, r + 1));
                    } else {
                        match excluded.last_mut() {
                            Some(last) if last.1 == r => last.1 = r + 1,
                            _ => excluded.push((r, r + 1)),
                        }
                    }
                }
            } else {
                break;
            }
            j += 1;
        }
        (j > first).then(|| trie.sib_node[j] as usize)
    }
}

/// The [`ChainSkip`] of spliced repetition `chain` for an item of origin `origin`, if its
/// character set is wide.
fn chain_skip(a: &Automata, tok: &TokenizerInfo, chain: usize, origin: u32) -> Option<ChainSkip> {
    let l = &a.chains[chain].1;
    if l.max < 2 {
        return None;
    }
    // Positions before `min` never end the rule; those from `min` on all share one shape
    // (the last one less the next copy), so the first that leaves DFA mode bounds them.
    let lim = (1..=l.max).find(|&k| !stays_dfa(a, l.positions + k - 1, origin)).map_or(l.max, |k| k - 1);
    if lim < 2 {
        return None;
    }
    // Every copy reads the same bytes: compare the first two positions.
    let (whole, utf8) = whole_moves(a, tok, l.positions, l.positions + 1, origin)?;
    // Ending early onto one of the chain's characters: never, when no position ends the
    // rule or no character may follow it (a run of characters before a closing quote).
    let follow = &a.follow[a.nodes[l.positions as usize].rule as usize];
    let row = a.row(l.positions);
    let moves = |b: u8| row.get(a.byte_class[b as usize] as usize) != DEAD;
    let follow_free = (0..=255u8).all(|b| !follow.contains(b) || !(moves(b) || (utf8 && b >= 0xC0)));
    // Characters are counted as bytes that start one (`char_starts`): right for UTF-8
    // characters read one position each, and for a chain of ASCII bytes.
    let ascii = (0x80..=0xFFu8).all(|b| !moves(b));
    let counted = (utf8 || ascii)
        && lim == l.max
        && (follow_free || (1..=l.max).all(|k| !a.nodes[(l.positions + k - 1) as usize].is_final));
    Some(ChainSkip { whole, lim, counted })
}

/// Subtree skipping for Earley-mode walks.
///
/// A set `S` reached by byte `p` has kernel `K = scan(prev, p)`. If `scan(S, b) == K`
/// for a byte `b`, the set after `b` has the same kernel, hence the same completions and
/// the same predictions (at the new position), and no predicted item scans `b` (its item
/// would have the new origin, which `K` lacks): it is `S` again. So every string of such
/// bytes keeps the parse alive, and a trie subtree made only of them is accepted whole.
#[derive(Default)]
struct EarleyLoops {
    /// Per depth: what is known of the set there (grown on demand: most walks never
    /// leave DFA mode).
    at: Vec<LoopProbe>,
    /// Loop bytes by kernel, with origins named by their sets' uids: a set's closure (so its
    /// loop bytes) depends only on that, and the same kernel recurs under many trie nodes
    /// (an identifier starting after each of the 128 single-byte tokens, say).
    by_kernel: rustc_hash::FxHashMap<Vec<(u32, u64)>, Loop>,
    moved: Vec<Item>,
}

/// The loop bytes of one Earley set and their skip table (`None`: not a wide set).
type Loop = ([u64; 4], Option<Skip>);

#[derive(Clone, Default)]
struct LoopProbe {
    /// The uid of the set this probe describes.
    uid: u64,
    /// Its kernel, sorted.
    kernel: Vec<Item>,
    /// Its loop bytes, once a child byte has been seen to loop.
    found: Option<Loop>,
}

impl EarleyLoops {
    /// The [`whole_siblings`](crate::tokenizer::TokenTrie::whole_siblings) bits of the loop
    /// bytes of the parser's latest set (at depth `d`, entered by byte `prev`), if they
    /// form a wide set. Looked for only once a child byte `b` is seen to loop (a check as
    /// cheap as the push it may save), then kept for the set's other children.
    fn table(
        &mut self,
        a: &Automata,
        tok: &TokenizerInfo,
        parser: &Earley,
        d: usize,
        prev: u8,
        b: u8,
    ) -> Option<&Skip> {
        let uid = parser.last_uid();
        if self.at.len() <= d {
            self.at.resize(d + 1, LoopProbe { uid: u64::MAX, ..Default::default() });
        }
        let probe = &mut self.at[d];
        if probe.uid != uid {
            let before = parser.previous_set()?;
            scan(a, before, a.byte_class[prev as usize] as usize, &mut probe.kernel);
            probe.uid = uid;
            probe.found = None;
        }
        if probe.found.is_none() {
            let set = parser.last_set();
            scan(a, set, a.byte_class[b as usize] as usize, &mut self.moved);
            if probe.kernel != self.moved {
                return None;
            }
            let key: Vec<(u32, u64)> =
                probe.kernel.iter().map(|i| (i.state, parser.uid_at(i.origin))).collect();
            let moved = &mut self.moved;
            let found = self.by_kernel.entry(key).or_insert_with(|| {
                let mut looping = vec![false; a.n_classes];
                for (c, l) in looping.iter_mut().enumerate() {
                    scan(a, set, c, moved);
                    *l = *moved == probe.kernel;
                }
                let mut bytes = [0u64; 4];
                for b in 0..=255u8 {
                    if looping[a.byte_class[b as usize] as usize] {
                        bytes[b as usize / 64] |= 1 << (b % 64);
                    }
                }
                let wide = bytes.iter().map(|w| w.count_ones()).sum::<u32>() >= WIDE_LOOP;
                (bytes, wide.then(|| tok.trie().whole_siblings(&bytes, false)))
            });
            probe.found = Some(found.clone());
        }
        probe.found.as_ref().and_then(|f| f.1.as_ref())
    }

    /// The loop bytes and table of the set at depth `d`, which must be known (the walk
    /// only goes below the parser along loop bytes).
    fn found(&self, d: usize) -> (&[u64; 4], Option<&Skip>) {
        match self.at.get(d).and_then(|p| p.found.as_ref()) {
            Some((bytes, next)) => (bytes, next.as_ref()),
            None => (&[0; 4], None),
        }
    }

    /// Whether `b` is a known loop byte of the set `uid` at depth `d`.
    fn loops_on(&self, d: usize, uid: u64, b: u8) -> bool {
        let Some(p) = self.at.get(d) else { return false };
        p.uid == uid && p.found.as_ref().is_some_and(|(bytes, _)| contains(bytes, b))
    }

    /// Whether no item of `set` can read `b` (the push would fail).
    fn dies(&self, a: &Automata, set: &[Item], b: u8) -> bool {
        let c = a.byte_class[b as usize] as usize;
        set.iter().all(|it| a.next(it.state, c) == DEAD)
    }

    /// After pushing byte `b` at depth `d` (new set `uid`): if `b` loops on the set at
    /// `d`, the new set is the same set again, with the same kernel and loop bytes.
    fn inherit(&mut self, d: usize, b: u8, uid: u64) {
        let Some(Some((bytes, _))) = self.at.get(d).map(|p| &p.found) else { return };
        if contains(bytes, b) {
            if self.at.len() <= d + 1 {
                self.at.resize(d + 2, LoopProbe { uid: u64::MAX, ..Default::default() });
            }
            let (lo, hi) = self.at.split_at_mut(d + 1);
            hi[0].clone_from(&lo[d]);
            hi[0].uid = uid;
        }
    }
}

/// Whether byte set `set` (bit `b` of word `b / 64`) holds `b`.
#[inline]
fn contains(set: &[u64; 4], b: u8) -> bool {
    set[b as usize / 64] >> (b % 64) & 1 == 1
}

/// The kernel of the set after reading a byte of class `class` from `set`: the moved
/// items, sorted and deduplicated.
fn scan(a: &Automata, set: &[Item], class: usize, out: &mut Vec<Item>) {
    out.clear();
    for it in set {
        let t = a.next(it.state, class);
        if t != DEAD {
            out.push(Item { state: t, origin: it.origin });
        }
    }
    out.sort_unstable_by_key(|i| (i.state, i.origin));
    out.dedup();
}

/// If the parser's latest set is one item, records its state at `dstate[depth]` and returns
/// its origin. So too for a tail-calling state of origin 0 beside the start of its callee,
/// which its prediction added ([`Automata::mark_tail_calls`]): the pair moves as the state
/// alone does in [`dfa_move`].
#[inline]
fn single_item(a: &Automata, parser: &Earley, dstate: &mut [u32], depth: usize) -> Option<u32> {
    match parser.last_set() {
        // (A member set's progress state scans nothing: never a DFA-mode item.)
        [it] if parser.is_automaton_state(it.state) => {
            dstate[depth] = it.state;
            Some(it.origin)
        }
        [x, y] => {
            let tail_pair = |s: &Item, c: &Item| {
                parser.is_automaton_state(s.state)
                    && s.origin == 0
                    && a.nodes[s.state as usize].tail
                    && c.state == a.tail_callee(s.state)
            };
            let s = if tail_pair(x, y) {
                x
            } else if tail_pair(y, x) {
                y
            } else {
                return None;
            };
            dstate[depth] = s.state;
            Some(0)
        }
        _ => None,
    }
}

/// The DFA-mode move of `here` (an item of origin `origin`) on byte class `class`: its
/// own, else, for a tail-calling state of origin 0, its callee's first move. The callee is
/// pure, so the walk stays in DFA mode inside it, and as origin 0 its final states end
/// the walk's rule, as the call's target does.
#[inline]
fn dfa_move(a: &Automata, here: u32, class: usize, origin: u32) -> u32 {
    let t = a.next(here, class);
    if t == DEAD && origin == 0 && a.nodes[here as usize].tail {
        a.next(a.tail_callee(here), class)
    } else {
        t
    }
}
