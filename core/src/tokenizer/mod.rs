//! Tokenizer info: every token's exact bytes, which tokens are special or stop tokens, and
//! the sorted vocabulary as a flattened trie.
//!
//! Grammars work on bytes; tokenizers store tokens as strings in one of three encodings
//! ([`VocabKind`]). This module decodes each token once, at load time, to the bytes it
//! contributes to the output, so the rest of grammask never sees the encoding.
//!
//! # Getting a tokenizer
//! Any Hugging Face `tokenizer.json` works: download it from the model's repository (the
//! file sits next to the weights; `huggingface-cli download MODEL tokenizer.json
//! tokenizer_config.json` fetches both), or take it from a local model folder. Without one,
//! [`TokenizerInfo::from_byte_tokens`] accepts a plain list of token byte strings.

mod decode;
mod error;
mod gguf;
mod trie;

pub use decode::VocabKind;
pub use error::TokenizerError;
pub use gguf::{GgufTokenType, GgufTokenizer};
pub(crate) use trie::{first_clear_bit, utf8, TokenTrie, TrieNode, END_OF_SIBLINGS};

use rustc_hash::FxHasher;

/// A `Result` with the tokenizer layer's [`TokenizerError`].
type Result<T, E = TokenizerError> = std::result::Result<T, E>;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// Options for building a [`TokenizerInfo`].
#[derive(Debug, Clone, Default)]
pub struct TokenizerOptions {
    /// The model's vocabulary size (rows of its logits), when it exceeds the tokenizer's
    /// (padding). Masks cover this many ids; ids past the tokenizer are always disallowed.
    pub vocab_size: Option<usize>,
    /// Force the token encoding instead of detecting it from the tokenizer's decoder.
    pub kind: Option<VocabKind>,
    /// Stop tokens in addition to the EOS token found in `tokenizer_config.json`.
    pub extra_stop_tokens: Vec<u32>,
    /// Replace the detected stop tokens entirely.
    pub stop_tokens: Option<Vec<u32>>,
}

/// A tokenizer's vocabulary as grammask needs it. Immutable; share it with `Arc`.
#[derive(Debug)]
pub struct TokenizerInfo {
    vocab_size: usize,
    kind: VocabKind,
    /// Concatenated token bytes; token `i` is `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    /// Per id: true when the grammar may never produce it (special / added-special tokens).
    special: Vec<bool>,
    /// The ids set in `special`, ascending (a grammar's marker tokens are looked up among
    /// these, not over the whole vocabulary: that scan was ~5% of a tool tag's compile).
    special_ids: Vec<u32>,
    stop_tokens: Vec<u32>,
    /// Bitset over `vocab_size`: tokens a grammar can produce (non-special, non-empty).
    normal_words: Vec<u32>,
    trie: TokenTrie,
    fingerprint: u64,
}

/// Names that commonly mark the end of generation, used when no config names an EOS.
const WELL_KNOWN_STOPS: &[&str] =
    &["</s>", "<|endoftext|>", "<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|end|>", "<eos>"];

impl TokenizerInfo {
    /// Loads a Hugging Face tokenizer from a `tokenizer.json` or a folder holding one, and
    /// reads the EOS token from `tokenizer_config.json` beside it when present.
    pub fn from_path(path: impl AsRef<Path>, options: &TokenizerOptions) -> crate::Result<Self> {
        let file = resolve_tokenizer_path(path.as_ref());
        let text = std::fs::read(&file)
            .map_err(|source| TokenizerError::Io { path: file.display().to_string(), source })?;
        let config = file.parent().map(|d| d.join("tokenizer_config.json"));
        let config = config.and_then(|c| std::fs::read(c).ok());
        Self::from_json_bytes(&text, config.as_deref(), options)
    }

    /// Builds from the bytes of a `tokenizer.json` and, optionally, of its
    /// `tokenizer_config.json`.
    pub fn from_json_bytes(
        tokenizer_json: &[u8],
        config_json: Option<&[u8]>,
        options: &TokenizerOptions,
    ) -> crate::Result<Self> {
        let tok = tokenizers::Tokenizer::from_bytes(tokenizer_json)
            .map_err(|e| TokenizerError::Load(format!("cannot load tokenizer.json: {e}")))?;
        let eos = config_json.and_then(eos_from_config);
        Self::from_hf(&tok, eos.as_deref(), options)
    }

    /// Builds from a loaded `tokenizers::Tokenizer`. `eos` names the EOS token, if known.
    pub fn from_hf(
        tok: &tokenizers::Tokenizer,
        eos: Option<&str>,
        options: &TokenizerOptions,
    ) -> crate::Result<Self> {
        let detected = tok
            .get_decoder()
            .and_then(|d| serde_json::to_value(d).ok())
            .map_or(VocabKind::Raw, |d| VocabKind::from_decoder_json(&d));
        let kind = options.kind.unwrap_or(detected);
        let vocab = tok.get_vocab(true);
        let n = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
        let mut strings: Vec<Option<String>> = vec![None; n];
        for (s, id) in vocab {
            strings[id as usize] = Some(s);
        }
        let added = tok.get_added_tokens_decoder();
        let mut tokens = Vec::with_capacity(n);
        let mut special = vec![false; n];
        for (id, s) in strings.iter().enumerate() {
            let s = s.as_deref().unwrap_or("");
            match added.get(&(id as u32)) {
                // Added tokens are stored as plain text, not in the model's encoding.
                Some(a) => {
                    special[id] = a.special;
                    tokens.push(a.content.as_bytes().to_vec());
                }
                None => tokens.push(kind.decode(s)),
            }
        }
        let mut stops: Vec<u32> = Vec::new();
        if let Some(eos) = eos {
            stops.extend(tok.token_to_id(eos));
        }
        if stops.is_empty() {
            stops.extend(WELL_KNOWN_STOPS.iter().filter_map(|s| tok.token_to_id(s)).take(1));
        }
        Ok(Self::build(tokens, special, stops, kind, options)?)
    }

    /// The vocabulary embedded in a GGUF model file (`tokenizer.ggml.*`): `gpt2` byte-level
    /// BPE or `llama` SentencePiece; control, unknown and unused tokens are special; stop
    /// tokens are the EOS id plus end-of-turn ids unless `options` names them. See
    /// [`GgufTokenizer`] for the chat template and the BOS/EOS ids.
    pub fn from_gguf(path: impl AsRef<Path>, options: &TokenizerOptions) -> crate::Result<Self> {
        GgufTokenizer::read(path)?.to_tokenizer_info(options)
    }

    /// Builds from a plain list of token byte strings (token id = index). No token is
    /// special; stop tokens come from `options`.
    ///
    /// ```
    /// use grammask::{TokenizerInfo, TokenizerOptions};
    /// let toks: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec(), b"ab".to_vec(), vec![]];
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![3]), ..Default::default() };
    /// let info = TokenizerInfo::from_byte_tokens(toks, &opts)?;
    /// assert_eq!(info.vocab_size(), 4);
    /// assert_eq!(info.token_bytes(2), b"ab");
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn from_byte_tokens(tokens: Vec<Vec<u8>>, options: &TokenizerOptions) -> crate::Result<Self> {
        let special = vec![false; tokens.len()];
        Ok(Self::build(tokens, special, Vec::new(), VocabKind::Raw, options)?)
    }

    pub(crate) fn build(
        tokens: Vec<Vec<u8>>,
        mut special: Vec<bool>,
        detected_stops: Vec<u32>,
        kind: VocabKind,
        options: &TokenizerOptions,
    ) -> Result<Self> {
        let n = tokens.len();
        let vocab_size = options.vocab_size.unwrap_or(n);
        if vocab_size < n {
            return Err(TokenizerError::Load(format!(
                "vocab_size {vocab_size} is smaller than the tokenizer's {n} tokens"
            )));
        }
        if u32::try_from(vocab_size).is_err() {
            return Err(TokenizerError::Limit {
                what: "vocabulary size",
                given: vocab_size,
                limit: u32::MAX as usize,
            });
        }
        let mut stop_tokens = options.stop_tokens.clone().unwrap_or(detected_stops);
        stop_tokens.extend(&options.extra_stop_tokens);
        stop_tokens.sort_unstable();
        stop_tokens.dedup();
        for &s in &stop_tokens {
            if s as usize >= n {
                return Err(TokenizerError::InvalidTokenId { id: s, vocab_size: n });
            }
            // A stop token is allowed only when the grammar can end, never as text.
            special[s as usize] = true;
        }
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0u32);
        for t in &tokens {
            bytes.extend_from_slice(t);
            let end = u32::try_from(bytes.len()).map_err(|_| TokenizerError::Limit {
                what: "total vocabulary bytes",
                given: bytes.len(),
                limit: u32::MAX as usize,
            })?;
            offsets.push(end);
        }
        let mut normal_words = vec![0u32; vocab_size.div_ceil(32)];
        for (id, t) in tokens.iter().enumerate() {
            if !special[id] && !t.is_empty() {
                normal_words[id / 32] |= 1 << (id % 32);
            }
        }
        let trie = TokenTrie::build(&tokens, |id| normal_words[id / 32] >> (id % 32) & 1 == 1);
        let mut h = FxHasher::default();
        h.write_usize(vocab_size);
        h.write(&bytes);
        offsets.iter().for_each(|&o| h.write_u32(o));
        special.iter().for_each(|&s| h.write_u8(s as u8));
        stop_tokens.iter().for_each(|&s| h.write_u32(s));
        let fingerprint = h.finish();
        let special_ids = (0..n as u32).filter(|&id| special[id as usize]).collect();
        Ok(Self {
            vocab_size,
            kind,
            bytes,
            offsets,
            special,
            special_ids,
            stop_tokens,
            normal_words,
            trie,
            fingerprint,
        })
    }

    /// Number of ids a mask covers (the model's vocabulary size).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Number of tokens the tokenizer defines (≤ [`Self::vocab_size`]).
    pub fn tokenizer_size(&self) -> usize {
        self.offsets.len() - 1
    }

    /// How token strings were decoded to bytes.
    pub fn kind(&self) -> VocabKind {
        self.kind
    }

    /// The bytes token `id` contributes to the output (empty for padding ids).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i + 1 >= self.offsets.len() {
            return &[];
        }
        &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// True for tokens a grammar never produces as text (special and stop tokens).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(true)
    }

    /// The ids of the tokenizer's special tokens (stop tokens included), ascending.
    pub(crate) fn special_ids(&self) -> &[u32] {
        &self.special_ids
    }

    /// Tokens allowed exactly when the grammar can end.
    pub fn stop_tokens(&self) -> &[u32] {
        &self.stop_tokens
    }

    /// Bitset (mask layout) of the tokens a grammar may produce as text.
    pub(crate) fn normal_words(&self) -> &[u32] {
        &self.normal_words
    }

    pub(crate) fn trie(&self) -> &TokenTrie {
        &self.trie
    }

    /// A hash of everything that affects compiled masks (for compile-cache keys).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Heap bytes held by this structure.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.len()
            + self.offsets.len() * 4
            + self.special.len()
            + self.special_ids.len() * 4
            + self.normal_words.len() * 4
            + self.trie.memory_bytes()
    }
}

/// `path` itself if it is a file, else `path/tokenizer.json`.
pub fn resolve_tokenizer_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path.to_path_buf()
    }
}

/// The EOS token's text from a `tokenizer_config.json` (`"eos_token": "…"` or `{ "content": "…" }`).
fn eos_from_config(config: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(config).ok()?;
    match v.get("eos_token")? {
        serde_json::Value::String(s) => Some(s.clone()),
        obj => obj.get("content")?.as_str().map(str::to_string),
    }
}
