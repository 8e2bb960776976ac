//! Speculative decoding: validating proposed tokens, and the masks of draft chains and
//! draft trees, all leaving the constraint's state as it found it.
//!
//! A verifier (the target model checking a draft model's, an n-gram lookup's or an MTP
//! head's proposals) needs, in one forward pass, the mask for *every* position a draft
//! reaches: row `i` of a chain is the mask after its first `i` tokens; a tree's row for
//! node `v` is the mask after the tokens on the path from the root to `v`. Everything
//! here is written against [`LogitsConstraint`] (accept, fill, rollback), so it serves
//! every constraint, and walks depth-first: a prefix that several branches share is
//! parsed once, each branch then rolled back.
//!
//! A token the grammar rejects gets an all-zero row, and so does everything after it (a
//! chain's later rows, a tree node's subtree): no continuation of an invalid prefix is
//! valid. The caller learns where the draft broke from [`ChainFill`] / [`TreeFill`].

use crate::bitmask::TokenBitmask;
use crate::error::{Error, Result};
use crate::LogitsConstraint;

/// Most nodes a [`DraftTree`] may have (EAGLE-style trees use tens to hundreds).
pub const MAX_DRAFT_TREE_NODES: usize = 1 << 14;

/// What filling a draft chain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainFill {
    /// How many leading tokens of the chain the grammar accepts (the chain's length when
    /// it accepts all of them). Rows `accepted + 1 ..= k` are all zero.
    pub accepted: usize,
}

/// What filling a draft tree found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeFill {
    /// Nodes whose own token the grammar rejects after their parent's path, ascending.
    /// Their rows and every row of their subtrees are all zero.
    pub rejected: Vec<usize>,
    /// Nodes below a rejected node (never parsed; all-zero rows).
    pub skipped: usize,
}

/// A token tree proposed by a draft model, validated: node 0 is the root (the current
/// state; its token is ignored), every other node has one parent and a token.
///
/// Build it from parent links ([`Self::from_parents`]) or from XGrammar's first-child /
/// next-sibling layout ([`Self::from_xgrammar`]); both check for cycles, out-of-range
/// indices and size before anything is parsed.
///
/// ```
/// use grammask::matcher::DraftTree;
/// //        root
/// //       /    \
/// //   1:"t"    2:"f"
/// //     |
/// //  3:"rue"
/// let tree = DraftTree::from_parents(&[-1, 10, 11, 12], &[-1, 0, 0, 1])?;
/// assert_eq!(tree.len(), 4);
/// assert_eq!(tree.parent(3), Some(1));
/// // The same tree in XGrammar's layout: first child and next sibling per node.
/// let x = DraftTree::from_xgrammar(&[-1, 10, 11, 12], &[1, 3, -1, -1], &[-1, 2, -1, -1])?;
/// assert_eq!(x, tree);
/// # Ok::<(), grammask::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftTree {
    /// Per node, its token (`0` for the root, never read).
    tokens: Vec<u32>,
    /// Per node, its parent (`NONE` for the root).
    parent: Vec<u32>,
    /// Per node, its first child and its next sibling (`NONE` if none), children in
    /// ascending node order: the walk's order.
    first_child: Vec<u32>,
    next_sibling: Vec<u32>,
}

const NONE: u32 = u32::MAX;

fn tree_error(node: usize, why: impl Into<String>) -> Error {
    Error::DraftTree { node, why: why.into() }
}

/// A node index from an `i64`/`i32` slot: `-1` is none.
fn link(v: i64, n: usize, node: usize, what: &str) -> Result<Option<u32>> {
    match v {
        -1 => Ok(None),
        v if v >= 0 && (v as u64) < n as u64 => Ok(Some(v as u32)),
        v => Err(tree_error(node, format!("{what} {v} is out of range (the tree has {n} nodes)"))),
    }
}

fn token_of(v: i64, node: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| tree_error(node, format!("token {v} is not a token id")))
}

impl DraftTree {
    /// A tree from each node's token and parent; node 0 is the root with parent `-1`
    /// (its token is ignored), every other node's parent is another node. Typed errors:
    /// size over [`MAX_DRAFT_TREE_NODES`], lengths that differ, a parent out of range,
    /// a second root, a cycle, a negative token.
    pub fn from_parents(tokens: &[i64], parents: &[i64]) -> Result<Self> {
        let n = tokens.len();
        Self::check_size(n, parents.len(), "parents")?;
        if parents[0] != -1 {
            return Err(tree_error(0, "node 0 is the root: its parent must be -1"));
        }
        let mut parent = vec![NONE; n];
        let mut toks = vec![0u32; n];
        for v in 1..n {
            toks[v] = token_of(tokens[v], v)?;
            parent[v] = link(parents[v], n, v, "parent")?
                .ok_or_else(|| tree_error(v, "only node 0 may have no parent"))?;
        }
        // Every node must reach the root: walk up, marking; meeting a node of the
        // current walk again is a cycle. Each node is walked once: O(n).
        let mut mark = vec![0u8; n]; // 0 new, 1 on the current path, 2 reaches the root
        mark[0] = 2;
        let mut path = Vec::new();
        for v in 1..n {
            let mut u = v;
            while mark[u] == 0 {
                mark[u] = 1;
                path.push(u);
                u = parent[u] as usize;
            }
            if mark[u] == 1 {
                return Err(tree_error(u, "the parent links form a cycle"));
            }
            path.drain(..).for_each(|w| mark[w] = 2);
        }
        Ok(Self::with_links(toks, parent))
    }

    /// A tree in XGrammar's layout (`traverse_draft_tree`): `draft_tokens[i]` is node
    /// `i`'s token, `retrieve_next_token[i]` its first child and
    /// `retrieve_next_sibling[i]` its next sibling, `-1` for none; node 0 is the root.
    /// Every node must be reached from the root exactly once.
    pub fn from_xgrammar(
        draft_tokens: &[i64],
        retrieve_next_token: &[i64],
        retrieve_next_sibling: &[i64],
    ) -> Result<Self> {
        let n = draft_tokens.len();
        Self::check_size(n, retrieve_next_token.len(), "retrieve_next_token")?;
        Self::check_size(n, retrieve_next_sibling.len(), "retrieve_next_sibling")?;
        if retrieve_next_sibling[0] != -1 {
            return Err(tree_error(0, "the root has no siblings: retrieve_next_sibling[0] must be -1"));
        }
        let mut parent = vec![NONE; n];
        let mut seen = vec![false; n];
        seen[0] = true;
        let mut stack = vec![0usize];
        while let Some(v) = stack.pop() {
            let mut c = link(retrieve_next_token[v], n, v, "retrieve_next_token")?;
            while let Some(child) = c {
                let child = child as usize;
                if seen[child] {
                    return Err(tree_error(child, "reached twice from the root (a cycle or shared node)"));
                }
                seen[child] = true;
                parent[child] = v as u32;
                stack.push(child);
                c = link(retrieve_next_sibling[child], n, child, "retrieve_next_sibling")?;
            }
        }
        if let Some(v) = seen.iter().position(|&s| !s) {
            return Err(tree_error(v, "not reachable from the root"));
        }
        let mut toks = vec![0u32; n];
        for v in 1..n {
            toks[v] = token_of(draft_tokens[v], v)?;
        }
        Ok(Self::with_links(toks, parent))
    }

    fn check_size(n: usize, other: usize, what: &str) -> Result<()> {
        if n == 0 {
            return Err(tree_error(0, "a tree has at least its root"));
        }
        if n > MAX_DRAFT_TREE_NODES {
            return Err(Error::Limit { what: "draft tree nodes", given: n, limit: MAX_DRAFT_TREE_NODES });
        }
        if other != n {
            return Err(tree_error(0, format!("{what} has {other} entries for {n} nodes")));
        }
        Ok(())
    }

    fn with_links(tokens: Vec<u32>, parent: Vec<u32>) -> Self {
        let n = tokens.len();
        let (mut first_child, mut next_sibling) = (vec![NONE; n], vec![NONE; n]);
        // Children pushed in descending order end up ascending.
        for v in (1..n).rev() {
            let p = parent[v] as usize;
            next_sibling[v] = first_child[p];
            first_child[p] = v as u32;
        }
        Self { tokens, parent, first_child, next_sibling }
    }

    /// Number of nodes, the root included (one mask row each).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Always false: a tree has at least its root.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Node `v`'s token (`None` for the root).
    pub fn token(&self, v: usize) -> Option<u32> {
        (v != 0).then(|| self.tokens[v])
    }

    /// Node `v`'s parent (`None` for the root).
    pub fn parent(&self, v: usize) -> Option<usize> {
        self.parent.get(v).filter(|&&p| p != NONE).map(|&p| p as usize)
    }

    /// Node `v`'s children, ascending.
    pub fn children(&self, v: usize) -> impl Iterator<Item = usize> + '_ {
        let mut c = self.first_child[v];
        std::iter::from_fn(move || {
            (c != NONE).then(|| {
                let out = c as usize;
                c = self.next_sibling[out];
                out
            })
        })
    }
}

/// Checks that `mask` has rows `first..first + n` for `vocab`.
fn check_rows(mask: &TokenBitmask, first: usize, n: usize, vocab: usize) -> Result<()> {
    if mask.vocab_size() != vocab {
        return Err(Error::Shape(format!(
            "the bitmask covers {} tokens; the constraint's vocabulary has {vocab}",
            mask.vocab_size()
        )));
    }
    if first.checked_add(n).map_or(true, |end| end > mask.rows()) {
        return Err(Error::Shape(format!(
            "rows {first}..{first}+{n} do not fit a bitmask of {} rows",
            mask.rows()
        )));
    }
    Ok(())
}

fn check_ids(ids: impl IntoIterator<Item = u32>, vocab: usize) -> Result<()> {
    match ids.into_iter().find(|&id| id as usize >= vocab) {
        Some(id) => Err(Error::InvalidTokenId { id, vocab_size: vocab }),
        None => Ok(()),
    }
}

/// How many leading ids of `ids` the constraint accepts; its state is unchanged.
pub(crate) fn validate_tokens<C: LogitsConstraint + ?Sized>(c: &mut C, ids: &[u32]) -> usize {
    let n = ids.iter().take_while(|&&id| c.accept_token(id).is_ok()).count();
    // Undoing what was just accepted cannot fail.
    let _ = c.rollback(n);
    n
}

/// Accepts all of `ids` or none of them.
pub(crate) fn accept_tokens<C: LogitsConstraint + ?Sized>(c: &mut C, ids: &[u32]) -> Result<()> {
    for (i, &id) in ids.iter().enumerate() {
        if let Err(e) = c.accept_token(id) {
            let _ = c.rollback(i);
            return Err(match e {
                Error::TokenRejected { .. } | Error::Terminated => Error::TokensRejected { index: i, id },
                other => other,
            });
        }
    }
    Ok(())
}

/// Rows `first..=first + chain.len()` of `mask`: row `first + i` is the mask after the
/// chain's first `i` tokens.
pub(crate) fn fill_draft_chain<C: LogitsConstraint + ?Sized>(
    c: &mut C,
    chain: &[u32],
    mask: &mut TokenBitmask,
    first: usize,
) -> Result<ChainFill> {
    check_rows(mask, first, chain.len() + 1, c.vocab_size())?;
    check_ids(chain.iter().copied(), c.vocab_size())?;
    let mut accepted = 0;
    let mut result = c.fill_next_token_bitmask(mask.row_mut(first)).map(|_| ());
    for (i, &id) in chain.iter().enumerate() {
        // Once a token is rejected (or a fill failed) nothing after it is parsed.
        if accepted < i || result.is_err() || c.accept_token(id).is_err() {
            mask.row_mut(first + i + 1).fill(0);
            continue;
        }
        accepted += 1;
        result = c.fill_next_token_bitmask(mask.row_mut(first + i + 1)).map(|_| ());
    }
    c.rollback(accepted)?;
    result.map(|()| ChainFill { accepted })
}

/// One row per node of `tree`, at `first + node`: the mask after the node's path.
pub(crate) fn fill_draft_tree<C: LogitsConstraint + ?Sized>(
    c: &mut C,
    tree: &DraftTree,
    mask: &mut TokenBitmask,
    first: usize,
) -> Result<TreeFill> {
    check_rows(mask, first, tree.len(), c.vocab_size())?;
    check_ids(tree.tokens[1..].iter().copied(), c.vocab_size())?;
    let mut out = TreeFill::default();
    c.fill_next_token_bitmask(mask.row_mut(first))?;
    // Depth-first with an explicit stack (no recursion on hostile depths): `(node,
    // next child to try)`; the constraint's state is always the path to the top node.
    let mut stack: Vec<(usize, u32)> = vec![(0, tree.first_child[0])];
    let mut failed = None;
    while let Some(top) = stack.last_mut() {
        let child = top.1;
        if child == NONE {
            stack.pop();
            if !stack.is_empty() {
                c.rollback(1)?;
            }
            continue;
        }
        top.1 = tree.next_sibling[child as usize];
        let v = child as usize;
        if c.accept_token(tree.tokens[v]).is_err() {
            out.rejected.push(v);
            out.skipped += zero_subtree(tree, v, mask, first) - 1;
            continue;
        }
        if let Err(e) = c.fill_next_token_bitmask(mask.row_mut(first + v)) {
            failed = Some(e);
            c.rollback(stack.len())?;
            break;
        }
        stack.push((v, tree.first_child[v]));
    }
    if let Some(e) = failed {
        return Err(e);
    }
    out.rejected.sort_unstable();
    Ok(out)
}

/// Zeroes the rows of `v`'s subtree; returns its size.
fn zero_subtree(tree: &DraftTree, v: usize, mask: &mut TokenBitmask, first: usize) -> usize {
    let mut todo = vec![v];
    let mut n = 0;
    while let Some(u) = todo.pop() {
        mask.row_mut(first + u).fill(0);
        n += 1;
        todo.extend(tree.children(u));
    }
    n
}
