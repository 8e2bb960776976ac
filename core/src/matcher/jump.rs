//! Jump-forward as token ids: forced text appended the way the model's tokenizer would
//! have split it.
//!
//! [`GrammarMatcher::find_jump_forward_string`] gives the bytes the grammar forces next;
//! an engine appends them without a forward pass per token, but it needs *ids*, and the
//! ids must be the ones the tokenizer itself would produce, or the model sees token
//! sequences it was never trained on. Gluing the forced text's tokens after what was
//! sampled is not that: after `{` a forced `"name": "` must become `{"`, `name`, `":`,
//! ` "` in Llama-3's vocabulary, which means taking back the sampled `{`.
//!
//! [`GrammarMatcher::jump_forward_tokens`] therefore re-encodes the last few accepted
//! tokens together with the forced text and picks how far back to start: the nearest
//! token whose re-encoding starts with that very token (the split before it is the
//! tokenizer's own), else the farthest tried. The ids decode to exactly the bytes they
//! replace plus the forced bytes, and the grammar accepts them (both are checked; a span
//! that fails either is not used). The right edge stays where the forced text ends: the
//! next sampled token may still merge differently with it than a full re-encoding would.

use super::GrammarMatcher;
use crate::error::{Error, Result};
use crate::tokenizer::TokenizerInfo;

/// Turns text into token ids as a model's tokenizer does, adding no special tokens.
pub trait TextEncoder {
    /// The ids of `text`.
    fn encode_text(&self, text: &str) -> Result<Vec<u32>>;
}

impl TextEncoder for tokenizers::Tokenizer {
    fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
        self.encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer(format!("cannot encode: {e}")))
    }
}

/// What to do to jump forward: roll back the last `rollback` accepted tokens, then
/// append `ids` (accepting them: [`GrammarMatcher::accept_tokens`]). Empty when nothing
/// is forced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JumpForward {
    /// Trailing accepted tokens to take back.
    pub rollback: usize,
    /// Ids to append after the rollback.
    pub ids: Vec<u32>,
}

/// Most trailing tokens re-encoded with the forced text.
pub const MAX_RETOKENIZED: usize = 4;

/// Prefixes tried when an encoder changes the start of a text (SentencePiece's
/// "prepend a space" normalizers): the text is encoded after one of these, whose own
/// ids are then dropped.
const SENTINELS: [&str; 2] = ["\n", " "];

/// The concatenated bytes of `ids`.
fn bytes_of(info: &TokenizerInfo, ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|&id| info.token_bytes(id).iter().copied()).collect()
}

/// `encoder`'s ids for `text` if they decode to exactly `text` and hold no special token.
fn encode_exact(encoder: &(impl TextEncoder + ?Sized), info: &TokenizerInfo, text: &str) -> Option<Vec<u32>> {
    let ok =
        |ids: &[u32]| ids.iter().all(|&id| !info.is_special(id)) && bytes_of(info, ids) == text.as_bytes();
    if let Ok(ids) = encoder.encode_text(text) {
        if ok(&ids) {
            return Some(ids);
        }
    }
    for s in SENTINELS {
        let (Ok(head), Ok(all)) = (encoder.encode_text(s), encoder.encode_text(&format!("{s}{text}"))) else {
            continue;
        };
        if let Some(rest) = all.strip_prefix(head.as_slice()) {
            if ok(rest) {
                return Some(rest.to_vec());
            }
        }
    }
    None
}

/// The longest prefix of `span` that is UTF-8 and longer than `keep` bytes (the forced
/// text may end inside a character; the sampled part must start on a boundary).
fn utf8_prefix(span: &[u8], keep: usize) -> Option<&str> {
    let valid = match std::str::from_utf8(span) {
        Ok(s) => return Some(s),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => return None,
    };
    (valid > keep).then(|| std::str::from_utf8(&span[..valid]).ok()).flatten()
}

impl GrammarMatcher {
    /// The forced continuation ([`Self::find_jump_forward_string`]) as token ids,
    /// re-encoded across the boundary with up to [`MAX_RETOKENIZED`] trailing accepted
    /// tokens (why: the `matcher::jump` source). The state is unchanged: apply the result
    /// with `rollback(jf.rollback)` then `accept_tokens(&jf.ids)`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{GrammarCompiler, GrammarMatcher, TokenizerInfo, TokenizerOptions, Result};
    /// use grammask::matcher::TextEncoder;
    ///
    /// // A toy vocabulary with a merged `{"` and an encoder that merges greedily.
    /// let vocab = ["{", "\"", "{\"", "a", "\":", " ", "1", "}", "<eos>"];
    /// struct Greedy(Vec<&'static str>);
    /// impl TextEncoder for Greedy {
    ///     fn encode_text(&self, mut text: &str) -> Result<Vec<u32>> {
    ///         let mut ids = Vec::new();
    ///         while !text.is_empty() {
    ///             let (id, t) = self.0.iter().enumerate()
    ///                 .filter(|(_, t)| text.starts_with(**t)).max_by_key(|(_, t)| t.len()).unwrap();
    ///             ids.push(id as u32);
    ///             text = &text[t.len()..];
    ///         }
    ///         Ok(ids)
    ///     }
    /// }
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![8]), ..Default::default() };
    /// let info = TokenizerInfo::from_byte_tokens(vocab.iter().map(|s| s.as_bytes().to_vec()).collect(), &opts)?;
    /// let compiler = GrammarCompiler::new(Arc::new(info));
    /// let mut m = GrammarMatcher::new(compiler.compile_ebnf(r#"root ::= "{\"a\": " [0-9]+ "}""#)?);
    /// m.accept_token(0)?; // the model sampled `{`
    /// let jf = m.jump_forward_tokens(&Greedy(vocab.to_vec()))?;
    /// // `{` is taken back: the tokenizer writes `{"` `a` `":` ` `.
    /// assert_eq!((jf.rollback, jf.ids.as_slice()), (1, &[2, 3, 4, 5][..]));
    /// m.rollback(jf.rollback)?;
    /// m.accept_tokens(&jf.ids)?;
    /// assert!(m.find_jump_forward_string().is_empty());
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn jump_forward_tokens(&mut self, encoder: &(impl TextEncoder + ?Sized)) -> Result<JumpForward> {
        self.jump_forward_tokens_within(encoder, MAX_RETOKENIZED)
    }

    /// [`Self::jump_forward_tokens`] taking back at most `max_rollback` accepted tokens
    /// (capped at [`MAX_RETOKENIZED`]). With 0 the forced text is appended after what was
    /// sampled, as the tokenizer splits it alone: for engines that cannot take a token
    /// back (a server that has already streamed it).
    pub fn jump_forward_tokens_within(
        &mut self,
        encoder: &(impl TextEncoder + ?Sized),
        max_rollback: usize,
    ) -> Result<JumpForward> {
        self.jump_forward(encoder, max_rollback, false)
    }

    /// [`Self::jump_forward_tokens_within`], applied: the state moves past the forced
    /// text (the result says what was taken back and appended). Usually one walk of the
    /// grammar over the forced tokens instead of two — the check that they are accepted is
    /// the apply — which matters where it runs: on a server's step thread, between sampling
    /// and the next forward.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{GrammarCompiler, GrammarMatcher, TokenizerInfo, TokenizerOptions, Result};
    /// use grammask::matcher::TextEncoder;
    ///
    /// // One byte per token: the encoder spells text byte by byte.
    /// struct Bytes;
    /// impl TextEncoder for Bytes {
    ///     fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
    ///         Ok(text.bytes().map(|b| u32::from(b - b'a')).collect())
    ///     }
    /// }
    /// let vocab: Vec<Vec<u8>> = (b'a'..=b'e').map(|b| vec![b]).collect();
    /// let info = TokenizerInfo::from_byte_tokens(vocab, &TokenizerOptions::default())?;
    /// let compiler = GrammarCompiler::new(Arc::new(info));
    /// let mut m = GrammarMatcher::new(compiler.compile_ebnf(r#"root ::= "a" "bcd" ("a" | "e")"#)?);
    /// m.accept_token(0)?; // `a`; `bcd` is forced
    /// let jf = m.apply_jump_forward(&Bytes, 0)?;
    /// assert_eq!((jf.rollback, jf.ids.as_slice()), (0, &[1, 2, 3][..]));
    /// assert!(m.find_jump_forward_string().is_empty()); // already past it
    /// m.accept_token(4)?;
    /// assert!(m.can_terminate());
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn apply_jump_forward(
        &mut self,
        encoder: &(impl TextEncoder + ?Sized),
        max_rollback: usize,
    ) -> Result<JumpForward> {
        self.jump_forward(encoder, max_rollback, true)
    }

    fn jump_forward(
        &mut self,
        encoder: &(impl TextEncoder + ?Sized),
        max_rollback: usize,
        apply: bool,
    ) -> Result<JumpForward> {
        let forced = self.find_jump_forward_string();
        if forced.is_empty() {
            return Ok(JumpForward::default());
        }
        let info = self.compiled().tokenizer().clone();
        let tail: Vec<u32> = {
            let mut t: Vec<u32> = self
                .history
                .iter()
                .rev()
                .map_while(|s| s.token())
                .take(max_rollback.min(MAX_RETOKENIZED))
                .collect();
            t.reverse();
            t
        };
        let mut best = None;
        for k in 0..=tail.len() {
            let taken = &tail[tail.len() - k..];
            let mut span = bytes_of(&info, taken);
            let keep = span.len();
            span.extend_from_slice(&forced);
            let Some(text) = utf8_prefix(&span, keep) else { continue };
            let Some(ids) = encode_exact(encoder, &info, text) else { continue };
            if !self.replace(taken, &ids)? {
                continue;
            }
            // The tokenizer splits before `taken[0]` too: keep it.
            let early = k > 0 && ids.first() == taken.first();
            let jf = if early {
                JumpForward { rollback: k - 1, ids: ids[1..].to_vec() }
            } else {
                JumpForward { rollback: k, ids: ids.clone() }
            };
            // (The state now has `ids` in place of `taken`: what applying `jf` gives.)
            if apply && (early || k == tail.len()) {
                return Ok(jf);
            }
            self.rollback(ids.len())?;
            // These were accepted here a moment ago: accepting them again cannot fail.
            self.accept_tokens(taken)?;
            if early {
                return Ok(jf);
            }
            best = Some(jf);
        }
        let best = best.unwrap_or_default();
        if apply && !best.ids.is_empty() {
            self.rollback(best.rollback)?;
            self.accept_tokens(&best.ids)?;
        }
        Ok(best)
    }

    /// Takes back the trailing accepted `taken` and accepts `ids` instead, if the grammar
    /// accepts them; else the state is as before.
    fn replace(&mut self, taken: &[u32], ids: &[u32]) -> Result<bool> {
        self.rollback(taken.len())?;
        if self.accept_tokens(ids).is_ok() {
            return Ok(true);
        }
        // These were accepted here a moment ago: accepting them again cannot fail.
        self.accept_tokens(taken)?;
        Ok(false)
    }
}
