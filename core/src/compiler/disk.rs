//! A directory of compiled grammars ([`GrammarCompiler::with_disk_cache`]): the compile
//! cache's entries as files, so a restarted server starts with its grammars — and the
//! masks they had computed — instead of compiling them again.
//!
//! One file per entry, named by a hash of the compile-cache key and holding the key
//! itself (a hash collision is a miss, not a wrong grammar) followed by
//! [`CompiledGrammar::to_bytes`]. Files are written to a temporary name and renamed,
//! so a reader never sees half a file. A file that cannot be loaded (corrupt, another
//! grammask version, another tokenizer) is a miss: the grammar is compiled afresh
//! and the file rewritten.
//!
//! [`GrammarCompiler::with_disk_cache`]: super::GrammarCompiler::with_disk_cache

use super::CompileError;
use super::CompiledGrammar;
use crate::automata::AutomataLimits;

type Result<T, E = CompileError> = std::result::Result<T, E>;
use crate::tokenizer::TokenizerInfo;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    loaded: AtomicU64,
    written: AtomicU64,
    rejected: AtomicU64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CompileError + '_ {
    move |source| CompileError::Io { path: path.display().to_string(), source }
}

impl DiskCache {
    pub fn open(dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        Ok(Self { dir, loaded: AtomicU64::new(0), written: AtomicU64::new(0), rejected: AtomicU64::new(0) })
    }

    fn path(&self, key: &str) -> PathBuf {
        let mut h = rustc_hash::FxHasher::default();
        h.write(key.as_bytes());
        self.dir.join(format!("{:016x}.gmcg", h.finish()))
    }

    /// The grammar saved under `key`, if there is one this build can load.
    pub fn load(
        &self,
        key: &str,
        tokenizer: &Arc<TokenizerInfo>,
        limits: &AutomataLimits,
    ) -> Option<CompiledGrammar> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        let loaded = bytes
            .split_at_checked(4)
            .and_then(|(n, rest)| {
                rest.split_at_checked(u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as usize)
            })
            .filter(|(k, _)| *k == key.as_bytes())
            .map(|(_, grammar)| CompiledGrammar::decode(grammar, tokenizer.clone(), limits));
        match loaded {
            Some(Ok(g)) => {
                self.loaded.fetch_add(1, Relaxed);
                Some(g)
            }
            _ => {
                self.rejected.fetch_add(1, Relaxed);
                None
            }
        }
    }

    /// Saves `grammar` under `key` (atomically: a temporary file renamed).
    pub fn store(&self, key: &str, grammar: &CompiledGrammar) -> Result<()> {
        let mut bytes = Vec::with_capacity(4 + key.len());
        bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        bytes.extend_from_slice(key.as_bytes());
        bytes.extend_from_slice(&grammar.to_bytes());
        let path = self.path(key);
        let n = self.written.load(Relaxed);
        let tmp = self.dir.join(format!(".tmp-{}-{n}-{:?}", std::process::id(), std::thread::current().id()));
        std::fs::write(&tmp, &bytes).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        self.written.fetch_add(1, Relaxed);
        Ok(())
    }

    /// `(loaded, written, rejected)` files.
    pub fn stats(&self) -> (u64, u64, u64) {
        (self.loaded.load(Relaxed), self.written.load(Relaxed), self.rejected.load(Relaxed))
    }
}
