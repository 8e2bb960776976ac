//! A staged compile: the first masks from a shell, the finished grammar built after.
//!
//! Most of a tool-calling tag's compile goes into its tools' argument schemas (their
//! rules, automata and the IR passes over them: ~60 % with 20 tools, BENCHMARKS.md), yet
//! the first mask — free text before any trigger — and every mask until the model is
//! inside a call depend on none of it. So a tag with many argument schemas is compiled
//! twice: first a *shell*, the same grammar with a stand-in rule
//! ([`crate::grammar::Rule::stand_in`]) where each schema's grammar goes, which the
//! compile returns; then, on a thread of its own, the finished grammar, exactly what an
//! unstaged compile builds. A matcher runs on the shell while the finished grammar is
//! being built, and moves to it (replaying the bytes it accepted) as soon as it is ready
//! or as soon as the shell could answer differently.
//!
//! When can it? The shell and the finished grammar differ only inside the stand-ins, so
//! a parse that never predicted one is the same parse in both, byte for byte. The parser
//! flags every prediction of a stand-in ([`crate::matcher::earley`]), including those the
//! mask walks make (a mask that predicted one is marked,
//! [`super::mask::StateMask::stand_in`]). Two places do not predict but could still
//! read past a rule's end into a stand-in: a tail call (never made into a stand-in) and
//! a continuation (a stand-in is never one). And the walks' run-time split of tokens
//! that end their rule (rejected when the next byte cannot follow the rule) reads the
//! rule's FOLLOW set: a stand-in reads any character, so the shell's FOLLOW sets hold
//! the finished grammar's, and the shell leaves to the run-time check — where the parser
//! flags the stand-in — every token the finished grammar does.

use super::{CompiledGrammar, Slot};
use crate::automata::DEAD;
use crate::error::{Error, Result};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

/// What builds the finished grammar, given the shell (while it is alive).
type Job = Box<dyn FnOnce(Option<Arc<CompiledGrammar>>) -> Result<Arc<CompiledGrammar>> + Send>;

/// The finished grammar of a staged compile: built by a thread of its own, or by the
/// first matcher that needs it before that thread has started.
pub(crate) struct Finishing {
    job: Mutex<Option<Job>>,
    shell: OnceLock<Weak<CompiledGrammar>>,
    /// `None`: the build panicked.
    done: OnceLock<Option<std::result::Result<Arc<CompiledGrammar>, Arc<Error>>>>,
    lock: Mutex<()>,
    ready: Condvar,
}

impl std::fmt::Debug for Finishing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finishing").field("done", &self.done.get().is_some()).finish()
    }
}

impl Finishing {
    /// A finished grammar `job` builds; call [`Finishing::start`] to build it.
    pub fn new(job: Job) -> Arc<Self> {
        Arc::new(Self {
            job: Mutex::new(Some(job)),
            shell: OnceLock::new(),
            done: OnceLock::new(),
            lock: Mutex::new(()),
            ready: Condvar::new(),
        })
    }

    /// Ties the job to its shell and (`workers`) builds the grammar in the background;
    /// if they refuse the job (their queue is full), here and now. Without workers the
    /// first matcher that needs the grammar builds it.
    pub(super) fn start(self: &Arc<Self>, shell: &Arc<CompiledGrammar>, workers: Option<&super::Workers>) {
        let _ = self.shell.set(Arc::downgrade(shell));
        if let Some(w) = workers {
            let me = self.clone();
            if !w.spawn("grammask-finish", move || me.run()) {
                self.run();
            }
        }
    }

    /// Runs the job unless someone did.
    fn run(&self) {
        let job = self.job.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(job) = job {
            let shell = self.shell.get().and_then(Weak::upgrade);
            if shell.is_none() && self.shell.get().is_some() {
                // The shell is gone, and with it every matcher that could need the job.
                return;
            }
            // A build that panicked must still wake its waiters (who then panic too, as
            // an unstaged compile would have in the caller's thread).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || job(shell)));
            let _ = self.done.set(r.ok().map(|r| r.map_err(Arc::new)));
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.ready.notify_all();
        }
    }

    /// The finished grammar, if built.
    pub fn get(&self) -> Option<Result<Arc<CompiledGrammar>>> {
        self.done.get().map(Self::answer)
    }

    /// The finished grammar, waiting for it (or building it here if its thread has not
    /// started yet).
    pub fn wait(&self) -> Result<Arc<CompiledGrammar>> {
        if let Some(r) = self.done.get() {
            return Self::answer(r);
        }
        self.run();
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = self.done.get() {
                return Self::answer(r);
            }
            guard = self.ready.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn answer(
        r: &Option<std::result::Result<Arc<CompiledGrammar>, Arc<Error>>>,
    ) -> Result<Arc<CompiledGrammar>> {
        match r {
            Some(r) => r.clone().map_err(Error::Staged),
            None => panic!("building the finished grammar of a staged compile panicked"),
        }
    }
}

/// Time a staged compile's thread spends on the shell's masks before it builds the
/// finished grammar, with `background_precompute` (a few vocabulary walks).
pub(crate) const SHELL_PRECOMPUTE_BUDGET: std::time::Duration = std::time::Duration::from_millis(1);

/// Computes the masks of the shell's root states, nearest to the start first, until
/// `budget` has passed (a walk that would overrun it is abandoned): the free text that
/// matchers write while the finished grammar is built, whose masks it then takes
/// ([`adopt_masks`]). On the thread that builds the finished grammar, before it: a thread
/// of its own beside that build oversubscribed two cores, and a matcher waiting on a
/// mask that a descheduled thread was computing waited milliseconds.
pub(crate) fn precompute_root(shell: &CompiledGrammar, budget: std::time::Duration) {
    let deadline = std::time::Instant::now() + budget;
    let a = &shell.automata;
    let (lo, hi) = a.rule_range(a.grammar().root.index() as u32);
    shell.for_nearest_states(|s| {
        if !(lo..hi).contains(&s) || shell.masks[s as usize].get().is_some() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        if let Some(m) = shell.compute_mask(s, Some(deadline)) {
            let _ = shell.masks[s as usize].set(m);
        }
        true
    });
}

/// Gives `full` the masks `shell` computed for the states of its root rule that its
/// walks found far from any stand-in: the matchers that move to `full` are at those
/// positions (free text, where the shell served them), and would otherwise walk the
/// vocabulary again for each. A root state's mask depends only on what can follow it
/// (nothing follows the root), so the shell's state and the finished grammar's state
/// reached by the same bytes have the same mask when the shell's walk predicted no
/// stand-in. The pairs are found by walking both root automata side by side.
pub(crate) fn adopt_masks(full: &CompiledGrammar, shell: &CompiledGrammar) {
    let (a, b) = (&shell.automata, &full.automata);
    let (ra, rb) = (a.grammar().root.index() as u32, b.grammar().root.index() as u32);
    let ((lo, hi), (blo, bhi)) = (a.rule_range(ra), b.rule_range(rb));
    let mut pair = vec![DEAD; (hi - lo) as usize];
    let start = (a.root_start().0, b.root_start().0);
    pair[(start.0 - lo) as usize] = start.1;
    let mut todo = vec![start];
    while let Some((s, t)) = todo.pop() {
        for (c, bytes) in a.class_bytes.iter().enumerate() {
            let Some(&byte) = bytes.first() else { continue };
            let s2 = a.next(s, c);
            if s2 == DEAD || !(lo..hi).contains(&s2) || pair[(s2 - lo) as usize] != DEAD {
                continue;
            }
            let t2 = b.next(t, b.byte_class[byte as usize] as usize);
            if t2 != DEAD && (blo..bhi).contains(&t2) {
                pair[(s2 - lo) as usize] = t2;
                todo.push((s2, t2));
            }
        }
    }
    for (i, &t) in pair.iter().enumerate() {
        let Some(slot) = shell.masks[lo as usize + i].get() else { continue };
        if t != DEAD && !slot.mask.stand_in {
            let _ = full.masks[t as usize].set(Slot { mask: slot.mask.clone(), alike: t });
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::bitmask::is_allowed;
    use crate::compiler::{CompileOptions, CompiledGrammar, GrammarCompiler, GrammarSpec};
    use crate::tool_calling::{model_structural_tag, tools_from_json, Family, PresetOptions};
    use crate::{GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn tokenizer(name: &str) -> Arc<TokenizerInfo> {
        let data = crate::grammar::testing::test_data_dir().unwrap_or_else(|e| panic!("{e}"));
        let path = data.join("tokenizers").join(name);
        match TokenizerInfo::from_path(&path, &TokenizerOptions::default()) {
            Ok(t) => Arc::new(t),
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }

    /// Ten tools whose arguments hold strings (one an intersection), bounded integers,
    /// enums, booleans, arrays, a nested object, and any object.
    fn tools() -> Value {
        let mut tools: Vec<Value> = (0..9)
            .map(|i| {
                let props = match i % 3 {
                    // (An e-mail under a length is an intersection.)
                    0 => json!({"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]},
                                "mail": {"type": "string", "format": "email", "maxLength": 20}}),
                    1 => json!({"n": {"type": "integer", "minimum": 0, "maximum": 99}, "flag": {"type": "boolean"}}),
                    _ => json!({"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                                "at": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}),
                };
                let required: Vec<&String> = props.as_object().map(|o| o.keys().collect()).unwrap_or_default();
                json!({"type": "function", "function": {"name": format!("tool_{i}"), "parameters":
                    {"type": "object", "properties": props, "required": required, "additionalProperties": false}}})
            })
            .collect();
        tools
            .push(json!({"type": "function", "function": {"name": "any", "parameters": {"type": "object"}}}));
        Value::Array(tools)
    }

    /// Tokens whose text occurs in one of the tag's strings (markers, names) or is a
    /// piece of JSON: favoured so that random walks reach calls and finish them.
    fn hinted(tok: &TokenizerInfo, tag: &Value) -> Vec<u32> {
        fn strings(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Array(a) => a.iter().for_each(|c| strings(c, out)),
                Value::Object(o) => o.iter().for_each(|(k, c)| {
                    out.push(k.clone());
                    strings(c, out)
                }),
                _ => {}
            }
        }
        let mut texts = vec![r#"{"city": "Lyon", "unit": "c", "n": 12, "flag": true, "x": 1.5}"#.to_string()];
        strings(tag, &mut texts);
        (0..tok.vocab_size() as u32)
            .filter(|&id| {
                let b = tok.token_bytes(id);
                !b.is_empty() && std::str::from_utf8(b).is_ok_and(|s| texts.iter().any(|t| t.contains(s)))
            })
            .collect()
    }

    /// The tag's `begin` strings (where calls start).
    fn begins(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Array(a) => a.iter().for_each(|c| begins(c, out)),
            Value::Object(o) => o.iter().for_each(|(k, c)| match (k.as_str(), c) {
                ("begin", Value::String(s)) => out.push(s.clone()),
                _ => begins(c, out),
            }),
            _ => {}
        }
    }

    /// Walks `shell` and `finished` side by side: every mask equal, the same tokens
    /// accepted, with rollbacks. The walk first writes some text then one of `calls`
    /// (a tag's `begin`) as far as the masks allow, then samples, favouring `hints`.
    /// Returns the step at which the shell's matcher moved to the finished grammar, if
    /// it did.
    fn walk(
        shell: &Arc<CompiledGrammar>,
        finished: &Arc<CompiledGrammar>,
        hints: &[u32],
        calls: &[String],
        seed: u64,
    ) -> Option<usize> {
        let tok = finished.tokenizer().clone();
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut a, mut b) = (GrammarMatcher::new(shell.clone()), GrammarMatcher::new(finished.clone()));
        let (mut ra, mut rb) =
            (TokenBitmask::new(1, tok.vocab_size()), TokenBitmask::new(1, tok.vocab_size()));
        let mut moved = None;
        let mut text = Vec::new();
        // Pieces written in turn as far as the masks allow (a piece they stop is dropped):
        // the reasoning block's end is not allowed where there is none.
        let named = |b: &&String| b.contains("tool_") || b.contains("\"any\"") || b.contains(">any<");
        let call: Vec<&String> = calls.iter().filter(named).collect();
        let call = call[(next() % call.len() as u64) as usize];
        let mut pieces = vec!["Let me look.", "</think>", "\n\n"];
        pieces.extend(calls.iter().filter(|b| !named(b)).map(String::as_str));
        pieces.push(call);
        let mut goals: Vec<Vec<u8>> = pieces.iter().rev().map(|g| g.as_bytes().to_vec()).collect();
        let mut goal = goals.pop().unwrap_or_default();
        for step in 0..300 {
            a.fill_next_token_bitmask(ra.row_mut(0)).unwrap_or_else(|e| panic!("{e}"));
            b.fill_next_token_bitmask(rb.row_mut(0)).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                ra.row(0) == rb.row(0),
                "seed {seed} step {step}: masks differ after {:?}",
                String::from_utf8_lossy(&text)
            );
            if moved.is_none() && !a.compiled().is_staged() {
                moved = Some(step);
            }
            let row = ra.row(0);
            let ok = |id: u32| is_allowed(row, id) && !tok.stop_tokens().contains(&id);
            // The longest allowed token that goes on with the goal.
            let on_goal = (0..tok.vocab_size() as u32)
                .filter(|&id| ok(id) && !goal.is_empty() && goal.starts_with(tok.token_bytes(id)))
                .max_by_key(|&id| tok.token_bytes(id).len());
            if on_goal.is_none() {
                goal = goals.pop().unwrap_or_default();
            }
            let good: Vec<u32> = hints.iter().copied().filter(|&id| ok(id)).collect();
            let all: Vec<u32> = if let Some(id) = on_goal {
                goal.drain(..tok.token_bytes(id).len());
                if goal.is_empty() {
                    goal = goals.pop().unwrap_or_default();
                }
                vec![id]
            } else if good.is_empty() || next() % 10 >= 8 {
                (0..tok.vocab_size() as u32).filter(|&id| ok(id)).collect()
            } else {
                good
            };
            if all.is_empty() {
                break;
            }
            let id = all[(next() % all.len() as u64) as usize];
            a.accept_token(id).unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            b.accept_token(id).unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            text.extend_from_slice(tok.token_bytes(id));
            if step % 23 == 22 {
                a.rollback(2).unwrap_or_else(|e| panic!("{e}"));
                b.rollback(2).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        moved
    }

    /// A family, its tokenizer, its tag (as JSON and as text), the tag compiled unstaged.
    type Preset = (&'static str, Arc<TokenizerInfo>, Value, String, Arc<CompiledGrammar>);

    /// The three benchmark presets with [`tools`].
    fn presets() -> Vec<Preset> {
        let tools = tools_from_json(&tools()).unwrap_or_else(|e| panic!("{e}"));
        let fams = [("qwen_3", "qwen3"), ("llama", "llama3_1"), ("deepseek_v3_1", "qwen3")];
        fams.into_iter()
            .map(|(fam, tk)| {
                let tok = tokenizer(tk);
                let family = Family::from_name(fam).unwrap_or_else(|e| panic!("{e}"));
                let preset = model_structural_tag(family, &tools, &PresetOptions::default())
                    .unwrap_or_else(|e| panic!("{e}"));
                let text = preset.structural_tag.to_string();
                let unstaged = CompileOptions { staged: false, ..CompileOptions::default() };
                let compiled = GrammarCompiler::with_options(tok.clone(), unstaged, 0)
                    .compile(&GrammarSpec::StructuralTag(text.clone()))
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(!compiled.is_staged());
                (fam, tok, preset.structural_tag, text, compiled)
            })
            .collect()
    }

    #[test]
    fn a_shell_answers_like_the_finished_grammar_and_builds_it_only_at_the_arguments() {
        for (fam, tok, tag, text, finished) in presets() {
            let hints = hinted(&tok, &tag);
            let mut calls = Vec::new();
            begins(&tag, &mut calls);
            let (mut moved, mut stayed) = (0, 0);
            for seed in 0..8 {
                let shell = GrammarCompiler::new(tok.clone()).compile_staged_on_demand(&text);
                assert!(shell.is_staged());
                match walk(&shell, &finished, &hints, &calls, seed) {
                    // Built only because a parse reached a stand-in (nothing else runs it).
                    Some(_) => moved += 1,
                    None => {
                        assert!(shell.finishing().and_then(|f| f.get()).is_none());
                        stayed += 1;
                    }
                }
                // The finished grammar is the unstaged compile's, state for state.
                let full = shell.finished().unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(full.automata().digest(), finished.automata().digest(), "{fam}");
            }
            assert!(moved > 0, "{fam}: no walk reached a call's arguments");
            let _ = stayed;
        }
    }

    #[test]
    fn the_finished_grammar_takes_the_shells_free_text_masks_and_they_are_its_own() {
        for (fam, tok, _, text, reference) in presets() {
            // (With masks in the background, the thread also walks the shell's free text
            // first: those masks are taken too.)
            let background = CompileOptions { background_precompute: true, ..CompileOptions::default() };
            let shell =
                GrammarCompiler::with_options(tok.clone(), background, 0).compile_staged_on_demand(&text);
            // Free text with near-misses of the markers, a mask at every character.
            let mut m = GrammarMatcher::new(shell.clone());
            let mut row = TokenBitmask::new(1, tok.vocab_size());
            for c in
                "Hmm, <tool and {\"na </thin> ok.</think>\n\nSure: <tool_c {\"x\": 1} <｜tool fine.".chars()
            {
                m.fill_next_token_bitmask(row.row_mut(0)).unwrap_or_else(|e| panic!("{e}"));
                if m.accept_string(&c.to_string()).is_err() {
                    continue;
                }
            }
            assert!(shell.finishing().and_then(|f| f.get()).is_none(), "{fam}: built too early");
            let full = shell.finished().unwrap_or_else(|e| panic!("{e}"));
            let taken: Vec<usize> =
                (0..full.masks.len()).filter(|&s| full.masks[s].get().is_some()).collect();
            assert!(taken.len() > 3, "{fam}: {} masks taken", taken.len());
            for s in taken {
                let (got, want) = (full.mask(s as u32), reference.mask(s as u32));
                let same = got.accepted.to_words(&tok) == want.accepted.to_words(&tok)
                    && got.uncertain == want.uncertain;
                assert!(same, "{fam}: the mask taken for state {s} is not its own");
            }
        }
    }
}
