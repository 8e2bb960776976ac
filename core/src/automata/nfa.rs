//! Thompson construction: one rule's [`Expr`] to a byte-level NFA whose edges are byte
//! ranges, rule references or epsilon. Characters become UTF-8 byte sequences here
//! (`regex-syntax`'s `Utf8Sequences` splits a code-point range into byte-range chains).

use crate::error::Error;
use crate::grammar::Expr;
use regex_syntax::utf8::Utf8Sequences;

/// Edges out of each state in one flat array (compressed sparse rows): state `s`'s edges
/// are `edges[starts[s]..starts[s + 1]]`. Built once from an unsorted edge list, so
/// construction allocates three vectors instead of three per state.
#[derive(Debug, Default)]
pub(crate) struct Csr<T> {
    starts: Vec<u32>,
    edges: Vec<T>,
}

impl<T: Copy> Csr<T> {
    fn build(n: usize, mut list: Vec<(u32, T)>) -> Self {
        list.sort_by_key(|e| e.0);
        let mut starts = vec![0u32; n + 1];
        for &(from, _) in &list {
            starts[from as usize + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        Csr { starts, edges: list.into_iter().map(|e| e.1).collect() }
    }

    #[inline]
    pub fn of(&self, s: u32) -> &[T] {
        &self.edges[self.starts[s as usize] as usize..self.starts[s as usize + 1] as usize]
    }
}

/// An NFA for one rule. State 0 is the start; `end` is the single final state.
#[derive(Debug, Default)]
pub(crate) struct Nfa {
    pub eps: Csr<u32>,
    /// `(lo, hi, target)` byte-range edges.
    pub bytes: Csr<(u8, u8, u32)>,
    /// `(rule, target)` rule-reference edges.
    pub rules: Csr<(u32, u32)>,
    pub end: u32,
    len: usize,
    /// States with a byte or rule edge, and `end`: the only states a DFA state's future
    /// depends on.
    important: Vec<bool>,
}

/// Edge lists while building.
#[derive(Default)]
struct Builder {
    len: usize,
    eps: Vec<(u32, u32)>,
    bytes: Vec<(u32, (u8, u8, u32))>,
    rules: Vec<(u32, (u32, u32))>,
}

impl Nfa {
    /// Builds the NFA for `body`, failing once it has more than `max_states` states.
    pub fn build(body: &Expr, max_states: usize) -> Result<Nfa, Error> {
        let mut b = Builder::default();
        let start = b.state(max_states)?;
        let end = b.expr(body, start, max_states)?;
        let mut important = vec![false; b.len];
        important[end as usize] = true;
        for &(from, _) in &b.bytes {
            important[from as usize] = true;
        }
        for &(from, _) in &b.rules {
            important[from as usize] = true;
        }
        Ok(Nfa {
            eps: Csr::build(b.len, b.eps),
            bytes: Csr::build(b.len, b.bytes),
            rules: Csr::build(b.len, b.rules),
            end,
            len: b.len,
            important,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// No edge enters `path` (states along a path from the start) except from `path`
    /// itself: nothing else can lead back into it. `seen` is all false, and left so.
    pub fn entered_only_along(&self, path: &[u32], seen: &mut [bool]) -> bool {
        for &s in path {
            seen[s as usize] = true;
        }
        let seen_ = &*seen;
        let ok = (0..self.len as u32).filter(|&s| !seen_[s as usize]).all(|s| {
            self.eps.of(s).iter().all(|&t| !seen_[t as usize])
                && self.bytes.of(s).iter().all(|e| !seen_[e.2 as usize])
                && self.rules.of(s).iter().all(|e| !seen_[e.1 as usize])
        });
        for &s in path {
            seen[s as usize] = false;
        }
        ok
    }

    /// Epsilon closure of `set` (sorted, deduplicated), keeping only the states with a byte
    /// or rule edge and the final state. Two subsets that differ only in pass-through
    /// states (the joins and loop heads of the Thompson construction) have the same future,
    /// so the subset construction keys DFA states by what is left: the ends of `(a | b) c`
    /// meet in one DFA state instead of two that minimization would have to merge.
    pub fn closure(&self, set: &mut Vec<u32>, seen: &mut [bool]) {
        let mut i = 0;
        for &s in set.iter() {
            seen[s as usize] = true;
        }
        while i < set.len() {
            let s = set[i];
            i += 1;
            for &t in self.eps.of(s) {
                if !seen[t as usize] {
                    seen[t as usize] = true;
                    set.push(t);
                }
            }
        }
        for &s in set.iter() {
            seen[s as usize] = false;
        }
        set.retain(|&s| self.important[s as usize]);
        set.sort_unstable();
    }
}

impl Builder {
    fn state(&mut self, max: usize) -> Result<u32, Error> {
        if self.len >= max {
            return Err(Error::Limit {
                what: "automaton size (NFA states of one rule)",
                given: self.len + 1,
                limit: max,
            });
        }
        self.len += 1;
        Ok(self.len as u32 - 1)
    }

    /// Adds `e` starting at `from`; returns the state where it ends.
    fn expr(&mut self, e: &Expr, from: u32, max: usize) -> Result<u32, Error> {
        Ok(match e {
            Expr::Empty => from,
            Expr::Literal(s) => {
                let mut cur = from;
                for &b in s.as_bytes() {
                    let next = self.state(max)?;
                    self.bytes.push((cur, (b, b, next)));
                    cur = next;
                }
                cur
            }
            Expr::Class(ranges) => {
                let end = self.state(max)?;
                for &(lo, hi) in ranges {
                    let (Some(lo), Some(hi)) = (char::from_u32(lo), char::from_u32(hi)) else { continue };
                    for seq in Utf8Sequences::new(lo, hi) {
                        let seq = seq.as_slice();
                        let mut cur = from;
                        for (i, r) in seq.iter().enumerate() {
                            let next = if i + 1 == seq.len() { end } else { self.state(max)? };
                            self.bytes.push((cur, (r.start, r.end, next)));
                            cur = next;
                        }
                    }
                }
                end
            }
            Expr::Rule(r) => {
                let end = self.state(max)?;
                self.rules.push((from, (r.0, end)));
                end
            }
            Expr::Seq(v) => {
                let mut cur = from;
                for x in v {
                    cur = self.expr(x, cur, max)?;
                }
                cur
            }
            Expr::Alt(v) => {
                let end = self.state(max)?;
                for x in v {
                    let s = self.state(max)?;
                    self.eps.push((from, s));
                    let e = self.expr(x, s, max)?;
                    self.eps.push((e, end));
                }
                end
            }
            Expr::Repeat { expr, min, max: rep_max } => {
                let mut cur = from;
                for _ in 0..*min {
                    cur = self.expr(expr, cur, max)?;
                }
                match rep_max {
                    None => {
                        // cur -ε-> loop; loop -body-> back -ε-> loop; loop -ε-> end
                        let lp = self.state(max)?;
                        self.eps.push((cur, lp));
                        let s = self.state(max)?;
                        self.eps.push((lp, s));
                        let e = self.expr(expr, s, max)?;
                        self.eps.push((e, lp));
                        let end = self.state(max)?;
                        self.eps.push((lp, end));
                        end
                    }
                    Some(m) => {
                        let end = self.state(max)?;
                        for _ in *min..*m {
                            self.eps.push((cur, end));
                            cur = self.expr(expr, cur, max)?;
                        }
                        self.eps.push((cur, end));
                        end
                    }
                }
            }
        })
    }
}
