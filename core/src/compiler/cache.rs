//! A compile cache keyed by spec text + options + tokenizer, bounded by bytes (LRU).
//!
//! Compiled grammars grow as their masks are computed lazily, so the byte total is
//! re-measured at every insertion rather than remembered.

use super::CompiledGrammar;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};

/// Least-recently-used cache of compiled grammars.
#[derive(Debug)]
pub(crate) struct CompileCache {
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    clock: u64,
    entries: FxHashMap<String, (Arc<CompiledGrammar>, u64)>,
    hits: u64,
    misses: u64,
}

impl CompileCache {
    pub fn new(max_bytes: usize) -> Self {
        Self { max_bytes, inner: Mutex::new(Inner::default()) }
    }

    /// Whether anything is ever kept (a zero byte bound keeps nothing).
    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent (every update
        // is a single insert/remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<Arc<CompiledGrammar>> {
        let mut g = self.lock();
        g.clock += 1;
        let now = g.clock;
        match g.entries.get_mut(key) {
            Some(e) => {
                e.1 = now;
                let hit = e.0.clone();
                g.hits += 1;
                Some(hit)
            }
            None => {
                g.misses += 1;
                None
            }
        }
    }

    /// Every entry (for writing them out).
    pub fn entries(&self) -> Vec<(String, Arc<CompiledGrammar>)> {
        self.lock().entries.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect()
    }

    pub fn insert(&self, key: String, value: Arc<CompiledGrammar>) {
        if self.max_bytes == 0 {
            return;
        }
        let mut g = self.lock();
        g.clock += 1;
        let now = g.clock;
        g.entries.insert(key, (value, now));
        let mut total: usize = g.entries.values().map(|e| e.0.memory_bytes()).sum();
        while total > self.max_bytes && g.entries.len() > 1 {
            let Some(oldest) = g.entries.iter().min_by_key(|e| e.1 .1).map(|e| e.0.clone()) else { break };
            if let Some((v, _)) = g.entries.remove(&oldest) {
                total -= v.memory_bytes().min(total);
            }
        }
    }

    /// `(entries, hits, misses)`.
    pub fn stats(&self) -> (usize, u64, u64) {
        let g = self.lock();
        (g.entries.len(), g.hits, g.misses)
    }
}

#[cfg(test)]
mod tests {
    use crate::{CompileOptions, GrammarCompiler, TokenizerInfo, TokenizerOptions};
    use std::sync::Arc;

    fn compiler(budget: usize) -> GrammarCompiler {
        let vocab: Vec<Vec<u8>> = (b'a'..=b'z').map(|b| vec![b]).collect();
        let tok = TokenizerInfo::from_byte_tokens(vocab, &TokenizerOptions::default()).unwrap();
        GrammarCompiler::with_options(Arc::new(tok), CompileOptions::default(), budget)
    }

    #[test]
    fn hits_and_lru_eviction_by_bytes() {
        let c = compiler(1 << 20);
        let a = c.compile_ebnf("root ::= \"a\"+").unwrap();
        let a2 = c.compile_ebnf("root ::= \"a\"+").unwrap();
        assert!(Arc::ptr_eq(&a, &a2));
        assert_eq!(c.cache_stats(), (1, 1, 1));
        // A budget smaller than two grammars keeps only the most recent one.
        let one = a.memory_bytes();
        let c = compiler(one + one / 2);
        let a = c.compile_ebnf("root ::= \"a\"+").unwrap();
        let _b = c.compile_ebnf("root ::= \"b\"+").unwrap();
        assert_eq!(c.cache_stats().0, 1);
        let a_again = c.compile_ebnf("root ::= \"a\"+").unwrap();
        assert!(!Arc::ptr_eq(&a, &a_again), "evicted entry was recompiled");
        // A zero budget disables caching.
        let c = compiler(0);
        let x = c.compile_ebnf("root ::= \"a\"+").unwrap();
        assert!(!Arc::ptr_eq(&x, &c.compile_ebnf("root ::= \"a\"+").unwrap()));
    }

    #[test]
    fn compiled_grammar_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::CompiledGrammar>();
        check::<crate::GrammarCompiler>();
        fn send<T: Send>() {}
        send::<crate::GrammarMatcher>();
    }
}
