#![allow(dead_code)]
//! Shared test helpers: data paths, tokenizers, a small deterministic RNG.

pub mod oracle;
pub mod refs;

use grammask::{TokenizerInfo, TokenizerOptions};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// `../shared/data` beside the project checkout.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data")
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
