//! A compile cache keyed by spec text + options + tokenizer, bounded by bytes (LRU).
//!
//! Compiled grammars grow after they are cached, as fills compute their masks lazily. So
//! every grammar a compiler builds is tied to the cache's [`Account`]: its mask store
//! reports each new mask there, and once the growth since the last count passes a
//! sixty-fourth of the budget the cache counts its entries again and evicts the least
//! recently used until it holds at most its budget. Eviction drops the cache's handle
//! only: a grammar still held by matchers lives on until the last of them is dropped,
//! outside the budget (each grammar is held to its own
//! [`CompileOptions::mask_memory_limit`](crate::CompileOptions::mask_memory_limit)).

use super::CompiledGrammar;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Least-recently-used cache of compiled grammars.
#[derive(Debug)]
pub(crate) struct CompileCache {
    shared: Arc<Shared>,
    account: Arc<Account>,
}

#[derive(Debug)]
struct Shared {
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

/// Where the grammars of one compiler report the bytes their masks add (see the module
/// docs).
#[derive(Debug)]
pub(crate) struct Account {
    cache: Weak<Shared>,
    /// Bytes added since the cache last counted.
    grown: AtomicUsize,
    /// Growth that makes the cache count again.
    every: usize,
}

impl Account {
    /// Notes `bytes` more held by a grammar's masks.
    pub fn grew(&self, bytes: usize) {
        if self.grown.fetch_add(bytes, Ordering::Relaxed) + bytes < self.every {
            return;
        }
        self.grown.store(0, Ordering::Relaxed);
        if let Some(cache) = self.cache.upgrade() {
            cache.trim(&mut cache.lock());
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent (every update
        // is a single insert/remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts the entries' bytes and evicts the least recently used until they fit.
    fn trim(&self, g: &mut Inner) {
        let mut total: usize = g.entries.values().map(|e| e.0.memory_bytes()).sum();
        while total > self.max_bytes {
            let Some(oldest) = g.entries.iter().min_by_key(|e| e.1 .1).map(|e| e.0.clone()) else { break };
            if let Some((v, _)) = g.entries.remove(&oldest) {
                total -= v.memory_bytes().min(total);
            }
        }
    }
}

impl CompileCache {
    pub fn new(max_bytes: usize) -> Self {
        let shared = Arc::new(Shared { max_bytes, inner: Mutex::new(Inner::default()) });
        let every = (max_bytes / 64).max(64 << 10);
        let account = Arc::new(Account { cache: Arc::downgrade(&shared), grown: AtomicUsize::new(0), every });
        Self { shared, account }
    }

    /// Where a grammar of this compiler reports its masks' growth.
    pub fn account(&self) -> Option<Arc<Account>> {
        self.enabled().then(|| self.account.clone())
    }

    /// Whether anything is ever kept (a zero byte bound keeps nothing).
    pub fn enabled(&self) -> bool {
        self.shared.max_bytes > 0
    }

    pub fn get(&self, key: &str) -> Option<Arc<CompiledGrammar>> {
        self.lookup(key, true)
    }

    /// [`Self::get`], counting a hit but not a miss (a second look for the same request).
    pub fn get_again(&self, key: &str) -> Option<Arc<CompiledGrammar>> {
        self.lookup(key, false)
    }

    fn lookup(&self, key: &str, count_miss: bool) -> Option<Arc<CompiledGrammar>> {
        let mut g = self.shared.lock();
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
                g.misses += u64::from(count_miss);
                None
            }
        }
    }

    /// Every entry (for writing them out).
    pub fn entries(&self) -> Vec<(String, Arc<CompiledGrammar>)> {
        self.shared.lock().entries.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect()
    }

    pub fn insert(&self, key: String, value: Arc<CompiledGrammar>) {
        if !self.enabled() {
            return;
        }
        let mut g = self.shared.lock();
        g.clock += 1;
        let now = g.clock;
        g.entries.insert(key, (value, now));
        self.shared.trim(&mut g);
    }

    /// `(entries, hits, misses)`.
    pub fn stats(&self) -> (usize, u64, u64) {
        let g = self.shared.lock();
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
