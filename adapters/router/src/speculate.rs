//! Drafters for speculative decoding: where a row's next tokens are guessed before the
//! model has seen them, as a tree the next forward verifies ([`crate::model::ForwardRow::draft`]).
//!
//! Two sources, and their union:
//!
//! - **grammar**: where the grammar leaves few legal continuations (an object key of a
//!   schema, an enum value, `true`/`false`/`null`, a tag's begin string), the likeliest
//!   looking of them become children. Below any node after which the grammar forces text
//!   (jump-forward, when on), the forced tokens follow as a chain of *forced* nodes: the
//!   tree goes on past them, and they are taken without a draw, as jump-forward would
//!   append them.
//! - **n-gram**: prompt lookup — the longest recent suffix of the sequence seen earlier in
//!   it (prompt or output) proposes what followed it then (TGI's `--speculate` n-gram
//!   mode, vLLM's `ngram`). On a constrained row each proposal is kept only if the grammar
//!   accepts it.
//! - **both**: grammar alternatives where there are few, the n-gram guess elsewhere.
//!
//! A drafter only proposes; what is accepted is decided by drawing from the model's
//! masked distribution at each node (see `docs/speculative.md`), so a bad draft costs
//! forward time, never a wrong token.

use crate::step::DraftGrammar;
use grammask::matcher::DraftTree;

/// A proposed tree, and which of its nodes are forced (the grammar's jump-forward tokens
/// after their parent: taken without a draw).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    /// The tree (node 0: the row's last token).
    pub tree: DraftTree,
    /// Per node, whether it is forced (node 0: `false`). A forced node is its parent's
    /// only child.
    pub forced: Vec<bool>,
}

impl Draft {
    /// A draft whose nodes are all drawn.
    pub fn drawn(tree: DraftTree) -> Self {
        let forced = vec![false; tree.len()];
        Self { tree, forced }
    }

    /// The draft cut to at most `max_nodes` nodes: the first in node order whose parent
    /// is kept (the built-in drafters number nodes in the order they draft them, checking
    /// their node budget before each, so these are the ones a smaller budget would have
    /// drafted); `None` when none is left.
    pub fn pruned(self, max_nodes: usize) -> Option<Draft> {
        let n = self.tree.len();
        if n.saturating_sub(1) <= max_nodes {
            return (n > 1).then_some(self);
        }
        let mut new_id = vec![usize::MAX; n];
        new_id[0] = 0;
        let (mut tokens, mut parents, mut forced) = (vec![-1i64], vec![-1i64], vec![false]);
        for v in 1..n {
            if tokens.len() > max_nodes {
                break;
            }
            let (Some(t), Some(p)) = (self.tree.token(v), self.tree.parent(v)) else { continue };
            if new_id[p] == usize::MAX {
                continue;
            }
            new_id[v] = tokens.len();
            tokens.push(i64::from(t));
            parents.push(new_id[p] as i64);
            forced.push(self.forced.get(v).copied().unwrap_or(false));
        }
        if tokens.len() < 2 {
            return None;
        }
        let tree = DraftTree::from_parents(&tokens, &parents).ok()?;
        Some(Draft { tree, forced })
    }
}

/// Which drafter proposes a row's tree (`--drafter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DrafterKind {
    /// The grammar's few legal continuations (constrained rows only).
    Grammar,
    /// Prompt lookup over the prompt and the output so far.
    Ngram,
    /// Grammar alternatives where there are few, the n-gram guess elsewhere.
    #[default]
    Both,
}

impl DrafterKind {
    /// The name used by `--drafter` and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            DrafterKind::Grammar => "grammar",
            DrafterKind::Ngram => "ngram",
            DrafterKind::Both => "both",
        }
    }
}

impl std::str::FromStr for DrafterKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "grammar" => Ok(DrafterKind::Grammar),
            "ngram" => Ok(DrafterKind::Ngram),
            "both" => Ok(DrafterKind::Both),
            _ => Err(format!("unknown drafter `{s}` (grammar, ngram or both)")),
        }
    }
}

/// [`SpeculationOptions::max_slowdown`]'s default: rows that do not draft keep 0.98× their
/// rate.
pub const DEFAULT_MAX_SLOWDOWN: f64 = 0.02;

/// Reads `--speculate-max-slowdown`: a fraction in `[0, 1)`, or `none` (no cap).
///
/// ```
/// use grammask_router::speculate::parse_max_slowdown;
/// assert_eq!(parse_max_slowdown("0.02"), Ok(Some(0.02)));
/// assert_eq!(parse_max_slowdown("none"), Ok(None));
/// assert!(parse_max_slowdown("1.5").is_err());
/// ```
pub fn parse_max_slowdown(s: &str) -> Result<Option<f64>, String> {
    if s == "none" {
        return Ok(None);
    }
    match s.parse::<f64>() {
        Ok(f) if (0.0..1.0).contains(&f) => Ok(Some(f)),
        _ => Err(format!("`{s}` is not a fraction in [0, 1) or `none`")),
    }
}

/// Speculative decoding's settings (`--speculate`, `--draft-width`, `--drafter`,
/// `--speculate-max-slowdown`).
#[derive(Debug, Clone, PartialEq)]
pub struct SpeculationOptions {
    /// Most draft tokens on a path (the tree's depth; TGI's `--speculate N`).
    pub depth: usize,
    /// Most legal continuations a grammar node may have to be drafted as siblings.
    pub width: usize,
    /// Most draft nodes per row.
    pub max_nodes: usize,
    /// Who proposes.
    pub drafter: DrafterKind,
    /// Stop drafting for a row while its drafts do not pay (measured acceptance against
    /// the measured forward cost of a node), probing with a small draft after a few steps
    /// and ever more rarely while it keeps not paying; `false`: always draft (to measure,
    /// or to test exactness under heavy drafting).
    pub backoff: bool,
    /// With `backoff`: the most that other rows' drafts may slow a row in the steps it
    /// has no draft of its own, as a fraction of its rate without them (`0.02`: at least
    /// 0.98×, counting the steps its own accepted drafts saved it). Every row waits for the
    /// whole step, so a verify's nodes and the drafting before it cost the rows beside it
    /// that gain nothing from them. Each row keeps a ledger — an allowance of
    /// `max_slowdown / (1 − max_slowdown)` of each of its decode steps, plus the steps its
    /// own accepted drafts saved, less what other rows' nodes (the fitted cost of a row)
    /// and drafting cost it in steps it had no draft; within 8 steps' time either way, a
    /// debt paid before new room — and a step caps its drafting at the least ledger of its
    /// decode rows and verifies only the nodes the least ledger of the rows without a draft
    /// pays for, probes first, then the best measured acceptance. `None`: no such limit
    /// (drafts are kept wherever they pay for the batch as a whole). Ignored with `backoff`
    /// off.
    pub max_slowdown: Option<f64>,
}

impl SpeculationOptions {
    /// `depth` tokens deep, `width` siblings, the given drafter; at most
    /// `depth × width` nodes (and 64).
    pub fn new(depth: usize, width: usize, drafter: DrafterKind) -> Self {
        Self {
            depth,
            width,
            max_nodes: (depth * width.max(1)).clamp(1, 64),
            drafter,
            backoff: true,
            max_slowdown: Some(DEFAULT_MAX_SLOWDOWN),
        }
    }
}

/// What a drafter sees of a row.
#[derive(Debug, Clone, Copy)]
pub struct DraftContext<'a> {
    /// The sequence so far: prompt, then every token generated and forced (the last one
    /// is the token the draft follows).
    pub history: &'a [u32],
    /// Tokens that end a sequence: never expanded further.
    pub stop_tokens: &'a [u32],
    /// When drafting must stop (the step's drafting budget): the tree so far is proposed.
    pub deadline: Option<std::time::Instant>,
}

/// Proposes a row's draft tree. An engine can plug in its own (a draft model, an MTP
/// head); the proposals must be deterministic (a token per node, siblings distinct):
/// acceptance draws from the target distribution and follows the matching child, which
/// is exact for such drafts (a drafter with its own probabilities would need the
/// residual rule of multi-candidate rejection sampling instead).
pub trait Drafter: Send + Sync {
    /// Its name in metrics.
    fn name(&self) -> &'static str;

    /// The tree for a row (`None` or a root alone: no draft). `grammar` is the row's
    /// grammar when it is constrained.
    fn draft(
        &self,
        ctx: &DraftContext<'_>,
        grammar: Option<&mut DraftGrammar<'_>>,
        options: &SpeculationOptions,
    ) -> Option<Draft>;
}

/// The built-in drafters ([`DrafterKind`]).
#[derive(Debug, Clone, Copy)]
pub struct BuiltinDrafter(pub DrafterKind);

/// Longest suffix tried by the n-gram lookup.
const NGRAM_MAX: usize = 4;
/// How far back the lookup searches (recent text repeats most).
const NGRAM_WINDOW: usize = 4096;

/// The token that followed the most recent earlier occurrence of the longest suffix of
/// `seq` (of at most 4 tokens) within the last 4,096 tokens.
pub fn ngram_next(seq: &[u32]) -> Option<u32> {
    let n = seq.len();
    let lo = n.saturating_sub(NGRAM_WINDOW);
    for k in (1..=NGRAM_MAX.min(n.saturating_sub(1))).rev() {
        let suffix = &seq[n - k..];
        // Occurrences ending before the suffix itself, latest first.
        let found = (lo..n - k).rev().find(|&s| &seq[s..s + k] == suffix);
        if let Some(s) = found {
            return Some(seq[s + k]);
        }
    }
    None
}

impl Drafter for BuiltinDrafter {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn draft(
        &self,
        ctx: &DraftContext<'_>,
        mut grammar: Option<&mut DraftGrammar<'_>>,
        options: &SpeculationOptions,
    ) -> Option<Draft> {
        let use_grammar = matches!(self.0, DrafterKind::Grammar | DrafterKind::Both);
        let use_ngram = matches!(self.0, DrafterKind::Ngram | DrafterKind::Both);
        if options.depth == 0 || (!use_ngram && grammar.is_none()) {
            return None;
        }
        let (mut tokens, mut parents, mut forced) = (vec![-1i64], vec![-1i64], vec![false]);
        // Breadth first, so that a node budget keeps the shallow nodes (the likelier).
        let mut frontier: Vec<(usize, Vec<u32>)> = vec![(0, Vec::new())];
        let mut seq = ctx.history.to_vec();
        'levels: for _ in 0..options.depth {
            let mut next = Vec::new();
            for (v, path) in frontier {
                if ctx.deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    break 'levels;
                }
                let mut children = None;
                if use_grammar {
                    if let Some(g) = grammar.as_deref_mut() {
                        children = g.alternatives(&path, options.width);
                    }
                }
                if children.is_none() && use_ngram {
                    seq.truncate(ctx.history.len());
                    seq.extend_from_slice(&path);
                    let guess = ngram_next(&seq).filter(|&t| {
                        let mut chain = path.clone();
                        chain.push(t);
                        match grammar.as_deref_mut() {
                            Some(g) => g.validate(&chain) == chain.len(),
                            None => true,
                        }
                    });
                    children = guess.map(|t| vec![t]);
                }
                for t in children.unwrap_or_default() {
                    if tokens.len() > options.max_nodes {
                        break 'levels;
                    }
                    tokens.push(i64::from(t));
                    parents.push(v as i64);
                    forced.push(false);
                    if ctx.stop_tokens.contains(&t) {
                        continue;
                    }
                    let mut p = path.clone();
                    p.push(t);
                    // What the grammar forces after it follows as forced nodes (within the
                    // budget: a chain cut short is taken as far as it goes).
                    let mut last = tokens.len() - 1;
                    if let Some(g) = grammar.as_deref_mut() {
                        for f in g.forced_after(&p) {
                            if tokens.len() > options.max_nodes {
                                break;
                            }
                            tokens.push(i64::from(f));
                            parents.push(last as i64);
                            forced.push(true);
                            last = tokens.len() - 1;
                            p.push(f);
                        }
                    }
                    next.push((last, p));
                }
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        if tokens.len() < 2 {
            return None;
        }
        let tree = DraftTree::from_parents(&tokens, &parents).ok()?;
        Some(Draft { tree, forced })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pruned_draft_keeps_the_first_nodes_whose_parents_it_keeps() {
        // Node order 1..: 1 and 2 under the root, 3 (forced) under 1, 4 under 2, 5 under 3.
        let tree = DraftTree::from_parents(&[-1, 10, 20, 11, 21, 12], &[-1, 0, 0, 1, 2, 3]).unwrap();
        let draft = Draft { tree, forced: vec![false, false, false, true, false, false] };
        let cut = draft.clone().pruned(3).unwrap();
        assert_eq!(cut.tree.len(), 4);
        assert_eq!((1..4).map(|v| cut.tree.token(v).unwrap()).collect::<Vec<_>>(), [10, 20, 11]);
        assert_eq!((1..4).map(|v| cut.tree.parent(v).unwrap()).collect::<Vec<_>>(), [0, 0, 1]);
        assert_eq!(cut.forced, [false, false, false, true]);
        assert_eq!(draft.clone().pruned(5).unwrap().tree.len(), 6);
        assert!(draft.pruned(0).is_none());
        // A node whose parent comes later in node order is left out with its subtree.
        let tree = DraftTree::from_parents(&[-1, 30, 31, 32], &[-1, 2, 0, 1]).unwrap();
        let cut = Draft::drawn(tree).pruned(2).unwrap();
        assert_eq!((1..cut.tree.len()).map(|v| cut.tree.token(v).unwrap()).collect::<Vec<_>>(), [31]);
    }

    #[test]
    fn ngram_lookup_takes_the_longest_recent_match() {
        // "1 2 3 9 … 1 2 3" → 9 (the 3-gram), not what followed a later "3" alone.
        assert_eq!(ngram_next(&[1, 2, 3, 9, 5, 3, 7, 1, 2, 3]), Some(9));
        // The latest occurrence wins among equals.
        assert_eq!(ngram_next(&[4, 1, 4, 2, 4]), Some(2));
        assert_eq!(ngram_next(&[1, 2, 3]), None);
        assert_eq!(ngram_next(&[]), None);
    }

    #[test]
    fn an_ngram_chain_follows_the_history_and_stops_at_a_stop_token() {
        let d = BuiltinDrafter(DrafterKind::Ngram);
        let opts = SpeculationOptions::new(4, 1, DrafterKind::Ngram);
        let history = [5, 6, 7, 8, 0, 9, 5, 6];
        let tree = d
            .draft(&DraftContext { history: &history, stop_tokens: &[0], deadline: None }, None, &opts)
            .unwrap()
            .tree;
        // 7, 8, then the stop token 0, not expanded.
        assert_eq!((1..tree.len()).map(|v| tree.token(v).unwrap()).collect::<Vec<_>>(), [7, 8, 0]);
        assert_eq!(tree.parent(3), Some(2));
        // The grammar drafter has nothing to say on an unconstrained row.
        let g = BuiltinDrafter(DrafterKind::Grammar);
        assert!(g
            .draft(&DraftContext { history: &history, stop_tokens: &[0], deadline: None }, None, &opts)
            .is_none());
    }
}
