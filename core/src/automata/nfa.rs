//! Thompson construction: one rule's [`Expr`] to a byte-level NFA whose edges are byte
//! ranges, rule references or epsilon. Characters become UTF-8 byte sequences here
//! (`regex-syntax`'s `Utf8Sequences` splits a code-point range into byte-range chains).

use crate::error::Error;
use crate::grammar::Expr;
use regex_syntax::utf8::Utf8Sequences;

/// An NFA for one rule. State 0 is the start; `end` is the single final state.
#[derive(Debug, Default)]
pub(crate) struct Nfa {
    pub eps: Vec<Vec<u32>>,
    /// `(lo, hi, target)` byte-range edges.
    pub bytes: Vec<Vec<(u8, u8, u32)>>,
    /// `(rule, target)` rule-reference edges.
    pub rules: Vec<Vec<(u32, u32)>>,
    pub end: u32,
}

impl Nfa {
    /// Builds the NFA for `body`, failing once it has more than `max_states` states.
    pub fn build(body: &Expr, max_states: usize) -> Result<Nfa, Error> {
        let mut nfa = Nfa::default();
        let start = nfa.state(max_states)?;
        let end = nfa.expr(body, start, max_states)?;
        nfa.end = end;
        Ok(nfa)
    }

    pub fn len(&self) -> usize {
        self.eps.len()
    }

    fn state(&mut self, max: usize) -> Result<u32, Error> {
        if self.eps.len() >= max {
            return Err(Error::Limit { what: "automaton size (NFA states of one rule)", given: self.eps.len() + 1, limit: max });
        }
        self.eps.push(Vec::new());
        self.bytes.push(Vec::new());
        self.rules.push(Vec::new());
        Ok(self.eps.len() as u32 - 1)
    }

    /// Adds `e` starting at `from`; returns the state where it ends.
    fn expr(&mut self, e: &Expr, from: u32, max: usize) -> Result<u32, Error> {
        Ok(match e {
            Expr::Empty => from,
            Expr::Literal(s) => {
                let mut cur = from;
                for &b in s.as_bytes() {
                    let next = self.state(max)?;
                    self.bytes[cur as usize].push((b, b, next));
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
                            self.bytes[cur as usize].push((r.start, r.end, next));
                            cur = next;
                        }
                    }
                }
                end
            }
            Expr::Rule(r) => {
                let end = self.state(max)?;
                self.rules[from as usize].push((r.0, end));
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
                    self.eps[from as usize].push(s);
                    let e = self.expr(x, s, max)?;
                    self.eps[e as usize].push(end);
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
                        self.eps[cur as usize].push(lp);
                        let s = self.state(max)?;
                        self.eps[lp as usize].push(s);
                        let e = self.expr(expr, s, max)?;
                        self.eps[e as usize].push(lp);
                        let end = self.state(max)?;
                        self.eps[lp as usize].push(end);
                        end
                    }
                    Some(m) => {
                        let end = self.state(max)?;
                        for _ in *min..*m {
                            self.eps[cur as usize].push(end);
                            cur = self.expr(expr, cur, max)?;
                        }
                        self.eps[cur as usize].push(end);
                        end
                    }
                }
            }
        })
    }

    /// Epsilon closure of `set` (sorted, deduplicated).
    pub fn closure(&self, set: &mut Vec<u32>, seen: &mut [bool]) {
        let mut i = 0;
        for &s in set.iter() {
            seen[s as usize] = true;
        }
        while i < set.len() {
            let s = set[i] as usize;
            i += 1;
            for &t in &self.eps[s] {
                if !seen[t as usize] {
                    seen[t as usize] = true;
                    set.push(t);
                }
            }
        }
        for &s in set.iter() {
            seen[s as usize] = false;
        }
        set.sort_unstable();
    }
}
