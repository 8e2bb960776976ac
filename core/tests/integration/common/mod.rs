#![allow(dead_code)]
//! Shared test helpers: data paths, tokenizers, a small deterministic RNG.

pub mod oracle;
pub mod refs;

use grammask::{TokenizerInfo, TokenizerOptions};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

include!("../../../../scripts/test_data_dir.rs");

/// The test data (see `scripts/test_data_dir.rs`); panics with the way to get it.
pub fn data_dir() -> PathBuf {
    test_data_dir().unwrap_or_else(|e| panic!("{e}"))
}

pub fn tokenizer(name: &str) -> Arc<TokenizerInfo> {
    type Loaded = Vec<(String, Arc<TokenizerInfo>)>;
    static CACHE: OnceLock<std::sync::Mutex<Loaded>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut c = cache.lock().unwrap();
    if let Some((_, t)) = c.iter().find(|(n, _)| n == name) {
        return t.clone();
    }
    let path = data_dir().join("tokenizers").join(name);
    let t = Arc::new(
        TokenizerInfo::from_path(&path, &TokenizerOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    );
    c.push((name.to_string(), t.clone()));
    t
}

pub fn grammar_text(rel: &str) -> String {
    std::fs::read_to_string(data_dir().join("grammars").join(rel)).unwrap()
}

/// xorshift64*: deterministic, dependency-free randomness for walks.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Allowed ids of a mask row.
pub fn allowed(row: &[u32]) -> Vec<u32> {
    (0..row.len() as u32 * 32).filter(|&i| row[i as usize / 32] >> (i % 32) & 1 == 1).collect()
}

/// The three real tokenizers the front-ends' oracle checks run on.
pub const TOKENIZERS: [&str; 3] = ["llama3_1", "llama2", "qwen3"];

/// Feeds `text` byte by byte to a matcher for `spec` and to the brute-force recognizer for
/// `grammar` (the same language's IR), on each tokenizer; after every `stride`-th byte
/// (`GRAMMASK_ORACLE_STRIDE` overrides) the mask must equal the oracle's. `text` must be
/// accepted in full.
pub fn check_masks_along(
    name: &str,
    grammar: &grammask::Grammar,
    spec: &grammask::GrammarSpec,
    text: &str,
    stride_for: impl Fn(&str) -> usize,
) {
    use grammask::{GrammarCompiler, GrammarMatcher, TokenBitmask};
    use oracle::{oracle_mask, Bnf, Recognizer, Vocab};
    let bnf = Bnf::new(grammar);
    let forced: Option<usize> = std::env::var("GRAMMASK_ORACLE_STRIDE").ok().and_then(|s| s.parse().ok());
    for tname in TOKENIZERS {
        let stride = forced.unwrap_or_else(|| stride_for(tname));
        let tok = tokenizer(tname);
        let compiled = GrammarCompiler::new(tok.clone()).compile(spec).unwrap();
        // Producible: ordinary tokens, and special non-stop tokens whose text occurs in one
        // of the grammar's markers (`Grammar::markers`), derived here from the rule itself.
        let marker = |id: u32| {
            !tok.stop_tokens().contains(&id)
                && std::str::from_utf8(tok.token_bytes(id))
                    .is_ok_and(|t| !t.is_empty() && grammar.markers.iter().any(|m| m.contains(t)))
        };
        let tokens = Vocab::new(
            (0..tok.tokenizer_size() as u32)
                .map(|id| (!tok.is_special(id) || marker(id)).then(|| tok.token_bytes(id).to_vec()))
                .collect(),
        );
        let mut m = GrammarMatcher::new(compiled);
        let mut mask = TokenBitmask::new(1, tok.vocab_size());
        let mut oracle = Recognizer::new(&bnf);
        let bytes = text.as_bytes();
        for i in 0..=bytes.len() {
            m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
            if i % stride == 0 || i == bytes.len() {
                let want = oracle_mask(&mut oracle, &tokens, tok.stop_tokens(), tok.vocab_size());
                if want != mask.row(0) {
                    let (got, exp) = (allowed(mask.row(0)), allowed(&want));
                    let show = |ids: Vec<u32>| -> Vec<(u32, String)> {
                        ids.into_iter()
                            .take(10)
                            .map(|i| (i, String::from_utf8_lossy(tok.token_bytes(i)).to_string()))
                            .collect()
                    };
                    panic!(
                        "{name} on {tname} after {:?}: extra {:?}; missing {:?}",
                        String::from_utf8_lossy(&bytes[..i]),
                        show(got.iter().copied().filter(|i| !exp.contains(i)).collect()),
                        show(exp.iter().copied().filter(|i| !got.contains(i)).collect()),
                    );
                }
            }
            if i < bytes.len() {
                m.accept_bytes(&bytes[i..=i]).unwrap_or_else(|e| panic!("{name}: byte {i}: {e}"));
                assert!(oracle.push(bytes[i]), "{name}: oracle rejects byte {i}");
            }
        }
        assert!(m.can_terminate(), "{name} on {tname}: cannot end");
    }
}

/// A compiler over a vocabulary where every byte is a token, plus an end-of-sequence token
/// (id 256): a matcher sees texts as they are, so acceptance is the grammar's language.
pub fn byte_compiler() -> &'static grammask::GrammarCompiler {
    static C: OnceLock<grammask::GrammarCompiler> = OnceLock::new();
    C.get_or_init(|| {
        let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        vocab.push(b"<eos>".to_vec());
        let opts = TokenizerOptions { stop_tokens: Some(vec![256]), ..Default::default() };
        grammask::GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap()))
    })
}
