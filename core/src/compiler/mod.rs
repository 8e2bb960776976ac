//! The compiler: grammar → automata → compiled grammar with a lazily filled token-mask cache.
//!
//! ```text
//! GrammarSpec ──parse──▶ Grammar ──Automata::build──▶ Automata ──▶ CompiledGrammar
//!                                                        (masks: one lazy slot per state)
//! ```
//!
//! # Time to first mask
//! Compiling builds the automata (microseconds to a few milliseconds) and then spends at
//! most [`CompileOptions::eager_budget`] (250 µs) beyond the start states computing the
//! masks of the states nearest the start; everything else is lazy. A state's mask is computed the first time a matcher
//! needs it, then cached in the shared [`CompiledGrammar`] for every matcher and every
//! later step (`OnceLock`: concurrent matchers never compute the same state twice, and
//! readers take no lock afterwards). The first mask therefore costs only the states live
//! at the start, like llguidance's lazy approach, while later masks approach XGrammar's
//! precomputed speed. Engines that want no lazy work on the decode path call
//! [`CompiledGrammar::precompute`] (parallel, rayon) before decoding, or let one thread
//! compute the rest while decoding starts ([`CompileOptions::background_precompute`],
//! [`CompiledGrammar::precompute_in_background`]): the first mask comes as early as with
//! lazy masks, and the later ones are ready by the time a generation reaches them.

mod cache;
mod disk;
mod diverge;
mod error;
mod flight;
mod leaf;
pub(crate) mod mask;
mod serialize;
mod staged;
mod store;

use crate::automata::{Automata, AutomataLimits, DEAD};
use crate::budget::{self, BudgetError, Meter, Phase};
use crate::error::Result;
use crate::grammar::{parse_ebnf, Grammar, ParseLimits};
use crate::json_schema::{json_schema_str_to_grammar, json_schema_to_grammar, parse_text, JsonSchemaOptions};
use crate::regex::{regex_to_grammar, RegexLimits};
use crate::structural_tag::{lower_for_compile, Lowered, Rest};
use crate::tokenizer::TokenizerInfo;
use crate::Error;
use cache::CompileCache;
use disk::DiskCache;
pub use error::CompileError;
use leaf::{LeafKey, LeafMasks};
pub(crate) use mask::StateMask;
use rayon::prelude::*;
use rustc_hash::FxHashMap;
pub use serialize::FORMAT_VERSION;
use staged::Finishing;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
pub(crate) use store::Accepted;
use store::MaskStore;

/// What to compile.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum GrammarSpec {
    /// EBNF text and the name of its root rule.
    Ebnf {
        /// The grammar text.
        text: String,
        /// The start rule (usually `root`).
        root: String,
    },
    /// The builtin JSON grammar (ECMA-404).
    BuiltinJson,
    /// A JSON Schema (as JSON text) and conversion options.
    JsonSchema {
        /// The schema document.
        schema: String,
        /// Whitespace, strictness and limits.
        options: JsonSchemaOptions,
    },
    /// A regular expression (ECMA-262 dialect) the whole output must match.
    Regex(String),
    /// An already-built grammar IR.
    Grammar(Grammar),
    /// A structural tag (XGrammar's JSON format, see [`crate::structural_tag`]).
    StructuralTag(String),
    /// A Lark grammar in llguidance's dialect (see [`crate::lark`]); `start` is the root.
    Lark(String),
}

impl GrammarSpec {
    /// EBNF text with root rule `root`.
    pub fn ebnf(text: impl Into<String>) -> Self {
        GrammarSpec::Ebnf { text: text.into(), root: "root".into() }
    }

    /// A JSON Schema spec with default options (compact, strict).
    pub fn json_schema(schema: impl Into<String>) -> Self {
        GrammarSpec::JsonSchema { schema: schema.into(), options: JsonSchemaOptions::default() }
    }

    /// The spec's text for the compile cache; `parsed` is a JSON Schema's document.
    fn cache_key(&self, parsed: Option<&serde_json::Value>) -> String {
        match self {
            GrammarSpec::Ebnf { text, root } => format!("ebnf\0{root}\0{text}"),
            GrammarSpec::BuiltinJson => "builtin-json".into(),
            // Canonical JSON: the same schema with different spacing hits the same entry.
            GrammarSpec::JsonSchema { schema, options } => {
                let canonical = parsed.map_or_else(|| schema.clone(), |v| v.to_string());
                format!("json-schema\0{options:?}\0{canonical}")
            }
            GrammarSpec::Regex(r) => format!("regex\0{r}"),
            // Debug, not the EBNF text: that leaves out `keep` and member sets.
            GrammarSpec::Grammar(g) => format!("ir\0{g:?}"),
            GrammarSpec::StructuralTag(t) => format!("structural-tag\0{t}"),
            GrammarSpec::Lark(t) => format!("lark\0{t}"),
        }
    }

    /// Parses the spec to grammar IR.
    pub fn to_grammar(&self, limits: &ParseLimits) -> Result<Grammar> {
        Ok(match self {
            GrammarSpec::Ebnf { text, root } => parse_ebnf(text, root, limits)?,
            GrammarSpec::BuiltinJson => crate::grammar::json_grammar(),
            GrammarSpec::JsonSchema { schema, options } => json_schema_str_to_grammar(schema, options)?,
            GrammarSpec::Regex(r) => regex_to_grammar(r, &RegexLimits::default())?,
            GrammarSpec::Grammar(g) => g.clone(),
            GrammarSpec::StructuralTag(t) => {
                crate::structural_tag::structural_tag_to_grammar_with(t, limits)?
            }
            GrammarSpec::Lark(t) => {
                let lark_limits =
                    crate::lark::LarkLimits { max_repeat: limits.max_repeat, ..Default::default() };
                crate::lark::lark_to_grammar_with(t, &lark_limits)?
            }
        })
    }
}

/// Compilation options.
#[derive(Debug, Clone)]
pub struct CompileOptions {
    /// Limits on grammar text.
    pub parse: ParseLimits,
    /// Limits on automata size.
    pub automata: AutomataLimits,
    /// Time the compiler may spend computing state masks before it returns, beyond the
    /// states live at the start (which the first mask needs anyway): nearest states first
    /// (default 250 µs; zero: fully lazy). Small grammars are then largely precomputed
    /// at a cost well under llguidance-like start-up times, and a large grammar starts
    /// with its first states ready; the rest stay lazy. Not spent on a grammar that
    /// starts in free text (a structural tag before its first trigger), whose next tokens
    /// stay in the states the first mask computes.
    pub eager_budget: Duration,
    /// Bytes of leaf-rule masks a [`GrammarCompiler`] shares between the grammars it
    /// compiles (default 64 MiB; 0 disables): a rule that calls no other rule — a JSON
    /// string, a number — has the same mask in every grammar where its automaton and the
    /// bytes that may follow it are the same, so its vocabulary walk is done once per
    /// tokenizer, not once per grammar.
    pub leaf_cache_bytes: usize,
    /// After a compile returns (or a grammar is loaded from the disk cache), compute every
    /// other state's mask on a background thread, nearest states first
    /// ([`CompiledGrammar::precompute_in_background`]; default off: the library starts no
    /// thread unless asked). The compile then spends nothing of [`Self::eager_budget`]
    /// beyond the start states' masks, which the first fill needs at once (computed in
    /// the compile, where its helper threads can share the walks). For an engine whose decode
    /// thread waits on a forward pass each step: the first mask comes as early as with
    /// lazy masks, and the masks a tool call needs are ready before the model writes it,
    /// while the free text before it is generated.
    pub background_precompute: bool,
    /// Compile a structural tag with many argument schemas (a tool-calling tag with at
    /// least [`STAGED_MIN_SCHEMAS`] tools) in two stages (default on): the compile
    /// returns a *shell* whose argument schemas are stand-ins — converted and checked,
    /// not built into automata — and a thread of its own builds the finished grammar.
    /// Matchers answer from the shell until the finished grammar is ready, or until a
    /// parse reaches a call's arguments, where they wait for it; every mask is the
    /// finished grammar's either way (see `compiler::staged`). The first mask of a
    /// 20-tool tag then comes about a third sooner (BENCHMARKS.md). A limit the arguments' automata
    /// exceed is then reported by the matchers ([`Error::Staged`]) rather than by the
    /// compile. Never staged with a disk cache (the file holds the finished grammar).
    pub staged: bool,
    /// Work units a compile may spend ([`crate::budget`]: schema conversion,
    /// intersections, NFA and DFA construction, minimization, the start states' masks,
    /// a staged compile's finishing job); past it the compile is [`Error::Budget`].
    /// Deterministic: the same spec under the same limit is refused on any machine under
    /// any load, and a compile that fits is not changed by it. `None`: unbounded. The
    /// default, [`DEFAULT_WORK_LIMIT`], is over every schema, grammar and tool list of the
    /// test corpora; [`CompiledGrammar::work_spent`] tells what a compile took.
    pub work_limit: Option<u64>,
    /// Bytes the grammar's token masks may hold ([`CompiledGrammar::memory_bytes`]'s
    /// masks: computed by the compile, lazily by fills, or in the background); once they
    /// hold this much, a fill that needs one more mask is refused with
    /// [`BudgetError::MaskMemory`] and background precompute stops. The masks already
    /// computed stay usable. `None`: unbounded. Default [`DEFAULT_MASK_MEMORY_LIMIT`]
    /// (1 GiB): a bound for a hostile grammar, far above what real ones hold (the builtin
    /// JSON grammar with every mask computed holds 171 KiB, BENCHMARKS.md).
    pub mask_memory_limit: Option<usize>,
}

/// [`CompileOptions::mask_memory_limit`]'s default: 1 GiB.
pub const DEFAULT_MASK_MEMORY_LIMIT: usize = 1 << 30;

/// [`CompileOptions::work_limit`]'s default (work units).
pub const DEFAULT_WORK_LIMIT: u64 = 1 << 30;

/// Per-call controls of a compile that are not properties of the grammar (so not part of
/// the cache key): a cancellation handle another thread may raise, and a deadline. Either
/// stops the compile at its next check (every [`budget::CHECK_EVERY`]
/// units) with [`Error::Budget`]; such a stop is never cached.
///
/// ```
/// use std::sync::Arc;
/// use grammask::{budget::CancelHandle, CompileControl, GrammarCompiler, GrammarSpec, TokenizerInfo, TokenizerOptions};
/// let vocab: Vec<Vec<u8>> = ["a", "b", "</s>"].iter().map(|s| s.as_bytes().to_vec()).collect();
/// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
/// let compiler = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
/// let cancel = CancelHandle::new();
/// cancel.cancel(); // e.g. the client went away
/// let control = CompileControl { cancel: Some(cancel), ..Default::default() };
/// let r = compiler.compile_with(&GrammarSpec::ebnf("root ::= \"a\"+"), &control);
/// assert!(matches!(r, Err(grammask::Error::Budget(_))));
/// // Not cached: the same spec compiles without the cancelled handle.
/// assert!(compiler.compile(&GrammarSpec::ebnf("root ::= \"a\"+")).is_ok());
/// # Ok::<(), grammask::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct CompileControl {
    /// Raised by another thread to stop the compile.
    pub cancel: Option<crate::budget::CancelHandle>,
    /// When the compile must have stopped.
    pub deadline: Option<Instant>,
}

/// Fewest JSON-style argument schemas a structural tag needs for a staged compile
/// ([`CompileOptions::staged`]): below it, what the shell saves is too little to pay
/// for compiling the root twice.
pub const STAGED_MIN_SCHEMAS: usize = 8;

impl Default for CompileOptions {
    fn default() -> Self {
        Self {
            parse: ParseLimits::default(),
            automata: AutomataLimits::default(),
            eager_budget: Duration::from_micros(250),
            leaf_cache_bytes: 64 << 20,
            background_precompute: false,
            staged: true,
            work_limit: Some(DEFAULT_WORK_LIMIT),
            mask_memory_limit: Some(DEFAULT_MASK_MEMORY_LIMIT),
        }
    }
}

/// Compiles specs against one tokenizer, with a shared compile cache.
///
/// ```
/// use std::sync::Arc;
/// use grammask::{GrammarCompiler, TokenizerInfo, TokenizerOptions};
/// let vocab: Vec<Vec<u8>> = ["a", "b", "ab", "</s>"].iter().map(|s| s.as_bytes().to_vec()).collect();
/// let opts = TokenizerOptions { stop_tokens: Some(vec![3]), ..Default::default() };
/// let compiler = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
/// let g1 = compiler.compile_ebnf("root ::= \"a\"+ \"b\"")?;
/// let g2 = compiler.compile_ebnf("root ::= \"a\"+ \"b\"")?;
/// assert!(Arc::ptr_eq(&g1, &g2)); // second compile is a cache hit
/// # Ok::<(), grammask::Error>(())
/// ```
#[derive(Debug)]
pub struct GrammarCompiler {
    tokenizer: Arc<TokenizerInfo>,
    options: CompileOptions,
    cache: CompileCache,
    leaf_masks: Arc<LeafMasks>,
    disk: Option<DiskCache>,
    /// Compiles under way, by cache key (single flight).
    flights: flight::Flights,
    /// Where compiles, their helpers and their background jobs run.
    workers: Workers,
}

/// Where a compiler's work runs: by default the caller's thread, rayon's global pool for
/// a compile's helpers, and a thread per background job (a staged compile's finishing,
/// background precompute); with [`GrammarCompiler::with_pool`], a pool the caller sized,
/// with a bounded queue of background jobs.
#[derive(Clone, Default)]
struct Workers {
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Background jobs queued or running on `pool`.
    queued: Arc<std::sync::atomic::AtomicUsize>,
    max_queued: usize,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.pool.as_ref().map(|p| p.current_num_threads()))
            .field("max_queued", &self.max_queued)
            .finish()
    }
}

impl Workers {
    /// Runs `f` on the pool (blocking this thread until it is done), or here.
    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(p) => p.install(f),
            None => f(),
        }
    }

    /// Starts `job` in the background: on the pool while its queue has room, or on a
    /// thread of its own without a pool. `false`: refused (the queue is full, or the
    /// system refused a thread), and the caller does the work itself.
    fn spawn(&self, name: &str, job: impl FnOnce() + Send + 'static) -> bool {
        use std::sync::atomic::Ordering;
        let Some(pool) = &self.pool else {
            return std::thread::Builder::new().name(name.into()).spawn(job).is_ok();
        };
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.max_queued {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let queued = self.queued.clone();
        pool.spawn(move || {
            struct Done(Arc<std::sync::atomic::AtomicUsize>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                }
            }
            let _done = Done(queued);
            // A panicking job must not take the pool's thread (rayon aborts the process
            // on a panic in a spawned job): it is reported where its result is awaited.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        });
        true
    }
}

/// Default compile-cache budget: 512 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 512 << 20;

impl GrammarCompiler {
    /// A compiler with default options and a [`DEFAULT_CACHE_BYTES`] cache.
    pub fn new(tokenizer: Arc<TokenizerInfo>) -> Self {
        Self::with_options(tokenizer, CompileOptions::default(), DEFAULT_CACHE_BYTES)
    }

    /// A compiler with explicit options and cache budget (0 disables the cache).
    pub fn with_options(tokenizer: Arc<TokenizerInfo>, options: CompileOptions, cache_bytes: usize) -> Self {
        let leaf_masks = Arc::new(LeafMasks::new(options.leaf_cache_bytes));
        Self {
            tokenizer,
            options,
            cache: CompileCache::new(cache_bytes),
            leaf_masks,
            disk: None,
            flights: Default::default(),
            workers: Workers::default(),
        }
    }

    /// Runs every compile on `pool` (the caller's thread waits for it), with the
    /// compile's helpers taken from the same pool, and the background jobs of its
    /// compiles — a staged compile's finishing job, background precompute — queued on it,
    /// at most `max_queued` at once: past that a staged compile finishes inside the call
    /// (its shell is returned with the finished grammar ready) and background precompute
    /// is skipped (masks stay lazy). So the threads a compiler uses are the pool's, however
    /// many requests compile at once.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{GrammarCompiler, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
    /// let pool = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap());
    /// let compiler = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?))
    ///     .with_pool(pool, 4);
    /// compiler.compile_ebnf(r#"root ::= "a"+ "b""#)?;
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn with_pool(mut self, pool: Arc<rayon::ThreadPool>, max_queued: usize) -> Self {
        self.workers = Workers { pool: Some(pool), queued: Default::default(), max_queued };
        self
    }

    /// Also keeps compiled grammars as files in `dir` (created if missing), keyed as the
    /// memory cache: a compile that misses in memory loads the file if one is there,
    /// and a fresh compile writes one. [`Self::persist`] rewrites every cached grammar
    /// with the masks computed since, so a restart starts warm. Files this build cannot
    /// load (corrupt, another version or tokenizer) are misses, then overwritten.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{GrammarCompiler, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
    /// let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?);
    /// let dir = std::env::temp_dir().join(format!("grammask-doc-{}", std::process::id()));
    /// let first = GrammarCompiler::new(tok.clone()).with_disk_cache(&dir)?;
    /// first.compile_ebnf(r#"root ::= "a"+ "b""#)?;
    /// first.persist()?;
    /// // A new process: the grammar comes from the file.
    /// let second = GrammarCompiler::new(tok).with_disk_cache(&dir)?;
    /// second.compile_ebnf(r#"root ::= "a"+ "b""#)?;
    /// assert_eq!(second.disk_stats(), (1, 0, 0)); // (loaded, written, rejected)
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn with_disk_cache(mut self, dir: impl Into<std::path::PathBuf>) -> Result<Self> {
        self.disk = Some(DiskCache::open(dir.into())?);
        Ok(self)
    }

    /// Writes every grammar of the memory cache, with the masks it has computed so far,
    /// to the disk cache; returns how many. Nothing to do without a disk cache.
    pub fn persist(&self) -> Result<usize> {
        let Some(disk) = &self.disk else { return Ok(0) };
        let entries = self.cache.entries();
        for (key, grammar) in &entries {
            disk.store(key, grammar)?;
        }
        Ok(entries.len())
    }

    /// `(loaded, written, rejected)` files of the disk cache (zeros without one).
    pub fn disk_stats(&self) -> (u64, u64, u64) {
        self.disk.as_ref().map_or((0, 0, 0), DiskCache::stats)
    }

    /// The tokenizer this compiler targets.
    pub fn tokenizer(&self) -> &Arc<TokenizerInfo> {
        &self.tokenizer
    }

    /// Compiles `spec`, or returns the cached result for the same spec and options.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Arc<CompiledGrammar>> {
        self.compile_with(spec, &CompileControl::default())
    }

    /// [`Self::compile`], stopped early by `control`'s cancellation or deadline.
    pub fn compile_with(&self, spec: &GrammarSpec, control: &CompileControl) -> Result<Arc<CompiledGrammar>> {
        // A JSON Schema is parsed once, for the key and the conversion (a large schema's
        // parse is several percent of its compile); without a cache there is no key.
        let parsed = match spec {
            GrammarSpec::JsonSchema { schema, .. } => Some(parse_text(schema)),
            _ => None,
        };
        let key = (self.cache.enabled() || self.disk.is_some())
            .then(|| self.key(spec, parsed.as_ref().and_then(|p| p.as_ref().ok())));
        if let Some(hit) = key.as_deref().and_then(|k| self.cache.get(k)) {
            return Ok(Self::latest(hit));
        }
        if let (Some(disk), Some(key)) = (&self.disk, &key) {
            if let Some(mut loaded) = disk.load(key, &self.tokenizer, &self.options.automata) {
                loaded.tie(self.options.mask_memory_limit, self.cache.account());
                let loaded = Arc::new(loaded);
                if self.options.background_precompute {
                    self.workers.spawn("grammask-precompute", loaded.precompute_job());
                }
                self.cache.insert(key.clone(), loaded.clone());
                return Ok(loaded);
            }
        }
        let Some(key) = key else {
            let meter = Meter::new(self.options.work_limit, control.cancel.clone(), control.deadline);
            return self.compile_fresh(spec, parsed, meter, None);
        };
        // One compile for every caller asking for this key meanwhile, cancelled only when
        // none of them waits any more.
        self.flights.run(&key, control, |flight| {
            // (A compile of the same key may have landed between the lookup and here.)
            if let Some(hit) = self.cache.get_again(&key) {
                return Ok(hit);
            }
            let flight = flight.clone();
            let meter = Meter::shared(self.options.work_limit, Arc::new(move || flight.wanted()));
            self.compile_fresh(spec, parsed, meter, Some(&key))
        })
    }

    /// The cache key of `spec` (`value`: a JSON Schema's parsed text).
    fn key(&self, spec: &GrammarSpec, value: Option<&serde_json::Value>) -> String {
        format!("{}\0{:?}\0{}", spec.cache_key(value), self.options, self.tokenizer.fingerprint())
    }

    /// A cached staged grammar whose finished grammar is ready: that one.
    fn latest(hit: Arc<CompiledGrammar>) -> Arc<CompiledGrammar> {
        hit.finishing.as_ref().and_then(|f| f.get()?.ok()).unwrap_or(hit)
    }

    /// The compiled grammar of `spec` if the memory cache holds it (counted as a hit),
    /// without compiling: a server can answer a request whose grammar it has seen before
    /// without waiting for a compile slot.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{GrammarCompiler, GrammarSpec, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
    /// let compiler = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
    /// let spec = GrammarSpec::ebnf(r#"root ::= "a"+"#);
    /// assert!(compiler.cached(&spec).is_none());
    /// let compiled = compiler.compile(&spec)?;
    /// assert!(Arc::ptr_eq(&compiler.cached(&spec).unwrap(), &compiled));
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn cached(&self, spec: &GrammarSpec) -> Option<Arc<CompiledGrammar>> {
        if !self.cache.enabled() {
            return None;
        }
        let parsed = match spec {
            GrammarSpec::JsonSchema { schema, .. } => Some(parse_text(schema).ok()?),
            _ => None,
        };
        self.cache.get_again(&self.key(spec, parsed.as_ref())).map(Self::latest)
    }

    /// A compile past the caches under `meter`, on the compiler's workers; cached under
    /// `key`.
    fn compile_fresh(
        &self,
        spec: &GrammarSpec,
        parsed: Option<std::result::Result<serde_json::Value, crate::json_schema::SchemaError>>,
        meter: Arc<Meter>,
        key: Option<&str>,
    ) -> Result<Arc<CompiledGrammar>> {
        // Its independent pieces (a tag's schemas, the rules' automata) shared with the
        // pool's other threads where they are worth it (`crew`).
        let leaf = (self.options.leaf_cache_bytes > 0).then(|| self.leaf_masks.clone());
        let compiled = self.workers.install(|| {
            budget::scope(Some(meter.clone()), || {
                let r = crate::crew::scope(|| self.compile_uncached(spec, parsed, leaf));
                // A phase that met the budget's stop may have turned it into its own error
                // (a schema's, with its pointer) or an approximation: the stop is the answer.
                match meter.stopped() {
                    Some(e) => Err(Error::Budget(e)),
                    None => r,
                }
            })
        })?;
        let _ = compiled.work.set(meter.spent());
        if self.options.background_precompute && compiled.finishing.is_none() {
            self.workers.spawn("grammask-precompute", compiled.precompute_job());
        }
        if let Some(key) = key {
            // A cache that cannot be written is no reason to fail the compile.
            if let Some(disk) = &self.disk {
                let _ = disk.store(key, &compiled);
            }
            self.cache.insert(key.to_string(), compiled.clone());
        }
        Ok(compiled)
    }

    /// A compile's work past the caches, inside its budget and crew scopes.
    fn compile_uncached(
        &self,
        spec: &GrammarSpec,
        parsed: Option<std::result::Result<serde_json::Value, crate::json_schema::SchemaError>>,
        leaf: Option<Arc<LeafMasks>>,
    ) -> Result<Arc<CompiledGrammar>> {
        let grammar = match (spec, parsed) {
            (GrammarSpec::JsonSchema { options, .. }, Some(value)) => {
                json_schema_to_grammar(&value?, options)?
            }
            (GrammarSpec::StructuralTag(t), _) if self.options.staged && self.disk.is_none() => {
                match lower_for_compile(t, &self.options.parse, STAGED_MIN_SCHEMAS)? {
                    Lowered::Whole(g) => g,
                    Lowered::Staged(shell, rest) => {
                        return self.build_staged(shell, rest, leaf.clone(), true)
                    }
                }
            }
            _ => spec.to_grammar(&self.options.parse)?,
        };
        let account = self.cache.account();
        Ok(Arc::new(CompiledGrammar::build(grammar, self.tokenizer.clone(), &self.options, leaf, account)?))
    }

    /// A staged compile's shell (its start states' masks computed), with the thread that
    /// builds the finished grammar started (`start`; else the first matcher that needs
    /// the finished grammar builds it).
    fn build_staged(
        &self,
        shell: Grammar,
        rest: Rest,
        leaf: Option<Arc<LeafMasks>>,
        start: bool,
    ) -> Result<Arc<CompiledGrammar>> {
        let mut compiled = CompiledGrammar::from_automata(
            Automata::build_owned(shell, &self.options.automata)?,
            self.tokenizer.clone(),
            leaf.clone(),
        );
        compiled.tie(self.options.mask_memory_limit, self.cache.account());
        compiled.start_masks();
        let (tokenizer, options, workers) =
            (self.tokenizer.clone(), self.options.clone(), self.workers.clone());
        let account = self.cache.account();
        // The finishing job is the same compile's work: it spends what is left of its
        // budget. Not the call's cancellation or deadline: the shell is returned (and
        // cached) before the job ends, and a stop belonging to that call must not become
        // the cached grammar's verdict.
        let meter = budget::current().map(|m| m.detached());
        let finishing = Finishing::new(Box::new(move |shell: Option<Arc<CompiledGrammar>>| {
            budget::scope(meter.clone(), || {
                let r = Self::finish_staged(shell, rest, leaf, tokenizer, &options, &workers, account);
                match meter.as_ref().and_then(|m| m.stopped()) {
                    Some(e) => Err(Error::Budget(e)),
                    None => r,
                }
            })
        }));
        compiled.finishing = Some(finishing.clone());
        let compiled = Arc::new(compiled);
        finishing.start(&compiled, start.then_some(&self.workers));
        Ok(compiled)
    }

    /// A staged compile's finishing job: the finished grammar, adopting the shell's masks.
    fn finish_staged(
        shell: Option<Arc<CompiledGrammar>>,
        rest: Rest,
        leaf: Option<Arc<LeafMasks>>,
        tokenizer: Arc<TokenizerInfo>,
        options: &CompileOptions,
        workers: &Workers,
        account: Option<Arc<cache::Account>>,
    ) -> Result<Arc<CompiledGrammar>> {
        // With masks computed in the background, the shell's free text first: the
        // matchers write it while the finished grammar is built, and it takes them.
        if let (Some(shell), true) = (&shell, options.background_precompute) {
            staged::precompute_root(shell, staged::SHELL_PRECOMPUTE_BUDGET);
        }
        let full = crate::crew::scope(|| -> Result<_> {
            let grammar = rest.finish(&options.parse)?;
            let automata = Automata::build_owned(grammar, &options.automata)?;
            let mut full = CompiledGrammar::from_automata(automata, tokenizer, leaf);
            full.tie(options.mask_memory_limit, account);
            // Before its own first masks (the start states' are among the shell's),
            // and again last, for the masks the shell computed meanwhile.
            if let Some(shell) = &shell {
                staged::adopt_masks(&full, shell);
            }
            full.first_masks(options);
            if let Some(shell) = &shell {
                staged::adopt_masks(&full, shell);
            }
            Ok(Arc::new(full))
        })?;
        if options.background_precompute {
            workers.spawn("grammask-precompute", full.precompute_job());
        }
        Ok(full)
    }

    /// The shell of structural tag `text`, whose finished grammar is built only when a
    /// matcher needs it (so a test knows why its matchers moved).
    #[cfg(test)]
    pub(crate) fn compile_staged_on_demand(&self, text: &str) -> Arc<CompiledGrammar> {
        match lower_for_compile(text, &self.options.parse, STAGED_MIN_SCHEMAS) {
            Ok(Lowered::Staged(shell, rest)) => match self.build_staged(shell, rest, None, false) {
                Ok(g) => g,
                Err(e) => panic!("{e}"),
            },
            Ok(Lowered::Whole(_)) => panic!("not staged"),
            Err(e) => panic!("{e}"),
        }
    }

    /// Compiles EBNF text with root rule `root`.
    pub fn compile_ebnf(&self, text: &str) -> Result<Arc<CompiledGrammar>> {
        self.compile(&GrammarSpec::ebnf(text))
    }

    /// Compiles the builtin JSON grammar.
    pub fn compile_builtin_json(&self) -> Result<Arc<CompiledGrammar>> {
        self.compile(&GrammarSpec::BuiltinJson)
    }

    /// `(entries, hits, misses)` of the compile cache.
    pub fn cache_stats(&self) -> (usize, u64, u64) {
        self.cache.stats()
    }

    /// Bytes the cached grammars hold now, counted afresh ([`CompiledGrammar::memory_bytes`]
    /// of each): at most the cache's budget after each count, which comes at every
    /// insertion and whenever the cached grammars' masks grew by a sixty-fourth of the
    /// budget (at least 64 KiB) since the last.
    pub fn cache_bytes(&self) -> usize {
        self.cache.entries().iter().map(|(_, g)| g.memory_bytes()).sum()
    }

    /// `(entries, bytes, hits)` of the leaf-rule masks shared between this compiler's
    /// grammars (see [`CompileOptions::leaf_cache_bytes`]).
    pub fn shared_mask_stats(&self) -> (usize, usize, usize) {
        self.leaf_masks.stats()
    }
}

/// A grammar compiled against a tokenizer: automata plus the per-state token-mask cache.
/// `Send + Sync`; share it with `Arc` across matchers and threads.
#[derive(Debug)]
pub struct CompiledGrammar {
    automata: Automata,
    tokenizer: Arc<TokenizerInfo>,
    masks: Vec<OnceLock<Slot>>,
    /// The masks' id lists and bitsets, each stored once and shared.
    store: MaskStore,
    /// Per rule, the last state whose mask was computed by a vocabulary walk: the next
    /// state of the rule that needs one first tries to share it (see
    /// [`Automata::agreement_depth`]; consecutive positions of a long counted repetition).
    recent: Mutex<FxHashMap<u32, u32>>,
    /// Per rule, on first need: a predecessor of each of its states inside the rule (a
    /// state with a byte move to it; `DEAD` if none), to find the nearest walked state up
    /// a chain (`"\n" [ \t]{0,20}`: the tokens jump from position 0 to 5 to 9).
    preds: Vec<OnceLock<Option<Box<[u32]>>>>,
    /// Leaf-rule masks shared with the other grammars of the same compiler.
    leaf: Option<Arc<LeafMasks>>,
    /// Per rule, its leaf signature (`None`: not a leaf), computed on first use.
    leaf_sigs: Vec<OnceLock<Option<Arc<[u32]>>>>,
    /// Bytes of the masks taken from `leaf` (counted in [`Self::memory_bytes`]).
    shared_bytes: std::sync::atomic::AtomicUsize,
    /// Special tokens whose text occurs in one of the grammar's [`Grammar::markers`]
    /// (ascending): checked against the parse state at every fill, outside the mask cache
    /// (the cache covers the tokens every grammar may produce).
    marker_tokens: Box<[u32]>,
    /// A staged compile's shell: its finished grammar ([`CompileOptions::staged`]).
    finishing: Option<Arc<Finishing>>,
    /// Work units its compile spent ([`Self::work_spent`]).
    work: OnceLock<u64>,
    /// [`CompileOptions::mask_memory_limit`].
    mask_limit: Option<usize>,
    /// One computation of a state's mask at a time, by state modulo their number
    /// ([`Self::computed`]).
    computing: [Mutex<()>; 16],
}

/// A state's mask, and the state it behaves like for every token.
#[derive(Debug)]
struct Slot {
    mask: StateMask,
    /// The walked state whose mask this one shares because the two agree on every input
    /// a token can hold (the state itself otherwise). Every token then runs alike from
    /// both — through the rule's end too — so the matcher may reuse a mask it checked
    /// from one at the other (consecutive positions of a long bounded string).
    alike: u32,
}

/// Moves up a chain of predecessors (or back through the copies of a spliced repetition)
/// searched for a walked state to share a mask with.
const CHAIN_LOOKBACK: usize = 32;

/// Largest rule (states × byte classes) given a predecessor table: building it reads the
/// rule's transitions once, which must stay small next to the walk it saves (~30 µs).
const MAX_PRED_ENTRIES: usize = 1 << 15;

impl CompiledGrammar {
    /// Builds the automata for `grammar`; masks are computed on first use.
    pub fn new(grammar: &Grammar, tokenizer: Arc<TokenizerInfo>, options: &CompileOptions) -> Result<Self> {
        Self::build(grammar.clone(), tokenizer, options, None, None)
    }

    fn build(
        grammar: Grammar,
        tokenizer: Arc<TokenizerInfo>,
        options: &CompileOptions,
        leaf: Option<Arc<LeafMasks>>,
        account: Option<Arc<cache::Account>>,
    ) -> Result<Self> {
        let automata = Automata::build_owned(grammar, &options.automata)?;
        let mut compiled = Self::from_automata(automata, tokenizer, leaf);
        compiled.tie(options.mask_memory_limit, account);
        compiled.first_masks(options);
        Ok(compiled)
    }

    /// Holds the grammar's masks to `limit` bytes and reports their growth to `account`
    /// (its compiler's cache).
    fn tie(&mut self, limit: Option<usize>, account: Option<Arc<cache::Account>>) {
        self.mask_limit = limit;
        if let Some(a) = account {
            let _ = self.store.account.set(a);
        }
    }

    /// The masks a compile computes before it returns.
    fn first_masks(&self, options: &CompileOptions) {
        // With a background thread to come, only the start states' masks are computed
        // here: the first fill needs them at once, and here the compile's helpers can
        // share their walks (the thread computes the rest, nearest first).
        if options.background_precompute {
            self.start_masks();
        } else {
            self.precompute_within(options.eager_budget);
        }
    }

    /// Automata with no mask computed yet.
    fn from_automata(
        automata: Automata,
        tokenizer: Arc<TokenizerInfo>,
        leaf: Option<Arc<LeafMasks>>,
    ) -> Self {
        let masks = (0..automata.num_states()).map(|_| OnceLock::new()).collect();
        let leaf_sigs = (0..automata.rule_start.len()).map(|_| OnceLock::new()).collect();
        let preds = (0..automata.rule_start.len()).map(|_| OnceLock::new()).collect();
        let marker_tokens = marker_tokens(&automata.grammar().markers, &tokenizer);
        Self {
            automata,
            tokenizer,
            masks,
            store: MaskStore::default(),
            recent: Mutex::default(),
            preds,
            leaf,
            leaf_sigs,
            shared_bytes: Default::default(),
            marker_tokens,
            finishing: None,
            work: OnceLock::new(),
            mask_limit: None,
            computing: Default::default(),
        }
    }

    /// Whether this is a staged compile's shell ([`CompileOptions::staged`]), whose
    /// matchers move to [`Self::finished`] once it is ready.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::tool_calling::{model_structural_tag, tools_from_json, Family, PresetOptions};
    /// use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = (0u8..128).map(|b| vec![b]).chain([b"</s>".to_vec()]).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![128]), ..Default::default() };
    /// let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?);
    /// // Eight tools: enough for a staged compile.
    /// let tools: Vec<serde_json::Value> = (0..8)
    ///     .map(|i| serde_json::json!({"type": "function", "function": {"name": format!("f{i}"),
    ///         "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}}))
    ///     .collect();
    /// let tools = tools_from_json(&serde_json::Value::Array(tools))?;
    /// let tag = model_structural_tag(Family::from_name("qwen_3")?, &tools, &PresetOptions::default())?;
    /// let spec = GrammarSpec::StructuralTag(tag.structural_tag.to_string());
    /// let compiled = GrammarCompiler::new(tok).compile(&spec)?;
    /// assert!(compiled.is_staged());
    /// let mut m = GrammarMatcher::new(compiled.clone());
    /// m.accept_string("Let me check.</think>\n\n<tool_call>\n{\"name\": \"f3\", \"arguments\": {\"n\": 4}}")?;
    /// // At a call's arguments (if not before) the matcher moved to the finished grammar.
    /// assert!(!m.compiled().is_staged());
    /// assert!(!compiled.finished()?.is_staged());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_staged(&self) -> bool {
        self.finishing.is_some()
    }

    /// The finished grammar of a staged compile, waiting for it to be built (this grammar
    /// itself when it is not staged).
    pub fn finished(self: &Arc<Self>) -> Result<Arc<CompiledGrammar>> {
        match &self.finishing {
            Some(f) => f.wait(),
            None => Ok(self.clone()),
        }
    }

    /// The finished grammar's builder, for a staged compile's shell.
    pub(crate) fn finishing(&self) -> Option<&Arc<Finishing>> {
        self.finishing.as_ref()
    }

    /// The special tokens this grammar may produce (see [`Grammar::markers`]), ascending.
    pub fn marker_tokens(&self) -> &[u32] {
        &self.marker_tokens
    }

    /// Computes the masks of the states live at the start (the first fill's), charging
    /// the compile's budget a vocabulary's worth for each (a walk visits at most about
    /// that many trie nodes; the nodes it does visit depend on which masks helpers or an
    /// earlier grammar computed first, and the count must not). A stop is reported by the
    /// compile.
    fn start_masks(&self) {
        let per_state = 1 + self.tokenizer.vocab_size() as u64;
        for s in self.start_states() {
            if budget::charge(Phase::Masks, per_state).is_err() {
                return;
            }
            self.mask(s);
        }
    }

    /// Computes masks in breadth-first order from the root's start state until `budget`
    /// has elapsed; a state whose walk would overrun it is abandoned and stays lazy.
    fn precompute_within(&self, budget: Duration) {
        if budget.is_zero() {
            return;
        }
        // The states live at the start are needed by the first fill anyway: compute them
        // in full first, then spend the budget on the states nearest to them.
        self.start_masks();
        if self.starts_in_free_text() {
            return;
        }
        let deadline = Instant::now() + budget;
        self.for_nearest_states(|s| {
            if self.masks[s as usize].get().is_some() {
                return true;
            }
            // (Time-bounded, so not charged: the work it does varies with the machine, and
            // a verdict must not. A cancelled compile stops here too.)
            if Instant::now() >= deadline || budget::check(Phase::Masks).is_err() {
                return false;
            }
            // A state too wide to finish in the remaining budget is abandoned (lazy).
            if let Some(m) = self.compute_mask(s, Some(deadline)) {
                let _ = self.masks[s as usize].set(m);
            }
            true
        });
    }

    /// Whether the root starts in free text: its start state reads most ASCII bytes (3 in
    /// 4) back into itself (a structural tag's text before any trigger). The next tokens
    /// then mostly stay where the first fill already computed the masks, and the states
    /// an eager precompute would reach first (trigger prefixes, tool names) come only
    /// when a call starts, if ever. Measured on 20-tool Qwen / Llama / DeepSeek turns:
    /// the 250 µs budget cost 160–840 µs of time to first mask and changed neither the
    /// cold per-token mean nor its p99 beyond noise.
    fn starts_in_free_text(&self) -> bool {
        let a = &self.automata;
        let start = a.root_start().0;
        let row = a.row(start);
        let looping = (0..128).filter(|&b| row.get(a.byte_class[b] as usize) == start).count();
        4 * looping >= 3 * 128
    }

    /// The scanning states live before the first token: those the first fill reads.
    fn start_states(&self) -> Vec<u32> {
        let a = &self.automata;
        let start = crate::matcher::earley::Earley::new(a, a.root_start().0);
        let mut v: Vec<u32> = start.last_set().iter().map(|it| it.state).filter(|&s| a.scans(s)).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Calls `f` on the scannable states in breadth-first order from the root's start
    /// state, through byte moves and into called rules, while it returns `true`: the order
    /// in which a generation can first reach them, so precomputing in this order readies
    /// the nearest masks first.
    fn for_nearest_states(&self, mut f: impl FnMut(u32) -> bool) {
        let a = &self.automata;
        let mut seen = vec![false; a.num_states()];
        let mut queue = std::collections::VecDeque::from([a.root_start().0]);
        seen[a.root_start().0 as usize] = true;
        while let Some(s) = queue.pop_front() {
            if a.nodes[s as usize].scannable && !f(s) {
                return;
            }
            let rules = a.edges(s).iter().flat_map(|&(r, t)| [a.rule_start[r as usize], t]);
            for t in a.row(s).iter().filter(|&t| t != DEAD).chain(rules) {
                if !seen[t as usize] {
                    seen[t as usize] = true;
                    queue.push_back(t);
                }
            }
        }
    }

    /// The automata.
    pub fn automata(&self) -> &Automata {
        &self.automata
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Arc<TokenizerInfo> {
        &self.tokenizer
    }

    /// The token mask of a scannable state, computed now if this is its first use.
    #[inline]
    pub(crate) fn mask(&self, state: u32) -> &StateMask {
        &self.slot(state).mask
    }

    #[inline]
    fn slot(&self, state: u32) -> &Slot {
        if let Some(s) = self.computed(state) {
            return s;
        }
        // (Only a fill's meter stops a walk: this caller asked for no limit.)
        match budget::scope(None, || self.computed(state)) {
            Some(s) => s,
            None => unreachable!("a walk without a deadline or a fill's limit always finishes"),
        }
    }

    /// The slot of `state`, computed here unless it is stored — one computation per state
    /// at a time: a state another thread is computing is waited for, never computed twice
    /// (with two at once, mistral.rs's parallel sequences met wrong masks in
    /// `tiny_model.rs`; the cause inside `compute_mask` is not identified). `None`: a
    /// fill's limit stopped the walk, and nothing was stored.
    fn computed(&self, state: u32) -> Option<&Slot> {
        let cell = &self.masks[state as usize];
        if let Some(s) = cell.get() {
            return Some(s);
        }
        let _one =
            self.computing[state as usize % self.computing.len()].lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = cell.get() {
            return Some(s);
        }
        let m = self.compute_mask(state, None)?;
        Some(cell.get_or_init(|| m))
    }

    /// [`Self::mask`] for a fill, which may be refused: past its meter's limit
    /// ([`crate::budget::Meter::for_fill`]) or the grammar's mask memory cap, with no
    /// mask stored.
    #[inline]
    pub(crate) fn try_mask(&self, state: u32) -> std::result::Result<&StateMask, BudgetError> {
        Ok(&self.try_slot(state)?.mask)
    }

    /// The state `state` behaves like for every token (see [`Slot::alike`]), computing its
    /// mask if needed (and allowed: see [`Self::try_mask`]).
    #[inline]
    pub(crate) fn try_alike(&self, state: u32) -> std::result::Result<u32, BudgetError> {
        Ok(self.try_slot(state)?.alike)
    }

    fn try_slot(&self, state: u32) -> std::result::Result<&Slot, BudgetError> {
        if let Some(s) = self.masks[state as usize].get() {
            return Ok(s);
        }
        if let Some(limit) = self.mask_limit {
            let bytes = self.mask_bytes();
            if bytes >= limit {
                return Err(BudgetError::MaskMemory { bytes, limit });
            }
        }
        self.computed(state).ok_or_else(|| {
            budget::current().and_then(|m| m.stopped()).unwrap_or(BudgetError::Exceeded {
                phase: Phase::Fill,
                spent: 0,
                limit: 0,
            })
        })
    }

    /// Bytes held by the masks (own and shared), without the automata.
    fn mask_bytes(&self) -> usize {
        self.store.bytes() + self.shared_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The mask of `state`: shared with the rule's last walked state when the two agree
    /// on every input a token can hold, completed from it by walking only the longer
    /// tokens when they agree on the shorter ones, otherwise walked (`None` past
    /// `deadline`).
    fn compute_mask(&self, state: u32, deadline: Option<Instant>) -> Option<Slot> {
        let slot = |mask| Some(Slot { mask, alike: state });
        /// Pairs of states compared before giving up on sharing (the comparison is then
        /// still far cheaper than a walk).
        const MAX_PAIRS: usize = 4096;
        /// Trie nodes visited looking for where two states differ (a few microseconds).
        const MAX_FOCUS_NODES: usize = 16_384;
        /// Walks of fewer trie nodes than this are redone rather than patched.
        const MIN_FOCUS_WALK: u32 = 128;
        /// Which tokens a state sharing a walked state's mask still classifies itself.
        enum Partial {
            LongerThan(usize),
            Subtrees(Vec<(u32, u32)>),
        }
        let a = &self.automata;
        let rule = a.nodes[state as usize].rule;

        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner()).get(&rule).copied();
        // A state that agrees with a walked one for tokens up to some length takes their
        // classes from its mask and walks only the longer tokens. Candidates: the nearest
        // walked state up its chain, and the rule's last walked state.
        let trie = self.tokenizer.trie();
        let depth = trie.max_depth;
        let mut best: Option<(u32, &Slot, usize)> = None;
        // (In a spliced repetition, the nearest earlier copy of the state with a mask: the
        // two agree as far as the room left, read off the layout.)
        let copy = (1..=CHAIN_LOOKBACK as u32)
            .map_while(|k| a.earlier_copy(state, k))
            .find(|&s| self.masks[s as usize].get().is_some());
        for r in [copy, self.walked_ancestor(state), recent].into_iter().flatten() {
            if r == state || best.is_some_and(|(_, _, known)| known >= depth) {
                continue;
            }
            if let Some(m) = self.masks[r as usize].get() {
                let known = a.agreement_depth(state, r, depth, MAX_PAIRS);
                if best.map_or(true, |(_, _, k)| known > k) {
                    best = Some((r, m, known));
                }
            }
        }
        let mut partial = None;
        if let Some((r, m, known)) = best {
            if known >= depth {
                return Some(Slot { mask: m.mask.clone(), alike: m.alike });
            }
            let m = &m.mask;
            // The walk then classifies only the tokens below the subtrees where the two
            // states can differ at all ([`diverge`]: indentation positions differ on a
            // few dozen runs of blanks), or else those longer than the agreement depth
            // (chains near their end). Worth it only when these are few — under a
            // sixty-fourth, or an eighth, of the vocabulary — and when the walk to redo
            // is not itself cheap: a walk that visited few nodes (a state most tokens
            // leave at their first byte: chess moves) costs less than a patch. The
            // search for where the states differ stops once it costs a few such walks.
            let longer = trie.longer_than(known);
            // (Two copies of a chain state differ exactly on the tokens longer than the room
            // left, which the layout gave: no search for where they differ.)
            let focus = (m.walk_steps >= MIN_FOCUS_WALK && Some(r) != copy)
                .then(|| {
                    let max_nodes = (m.walk_steps as usize * 4).min(MAX_FOCUS_NODES);
                    let max_tokens = (trie.token_ids.len() / 64).min(longer.saturating_sub(1));
                    diverge::divergent_subtrees(a, trie, (state, r), max_nodes, max_tokens)
                })
                .flatten()
                .map(|(f, _)| f);
            partial = match focus {
                Some(f) if f.is_empty() => return slot(m.clone()),
                Some(f) => Some((m, Partial::Subtrees(f))),
                None => (longer * 8 <= trie.token_ids.len()).then_some((m, Partial::LongerThan(known))),
            };
        }
        let key = self.leaf_key(state);
        if let (Some(cache), Some(key)) = (&self.leaf, &key) {
            if let Some(m) = cache.get(key) {
                self.shared_bytes.fetch_add(leaf::mask_bytes(&m), std::sync::atomic::Ordering::Relaxed);
                return slot(m);
            }
        }
        let (tok, store) = (&self.tokenizer, &self.store);
        let helpers = if deadline.is_none() { crate::crew::helpers_present() } else { 0 };
        let m = match partial {
            Some((base, Partial::LongerThan(known))) => {
                StateMask::compute_beyond(a, tok, state, store, deadline, base, known)?
            }
            Some((base, Partial::Subtrees(f))) => {
                StateMask::compute_focused(a, tok, state, store, deadline, base, &f)?
            }
            // A walk of the whole vocabulary, shared with the compile's helpers when some
            // are awake: the first masks, computed inside a compile.
            None if helpers > 0 => StateMask::compute_shared(a, tok, state, store, helpers + 1),
            None => StateMask::compute_until(a, tok, state, store, deadline)?,
        };
        self.recent.lock().unwrap_or_else(|p| p.into_inner()).insert(rule, state);
        if let (Some(cache), Some(key)) = (&self.leaf, key) {
            cache.insert(key, &m);
        }
        slot(m)
    }

    /// The nearest state up `state`'s chain of predecessors (at most [`CHAIN_LOOKBACK`]
    /// moves) whose mask is computed. Rules too large for the predecessor table
    /// ([`MAX_PRED_ENTRIES`] transitions) have none.
    fn walked_ancestor(&self, state: u32) -> Option<u32> {
        let a = &self.automata;
        let rule = a.nodes[state as usize].rule as usize;
        let first = a.rule_start[rule];
        let preds = self.preds[rule].get_or_init(|| {
            let end = a.rule_start.get(rule + 1).map_or(a.num_states() as u32, |&e| e);
            let n = (end - first) as usize;
            (n * a.n_classes <= MAX_PRED_ENTRIES).then(|| {
                let mut pred = vec![DEAD; n];
                for p in first..end {
                    for t in a.row(p).iter() {
                        if t != DEAD
                            && t != p
                            && (first..end).contains(&t)
                            && pred[(t - first) as usize] == DEAD
                        {
                            pred[(t - first) as usize] = p;
                        }
                    }
                }
                pred.into_boxed_slice()
            })
        });
        let preds = preds.as_ref()?;
        let mut s = state;
        for _ in 0..CHAIN_LOOKBACK {
            s = preds[(s - first) as usize];
            if s == DEAD || s == state {
                return None;
            }
            if self.masks[s as usize].get().is_some() {
                return Some(s);
            }
        }
        None
    }

    /// The key of `state` in the shared leaf-mask cache, if its rule is a leaf.
    fn leaf_key(&self, state: u32) -> Option<LeafKey> {
        self.leaf.as_ref()?;
        let a = &self.automata;
        let rule = a.nodes[state as usize].rule;
        // A walk that goes on past the rule's end reads its callers' continuation too.
        if a.has_cont(rule) {
            return None;
        }
        let sig = self.leaf_sigs[rule as usize].get_or_init(|| leaf::signature(a, rule)).clone()?;
        Some((sig, state - a.rule_start[rule as usize], a.follow[rule as usize].0))
    }

    /// Work units ([`crate::budget`]) its compile spent, to size
    /// [`CompileOptions::work_limit`]; 0 for a grammar built another way (bytes, disk,
    /// [`Self::new`]). A staged compile's shell counts its own work, not its finishing job's.
    pub fn work_spent(&self) -> u64 {
        self.work.get().copied().unwrap_or(0)
    }

    /// Computes every state's mask now, in parallel on the current rayon pool.
    pub fn precompute(&self) {
        // A shell's own masks are only its first fills': its finished grammar's instead.
        if let Some(f) = &self.finishing {
            if let Ok(full) = f.wait() {
                full.precompute();
            }
            return;
        }
        (0..self.masks.len() as u32)
            .into_par_iter()
            .filter(|&s| self.automata.nodes[s as usize].scannable)
            .for_each(|s| {
                self.mask(s);
            });
    }

    /// Spawns one thread that computes every state's mask not computed yet, nearest
    /// states first (e.g. during prompt prefill, or while a forward pass runs: a decode
    /// step that reaches a state first simply computes it itself, and a state being
    /// computed by the other side is waited for, never computed twice). The thread holds
    /// the grammar only weakly and stops once every other handle to it is dropped;
    /// `None` if the system refused a thread (the masks then stay lazy).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{GrammarCompiler, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "ab", "</s>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![3]), ..Default::default() };
    /// let compiler = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
    /// let g = compiler.compile_ebnf(r#"root ::= "a"+ "b" | "b"+ "a""#)?;
    /// if let Some(thread) = g.precompute_in_background() {
    ///     thread.join().expect("precompute thread");
    ///     let (computed, total) = g.mask_stats();
    ///     assert_eq!(computed, total);
    /// }
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn precompute_in_background(self: &Arc<Self>) -> Option<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("grammask-precompute".into()).spawn(self.precompute_job()).ok()
    }

    /// What [`Self::precompute_in_background`] runs: every mask not computed yet, nearest
    /// states first, while the grammar has other handles and its mask memory cap room.
    fn precompute_job(self: &Arc<Self>) -> Box<dyn FnOnce() + Send> {
        if let Some(f) = &self.finishing {
            let f = f.clone();
            return Box::new(move || {
                if let Ok(full) = f.wait() {
                    full.precompute_job()();
                }
            });
        }
        let weak = Arc::downgrade(self);
        Box::new(move || {
            let Some(me) = weak.upgrade() else { return };
            // The states live at the start are the first fill's: a compile computes them
            // before this spawn; after a load from disk, the caller's first fill does,
            // right after it (taken first here, that fill waited for this thread to be
            // scheduled and finish them). They go last (should no fill come).
            let first_fill = me.start_states();
            let mut order = Vec::new();
            me.for_nearest_states(|s| {
                if !first_fill.contains(&s) {
                    order.push(s);
                }
                true
            });
            order.extend(first_fill);
            drop(me);
            for s in order {
                let Some(me) = weak.upgrade() else { return };
                if me.try_mask(s).is_err() {
                    return;
                }
            }
        })
    }

    /// `(computed, total)` scannable states with a mask.
    pub fn mask_stats(&self) -> (usize, usize) {
        let total = self.automata.nodes.iter().filter(|n| n.scannable).count();
        let done = self.masks.iter().filter(|m| m.get().is_some()).count();
        (done, total)
    }

    /// Heap bytes held: automata plus the masks computed so far (not the shared tokenizer).
    pub fn memory_bytes(&self) -> usize {
        let finished = self.finishing.as_ref().and_then(|f| f.get()?.ok()).map_or(0, |g| g.memory_bytes());
        finished
            + self.automata.memory_bytes()
            + self.mask_bytes()
            + self.masks.len() * std::mem::size_of::<OnceLock<Slot>>()
    }
}

/// The special, non-stop tokens whose text occurs in one of `markers`.
fn marker_tokens(markers: &[String], tok: &TokenizerInfo) -> Box<[u32]> {
    if markers.is_empty() {
        return Box::default();
    }
    // A token can only occur in a marker if every one of its bytes does: most special
    // tokens (`<|reserved_special_token_17|>` against `{"name": "…`) fail this at once,
    // before a substring search of every marker (a 20-tool tag has 40 of them).
    let mut in_markers = [false; 256];
    for b in markers.iter().flat_map(|m| m.bytes()) {
        in_markers[b as usize] = true;
    }
    tok.special_ids()
        .iter()
        .copied()
        .filter(|id| !tok.stop_tokens().contains(id))
        .filter(|&id| {
            let b = tok.token_bytes(id);
            !b.is_empty()
                && b.iter().all(|&x| in_markers[x as usize])
                && std::str::from_utf8(b).is_ok_and(|t| markers.iter().any(|m| m.contains(t)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::TokenizerOptions;

    #[test]
    fn a_chain_position_finds_the_nearest_walked_one_above_it() {
        let vocab: Vec<Vec<u8>> =
            ["[", "]", "\n", " ", "  ", "     ", "x"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &TokenizerOptions::default()).unwrap());
        let g = Grammar::from_ebnf(r#"root ::= "[" ("\n" [ \t]{0,20})? "]""#).unwrap();
        let opts = CompileOptions { eager_budget: Duration::ZERO, ..Default::default() };
        let c = CompiledGrammar::new(&g, tok, &opts).unwrap();
        let a = c.automata();
        let at = |spaces: usize| a.after(format!("[\n{}", " ".repeat(spaces)).as_bytes());
        assert_eq!(c.walked_ancestor(at(5)), None, "nothing walked yet");
        c.mask(at(0));
        assert_eq!(c.walked_ancestor(at(5)), Some(at(0)));
        c.mask(at(3));
        assert_eq!(c.walked_ancestor(at(5)), Some(at(3)), "the nearest one");
        assert_eq!(c.walked_ancestor(at(2)), Some(at(0)));
    }

    /// `n` distinct tokens drawn deterministically from ASCII letters, digits, markup, a
    /// leading space (as most tokens of a byte-level vocabulary have) and two-, three-
    /// and four-byte characters: many top-level subtrees of uneven sizes.
    fn synthetic_vocab(n: usize) -> Vec<Vec<u8>> {
        let pieces = [
            "a", "b", "e", "k", "x", "z", "0", "7", " ", " ", " ", "<", ">", "/", "{", "}", "\"", ":", ",",
            "\n", "é", "ü", "中", "文", "😀", "t", "o", "l", "_",
        ];
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        while out.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 1 + (x % 5) as usize;
            let t: String =
                (0..len).map(|i| pieces[((x >> (8 * i + 3)) % pieces.len() as u64) as usize]).collect();
            if seen.insert(t.clone()) {
                out.push(t.into_bytes());
            }
        }
        out
    }

    #[test]
    fn a_walk_split_into_runs_gives_the_mask_of_one_walk() {
        let mut vocab = synthetic_vocab(3000);
        vocab.push(b"</s>".to_vec());
        let opts = TokenizerOptions { stop_tokens: Some(vec![vocab.len() as u32 - 1]), ..Default::default() };
        let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap());
        let grammars = [
            Grammar::builtin_json(),
            Grammar::from_ebnf(r#"root ::= [^<]* ("<tool>" ("{" [a-z0-9 ,:"]* "}")? "</tool>" [^<]*)*"#)
                .unwrap(),
            Grammar::from_ebnf(&numbered_grammar(6)).unwrap(),
        ];
        let lazy = CompileOptions { eager_budget: Duration::ZERO, ..Default::default() };
        let helper_pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for g in &grammars {
            let c = CompiledGrammar::new(g, tok.clone(), &lazy).unwrap();
            let a = c.automata();
            let states: Vec<u32> = (0..a.num_states() as u32).filter(|&s| a.scans(s)).collect();
            assert!(states.len() > 3);
            for &s in &states {
                let one = StateMask::compute_until(a, &tok, s, &c.store, None).unwrap();
                let want = (one.accepted.to_words(&tok), one.uncertain.to_vec());
                for parts in [1, 2, 3, 7] {
                    let split = StateMask::compute_shared(a, &tok, s, &c.store, parts);
                    let got = (split.accepted.to_words(&tok), split.uncertain.to_vec());
                    assert!(got == want, "state {s}, {parts} runs");
                }
                // Inside a compile whose crew has a helper awake: the runs are shared.
                let shared = helper_pool.install(|| {
                    crate::crew::scope(|| {
                        crate::crew::map_init(&[1, 2], crate::crew::Share::Hire, || (), |_, &x: &u32| x);
                        StateMask::compute_shared(a, &tok, s, &c.store, 2)
                    })
                });
                let got = (shared.accepted.to_words(&tok), shared.uncertain.to_vec());
                assert!(got == want, "state {s}, with a helper");
            }
        }
        // The runs cover every token once, in order.
        let trie = tok.trie();
        for parts in [1, 2, 3, 7, 100] {
            let runs = trie.top_level_parts(parts);
            assert!(!runs.is_empty() && runs.len() <= parts);
            assert_eq!(runs[0].0 .0, 0);
            assert_eq!(runs[0].1 .0, 0);
            assert_eq!(runs.last().unwrap().0 .1 as usize, trie.nodes.len());
            assert_eq!(runs.last().unwrap().1 .1 as usize, trie.token_ids.len());
            assert!(runs.windows(2).all(|w| w[0].0 .1 == w[1].0 .0 && w[0].1 .1 == w[1].1 .0));
        }
    }

    fn numbered_grammar(n: usize) -> String {
        let alts: Vec<String> = (0..n).map(|i| format!("\"k{i}\" [a-z]{{1,{}}} \";\"", 3 + i % 5)).collect();
        format!("root ::= ({})+", alts.join(" | "))
    }

    #[test]
    fn background_precompute_fills_every_mask_and_matches_lazy_masks() {
        let vocab: Vec<Vec<u8>> = ["k", "k1", "k2", "a", "ab", "abc", ";", ";k", "z;", "0", "</s>"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let opts = TokenizerOptions { stop_tokens: Some(vec![10]), ..Default::default() };
        let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap());
        let text = numbered_grammar(12);
        let background = CompileOptions {
            eager_budget: Duration::ZERO,
            background_precompute: true,
            ..Default::default()
        };
        let compiled = GrammarCompiler::with_options(tok.clone(), background, 0).compile_ebnf(&text).unwrap();
        // The compile returned at once; the thread finishes on its own.
        let deadline = Instant::now() + Duration::from_secs(30);
        while compiled.mask_stats().0 < compiled.mask_stats().1 {
            assert!(
                Instant::now() < deadline,
                "background precompute never finished: {:?}",
                compiled.mask_stats()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Same masks as computed lazily, state by state.
        let lazy = CompileOptions { eager_budget: Duration::ZERO, ..Default::default() };
        let reference = GrammarCompiler::with_options(tok, lazy, 0).compile_ebnf(&text).unwrap();
        assert_eq!(reference.mask_stats().0, 0);
        let a = compiled.automata();
        let tok = compiled.tokenizer();
        for s in (0..a.num_states() as u32).filter(|&s| a.nodes[s as usize].scannable) {
            let (m, r) = (compiled.mask(s), reference.mask(s));
            assert_eq!(m.accepted.to_words(tok), r.accepted.to_words(tok), "accepted at state {s}");
            let mut uncertain = [m.uncertain.to_vec(), r.uncertain.to_vec()];
            uncertain.iter_mut().for_each(|u| u.sort_unstable());
            assert_eq!(uncertain[0], uncertain[1], "uncertain at state {s}");
        }
    }

    #[test]
    fn the_eager_budget_is_not_spent_on_a_grammar_that_starts_in_free_text() {
        let vocab: Vec<Vec<u8>> =
            ["a", "b", "<", "<t", ">", "{", "}", "x", "</s>"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let opts = TokenizerOptions { stop_tokens: Some(vec![8]), ..Default::default() };
        let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap());
        let eager = CompileOptions { eager_budget: Duration::from_secs(5), ..Default::default() };
        let compiler = GrammarCompiler::with_options(tok, eager, 0);
        // Free text, then `<t>` opens a tagged region.
        let tag = r#"{"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<t>"],
            "tags": [{"type": "tag", "begin": "<t>", "content": {"type": "regex", "pattern": "[ab]{1,5}x"}, "end": "</t>"}]}}"#;
        let text = compiler.compile(&GrammarSpec::StructuralTag(tag.into())).unwrap();
        assert!(text.starts_in_free_text());
        let (computed, total) = text.mask_stats();
        assert_eq!(
            computed,
            text.start_states().len(),
            "only the first fill's states ({computed} of {total})"
        );
        assert!(total > computed + 3);
        // The same tagged region at the start: the budget computes every state.
        let forced = compiler.compile_ebnf(r#"root ::= "<t>" [ab]{1,5} "x</t>""#).unwrap();
        assert!(!forced.starts_in_free_text());
        let (computed, total) = forced.mask_stats();
        assert_eq!(computed, total);
    }

    #[test]
    fn background_precompute_stops_once_the_grammar_is_dropped() {
        let vocab: Vec<Vec<u8>> =
            ["k", "k1", "a", "ab", ";", "</s>"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let opts = TokenizerOptions { stop_tokens: Some(vec![5]), ..Default::default() };
        let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap());
        let g = Grammar::from_ebnf(&numbered_grammar(40)).unwrap();
        let lazy = CompileOptions { eager_budget: Duration::ZERO, ..Default::default() };
        let compiled = Arc::new(CompiledGrammar::new(&g, tok, &lazy).unwrap());
        let weak = Arc::downgrade(&compiled);
        let thread = compiled.precompute_in_background().expect("a thread");
        drop(compiled);
        // The thread holds only a weak handle between states: it ends, and the grammar
        // is freed, whether or not it got through every state first.
        thread.join().unwrap();
        assert!(weak.upgrade().is_none());
    }
}
