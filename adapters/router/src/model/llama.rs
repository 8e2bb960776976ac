//! grammask's own Llama forward for GGUF weights, on the CPU: one forward for every row of
//! a step — prompts, decode tokens and draft trees — with each weight block read once for
//! all of them ([`super::quant`]).
//!
//! A forward stacks the step's query tokens: each row's new tokens (appended to its
//! sequence's cache, causally) and its draft nodes, each node at the position of its depth
//! below the row's last token and attending to the sequence's cache, the row's new tokens
//! and its own ancestors only — a tree attention mask. Draft nodes' keys and values are
//! kept aside; [`Llama::commit`] appends the accepted path's to the cache, exactly what
//! feeding the path one token at a time would have written.
//!
//! Every per-token computation (norms, products, RoPE, attention over the keys in position
//! order) is done the same way whatever else is in the forward, so a node's logits are bit
//! for bit those of sequential decoding of its path, in any batch.

use super::quant::{Weights, BLOCK};
use super::{ForwardRow, ModelError};
use crate::step::SeqId;
use candle_core::quantized::gguf_file;
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;
use std::collections::HashMap;

/// How the weight matrices are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// As the file has them (Q4_1, Q8_0, …), products on 8-bit activations.
    #[default]
    Quantized,
    /// Dequantized to `f32` at load (several times the memory), `f32` products.
    F32,
}

#[derive(Debug, Clone)]
struct Config {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    layers: usize,
    eps: f32,
    context: usize,
}

struct Layer {
    attn_norm: Vec<f32>,
    wq: Weights,
    wk: Weights,
    wv: Weights,
    wo: Weights,
    ffn_norm: Vec<f32>,
    gate: Weights,
    up: Weights,
    down: Weights,
}

/// Positions per block of the key cache.
const KEY_BLOCK: usize = 16;

/// A sequence's keys and values, per layer, in half precision: values `[position,
/// kv_heads × head_dim]`, keys in blocks of [`KEY_BLOCK`] positions, dimension-major inside
/// (`[block][kv head][dim][position in block]`), so that one pass over a block's
/// dimensions gives a query 16 scores without a horizontal sum.
///
/// Half precision because attention reads every cached key and value of a row at every
/// step: in `f32` a batch of 8 SmolLM2 rows at 512 positions read 190 MB a step from
/// memory, more than the weights. Every key and value is rounded to half once, as it is
/// made ([`round_to_half`]), so a draft node attends to its ancestors' rounded values as
/// the cache would hold them, and a committed node's entry is the one sequential decoding
/// would have written.
#[derive(Default)]
struct Cache {
    len: usize,
    k: Vec<Vec<f16>>,
    v: Vec<Vec<f16>>,
    /// The last forward's draft: each node's parent and, per layer, its keys and values
    /// (node `v`'s at `v − 1`).
    draft: Option<DraftKv>,
}

impl Cache {
    /// Appends one position's key and value (`kv` halves each, [`round_to_half`]'s) to
    /// layer `l`.
    fn push(&mut self, l: usize, key: &[f16], value: &[f16]) {
        let kv = key.len();
        let at = self.v[l].len() / kv.max(1);
        let (b, lane) = (at / KEY_BLOCK, at % KEY_BLOCK);
        let keys = &mut self.k[l];
        if lane == 0 {
            keys.resize((b + 1) * kv * KEY_BLOCK, f16::ZERO);
        }
        // Key value `i` (head `i / hd`, dimension `i % hd`) is row `i` of the block.
        for (i, &x) in key.iter().enumerate() {
            keys[b * kv * KEY_BLOCK + i * KEY_BLOCK + lane] = x;
        }
        self.v[l].extend_from_slice(value);
    }
}

/// A row's draft nodes' keys and values in a forward, per layer (node `v` at `v − 1`).
type NodeKv = (Vec<Vec<f32>>, Vec<Vec<f32>>);

struct DraftKv {
    parents: Vec<Option<usize>>,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

/// A layer's attention work (positions seen × query heads × head size, summed over the
/// queries) above which its tasks go to the pool: below, a task's hand-over costs more
/// than it spreads.
const PARALLEL_ATTENTION_WORK: usize = 1 << 18;

/// One task of a layer's attention: some of a row's queries, over some of its key heads.
struct AttTask {
    row: usize,
    queries: std::ops::Range<usize>,
    heads: std::ops::Range<usize>,
}

/// One query token of a forward.
#[derive(Clone, Copy)]
struct Query {
    /// Index of its forward row.
    row: usize,
    token: u32,
    pos: usize,
    /// A draft node (`Some(v)`) or the row's `i`-th new token.
    node: Option<usize>,
    /// The row's `i`-th new token (nodes: the row's count of new tokens).
    i: usize,
}

/// A Llama-family model (GGUF, architecture `llama`) with its own forward.
pub struct Llama {
    cfg: Config,
    embed: Weights,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    output: Weights,
    /// `cos`, `sin` per position and frequency (`[context, head_dim / 2]`).
    cos: Vec<f32>,
    sin: Vec<f32>,
    seqs: HashMap<SeqId, Cache>,
    weight_bytes: usize,
    /// The pool the forward runs on (as many threads as rayon's global pool).
    pool: std::sync::Arc<rayon::ThreadPool>,
}

impl std::fmt::Debug for Llama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llama")
            .field("layers", &self.cfg.layers)
            .field("sequences", &self.seqs.len())
            .finish()
    }
}

fn err(e: impl std::fmt::Display) -> ModelError {
    ModelError(e.to_string())
}

impl Llama {
    /// Reads the weights of a GGUF file already parsed (`content`) from `file`.
    pub fn load<R: std::io::Read + std::io::Seek>(
        content: &gguf_file::Content,
        file: &mut R,
        format: WeightFormat,
        max_context: usize,
    ) -> Result<Self, ModelError> {
        let md =
            |k: &str| content.metadata.get(k).ok_or_else(|| ModelError(format!("no `{k}` in the metadata")));
        let u = |k: &str| md(k).and_then(|v| v.to_u32().map_err(err)).map(|v| v as usize);
        let f = |k: &str| md(k).and_then(|v| v.to_f32().map_err(err));
        let hidden = u("llama.embedding_length")?;
        let heads = u("llama.attention.head_count")?;
        let kv_heads = u("llama.attention.head_count_kv").unwrap_or(heads);
        let layers = u("llama.block_count")?;
        let head_dim = hidden / heads.max(1);
        let eps = f("llama.attention.layer_norm_rms_epsilon").unwrap_or(1e-5);
        let base = f("llama.rope.freq_base").unwrap_or(10_000.0);
        let context = u("llama.context_length").unwrap_or(max_context).min(max_context);
        if heads == 0
            || kv_heads == 0
            || heads % kv_heads != 0
            || hidden % heads != 0
            || head_dim % 2 != 0
            || hidden % BLOCK != 0
        {
            return Err(ModelError(format!(
                "unsupported shape: hidden {hidden}, heads {heads}, kv heads {kv_heads}"
            )));
        }
        let mut tensor = |name: &str| -> Result<Weights, ModelError> {
            let info =
                content.tensor_infos.get(name).ok_or_else(|| ModelError(format!("no tensor `{name}`")))?;
            let dims = info.shape.dims().to_vec();
            let (rows, cols) = match dims[..] {
                [n] => (1, n),
                [r, c] => (r, c),
                _ => return Err(ModelError(format!("`{name}`: {}-dimensional", dims.len()))),
            };
            let q = content.tensor(file, name, &candle_core::Device::Cpu).map_err(err)?;
            let kind = match q.dtype() {
                candle_core::quantized::GgmlDType::F32 => 0,
                candle_core::quantized::GgmlDType::F16 => 1,
                candle_core::quantized::GgmlDType::Q4_1 => 3,
                candle_core::quantized::GgmlDType::Q8_0 => 8,
                other => {
                    return Err(ModelError(format!("`{name}`: weights of type {other:?} are not supported")))
                }
            };
            let bytes = q.data().map_err(err)?;
            let w = Weights::from_gguf(kind, rows, cols, &bytes)
                .map_err(|e| ModelError(format!("`{name}`: {e}")))?;
            Ok(match format {
                WeightFormat::F32 => w.dequantized(),
                WeightFormat::Quantized => w,
            })
        };
        let vector = |w: Weights| -> Vec<f32> {
            let mut out = vec![0.0; w.cols()];
            w.row_f32(0, &mut out);
            out
        };
        let embed = tensor("token_embd.weight")?;
        let output = match content.tensor_infos.contains_key("output.weight") {
            true => tensor("output.weight")?,
            false => embed.clone(),
        };
        let norm = vector(tensor("output_norm.weight")?);
        let mut ls = Vec::with_capacity(layers);
        for l in 0..layers {
            let t = |n: &str| format!("blk.{l}.{n}.weight");
            ls.push(Layer {
                attn_norm: vector(tensor(&t("attn_norm"))?),
                wq: tensor(&t("attn_q"))?,
                wk: tensor(&t("attn_k"))?,
                wv: tensor(&t("attn_v"))?,
                wo: tensor(&t("attn_output"))?,
                ffn_norm: vector(tensor(&t("ffn_norm"))?),
                gate: tensor(&t("ffn_gate"))?,
                up: tensor(&t("ffn_up"))?,
                down: tensor(&t("ffn_down"))?,
            });
        }
        for (l, layer) in ls.iter().enumerate() {
            let kv = kv_heads * head_dim;
            let shapes = [
                (&layer.wq, hidden, hidden),
                (&layer.wk, kv, hidden),
                (&layer.wv, kv, hidden),
                (&layer.wo, hidden, hidden),
                (&layer.up, layer.up.rows(), hidden),
                (&layer.gate, layer.up.rows(), hidden),
                (&layer.down, hidden, layer.up.rows()),
            ];
            if shapes.iter().any(|(w, r, c)| w.rows() != *r || w.cols() != *c) {
                return Err(ModelError(format!("layer {l}: weight shapes do not fit the metadata")));
            }
        }
        // RoPE tables, as candle computes them (θ_i = base^(−2i/d), angle = pos·θ_i in f32).
        let half = head_dim / 2;
        let theta: Vec<f32> = (0..half).map(|i| 1.0 / base.powf((2 * i) as f32 / head_dim as f32)).collect();
        let (mut cos, mut sin) = (Vec::with_capacity(context * half), Vec::with_capacity(context * half));
        for p in 0..context {
            for &t in &theta {
                let a = p as f32 * t;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        let weight_bytes = embed.memory_bytes()
            + output.memory_bytes()
            + ls.iter()
                .map(|l| {
                    [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]
                        .iter()
                        .map(|w| w.memory_bytes())
                        .sum::<usize>()
                })
                .sum::<usize>();
        Ok(Self {
            cfg: Config { hidden, heads, kv_heads, head_dim, layers, eps, context },
            embed,
            layers: ls,
            norm,
            output,
            cos,
            sin,
            seqs: HashMap::new(),
            weight_bytes,
            pool: std::sync::Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(rayon::current_num_threads())
                    .thread_name(|i| format!("grammask-model-{i}"))
                    .build()
                    .map_err(|e| ModelError(format!("cannot start the model's pool: {e}")))?,
            ),
        })
    }

    /// Columns of the logits.
    pub fn vocab(&self) -> usize {
        self.output.rows()
    }

    /// Positions a sequence may hold.
    pub fn context(&self) -> usize {
        self.cfg.context
    }

    /// Bytes of the weight matrices as held.
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Forgets a sequence.
    pub fn release(&mut self, id: SeqId) {
        self.seqs.remove(&id);
    }

    /// Keeps the draft path `path` of the last forward of `id` in its cache.
    pub fn commit(&mut self, id: SeqId, path: &[usize]) -> Result<(), ModelError> {
        let cache = self.seqs.get_mut(&id).ok_or_else(|| ModelError(format!("sequence {id}: unknown")))?;
        let draft = cache.draft.take();
        if path.is_empty() {
            return Ok(());
        }
        let draft = draft.ok_or_else(|| ModelError(format!("sequence {id}: no draft to commit")))?;
        let mut at = 0;
        for &v in path {
            if v == 0 || draft.parents.get(v).copied().flatten() != Some(at) {
                return Err(ModelError(format!("sequence {id}: draft node {v} is not a child of node {at}")));
            }
            at = v;
        }
        if cache.len + path.len() > self.cfg.context {
            return Err(ModelError(format!(
                "sequence {id}: the path passes the context of {}",
                self.cfg.context
            )));
        }
        let kv = self.cfg.kv_heads * self.cfg.head_dim;
        // (The nodes' values were rounded to half when made: converting them back is exact.)
        let (mut key, mut value) = (vec![f16::ZERO; kv], vec![f16::ZERO; kv]);
        for l in 0..self.cfg.layers {
            for &v in path {
                key.convert_from_f32_slice(&draft.k[l][(v - 1) * kv..v * kv]);
                value.convert_from_f32_slice(&draft.v[l][(v - 1) * kv..v * kv]);
                cache.push(l, &key, &value);
            }
        }
        cache.len += path.len();
        Ok(())
    }

    /// The forward of `rows`: writes, per row, the logits after its last new token (after
    /// every one with `all`) and after each draft node, in order, into `logits` (a fork: a
    /// copy of its source's row after its last token); returns the rows that failed (their
    /// logits are zero).
    pub fn forward(
        &mut self,
        rows: &[ForwardRow<'_>],
        max_draft_nodes: usize,
        logits: &mut Vec<f32>,
    ) -> Vec<(usize, ModelError)> {
        // The whole forward on a worker of the model's pool: its ~4 products per layer are
        // then joins among the pool's workers, where from the step thread each would be a
        // job handed to the pool and a sleep until it is done (a futex round trip each, a
        // fifth of a SmolLM2 step measured).
        let pool = std::sync::Arc::clone(&self.pool);
        pool.install(|| self.forward_on_pool(rows, max_draft_nodes, logits))
    }

    fn forward_on_pool(
        &mut self,
        rows: &[ForwardRow<'_>],
        max_draft_nodes: usize,
        logits: &mut Vec<f32>,
    ) -> Vec<(usize, ModelError)> {
        let c = self.cfg.clone();
        let (hidden, kv, hd) = (c.hidden, c.kv_heads * c.head_dim, c.head_dim);
        let vocab = self.vocab();
        let mut failed = Vec::new();
        // The query tokens, and which give logits (per row: its last new token, its nodes).
        let mut queries: Vec<Query> = Vec::new();
        let mut wanted: Vec<usize> = Vec::new();
        let mut ok = vec![true; rows.len()];
        let mut out_rows = 0;
        let mut bases = Vec::with_capacity(rows.len());
        // Forks: `(row, its source's row)`.
        let mut forks = Vec::new();
        for (r, row) in rows.iter().enumerate() {
            let ForwardRow { id, tokens, draft, all_logits: all, fork_of } = *row;
            bases.push(out_rows);
            out_rows += row.logits_rows();
            if let Some(from) = fork_of {
                match rows[..r].iter().position(|x| x.id == from && x.fork_of.is_none()).filter(|&s| ok[s]) {
                    Some(src) if tokens.is_empty() && draft.is_none() => forks.push((r, src)),
                    _ => {
                        failed.push((
                            r,
                            ModelError(format!(
                                "sequence {id}: a fork of {from} needs {from}'s row earlier in the forward, and no tokens of its own"
                            )),
                        ));
                        ok[r] = false;
                    }
                }
                continue;
            }
            let cache = self.seqs.entry(id).or_default();
            cache.draft = None;
            if cache.k.is_empty() {
                cache.k = vec![Vec::new(); c.layers];
                cache.v = vec![Vec::new(); c.layers];
            }
            let depth = |v: usize| {
                let mut d = 0;
                let mut u = v;
                while let Some(p) = draft.and_then(|t| t.parent(u)) {
                    d += 1;
                    u = p;
                }
                d
            };
            let deepest = draft.map_or(0, |t| (0..t.len()).map(depth).max().unwrap_or(0));
            let bad = if let Some(n) = draft.map(|t| t.len() - 1).filter(|&n| n > max_draft_nodes) {
                Some(format!("sequence {id}: {n} draft nodes; at most {max_draft_nodes}"))
            } else if tokens.is_empty() {
                Some(format!("sequence {id}: a forward row without tokens"))
            } else if let Some(t) =
                tokens.iter().chain(draft.map(|_| &0u32)).find(|&&t| t as usize >= self.embed.rows())
            {
                Some(format!("sequence {id}: token {t} is outside the vocabulary"))
            } else if cache.len + tokens.len() + deepest > c.context {
                Some(format!(
                    "sequence {id}: {} positions exceed the model's context of {}",
                    cache.len + tokens.len() + deepest,
                    c.context
                ))
            } else {
                draft.and_then(|t| {
                    (1..t.len())
                        .find(|&v| t.token(v).is_none_or(|x| x as usize >= self.embed.rows()))
                        .map(|v| format!("sequence {id}: draft node {v}'s token is outside the vocabulary"))
                })
            };
            if let Some(why) = bad {
                failed.push((r, ModelError(why)));
                ok[r] = false;
                continue;
            }
            let n = tokens.len();
            for (i, &t) in tokens.iter().enumerate() {
                if all || i + 1 == n {
                    wanted.push(queries.len());
                }
                queries.push(Query { row: r, token: t, pos: cache.len + i, node: None, i });
            }
            if let Some(t) = draft {
                for v in 1..t.len() {
                    wanted.push(queries.len());
                    let token = t.token(v).unwrap_or(0);
                    queries.push(Query {
                        row: r,
                        token,
                        pos: cache.len + n - 1 + depth(v),
                        node: Some(v),
                        i: n,
                    });
                }
            }
        }
        let q_n = queries.len();
        // Embeddings.
        let mut x = vec![0.0f32; q_n * hidden];
        x.chunks_mut(hidden).zip(&queries).for_each(|(row, q)| self.embed.row_f32(q.token as usize, row));
        // Node keys/values per row, per layer (node v at v − 1).
        let mut node_kv: HashMap<usize, NodeKv> = HashMap::new();
        for (r, &ForwardRow { draft, .. }) in rows.iter().enumerate() {
            if let (true, Some(t)) = (ok[r], draft) {
                let empty = vec![vec![0.0f32; (t.len() - 1) * kv]; c.layers];
                node_kv.insert(r, (empty.clone(), empty));
            }
        }
        let lens: Vec<usize> = rows.iter().map(|row| self.seqs.get(&row.id).map_or(0, |s| s.len)).collect();
        // What each query sees: the cache up to its own position (nodes: all the row's new
        // tokens), then its ancestors among the draft nodes.
        let group = c.heads / c.kv_heads;
        let spans: Vec<Span> = queries
            .iter()
            .map(|q| {
                let upto = lens[q.row] + q.i.min(rows[q.row].tokens.len() - 1) + 1;
                let mut path = Vec::new();
                if let (Some(mut v), Some(t)) = (q.node, rows[q.row].draft) {
                    while v != 0 {
                        path.push(v);
                        v = t.parent(v).unwrap_or(0);
                    }
                    path.reverse();
                }
                Span { upto, path }
            })
            .collect();
        let att_work = spans.iter().map(|s| s.upto + s.path.len()).sum::<usize>() * c.heads * hd;
        // Attention tasks `(row, queries a..b, key heads h0..h1)`: a row's queries
        // (consecutive in `queries`) share its cache, so they go together — each block of
        // keys and values read once for all of them — in chunks that give each thread of the
        // pool a task where there are fewer rows than threads (and at most 64 queries, to
        // keep a task's scores small); where a row's queries are too few to chunk (a decode
        // step at batch 1), by key heads instead, whose keys and values are apart anyway.
        let mut att_tasks: Vec<AttTask> = Vec::new();
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for (qi, q) in queries.iter().enumerate() {
            match ranges.last_mut() {
                Some(last) if queries[last.0].row == q.row => last.1 = qi + 1,
                _ => ranges.push((qi, qi + 1)),
            }
        }
        let per_row = rayon::current_num_threads().div_ceil(ranges.len().max(1)).max(1);
        for &(a, b) in &ranges {
            let chunk = (b - a).div_ceil(per_row).clamp(1, 64);
            let parallel = att_work > PARALLEL_ATTENTION_WORK;
            let by_heads = if parallel && (b - a).div_ceil(chunk) < per_row { c.kv_heads } else { 1 };
            for s in (a..b).step_by(chunk) {
                for k in 0..by_heads {
                    let heads = k * c.kv_heads / by_heads..(k + 1) * c.kv_heads / by_heads;
                    att_tasks.push(AttTask { row: queries[a].row, queries: s..(s + chunk).min(b), heads });
                }
            }
        }
        let mut h = vec![0.0f32; q_n * hidden];
        let mut qv = vec![0.0f32; q_n * hidden];
        let mut kk = vec![0.0f32; q_n * kv];
        let mut vv = vec![0.0f32; q_n * kv];
        let mut att = vec![0.0f32; q_n * hidden];
        let mut o = vec![0.0f32; q_n * hidden];
        // The step's keys and values in half precision, as the cache takes them.
        let (mut kh, mut vh) = (Vec::new(), Vec::new());
        let ffn = self.layers.first().map_or(0, |l| l.up.rows());
        let (mut g, mut u, mut dn) =
            (vec![0.0f32; q_n * ffn], vec![0.0f32; q_n * ffn], vec![0.0f32; q_n * hidden]);
        for l in 0..c.layers {
            let layer = &self.layers[l];
            rms_norm(&x, &layer.attn_norm, c.eps, &mut h);
            Weights::matmul_many(&h, &mut [(&layer.wq, &mut qv), (&layer.wk, &mut kk), (&layer.wv, &mut vv)]);
            let (cos, sin) = (&self.cos, &self.sin);
            // (Elementwise work is a small part of a forward: on this thread, where a task
            // of the pool would cost more than the work.)
            qv.chunks_mut(hidden).zip(&queries).for_each(|(q, qq)| rope(q, qq.pos, hd, cos, sin));
            kk.chunks_mut(kv).zip(&queries).for_each(|(k, qq)| rope(k, qq.pos, hd, cos, sin));
            // Keys and values in the cache's precision before anything reads them (draft
            // nodes' too: their descendants attend to them as the cache would hold them).
            round_to_half(&mut kk, &mut kh);
            round_to_half(&mut vv, &mut vh);
            // New tokens' keys and values join their caches; nodes' are kept aside.
            for (qi, q) in queries.iter().enumerate() {
                let (kr, vr) = (&kk[qi * kv..(qi + 1) * kv], &vv[qi * kv..(qi + 1) * kv]);
                match q.node {
                    None => {
                        let id = rows[q.row].id;
                        if let Some(cache) = self.seqs.get_mut(&id) {
                            cache.push(l, &kh[qi * kv..(qi + 1) * kv], &vh[qi * kv..(qi + 1) * kv]);
                        }
                    }
                    Some(v) => {
                        if let Some((nk, nv)) = node_kv.get_mut(&q.row) {
                            nk[l][(v - 1) * kv..v * kv].copy_from_slice(kr);
                            nv[l][(v - 1) * kv..v * kv].copy_from_slice(vr);
                        }
                    }
                }
            }
            // Attention: per row and key head, its queries together (`att_tasks`).
            let seqs = &self.seqs;
            let node_kv_ref = &node_kv;
            let run = |t: &AttTask| -> Vec<f32> {
                let (r, a, b) = (t.row, t.queries.start, t.queries.end);
                let mut out = vec![0.0f32; (b - a) * hidden];
                let Some(cache) = seqs.get(&rows[r].id) else { return out };
                let (nk, nv): (&[f32], &[f32]) = match node_kv_ref.get(&r) {
                    Some(n) => (&n.0[l], &n.1[l]),
                    None => (&[], &[]),
                };
                let rk = RowKv { ck: &cache.k[l], cv: &cache.v[l], nk, nv, kv, hd, kv_heads: c.kv_heads };
                for h in t.heads.clone() {
                    let g = HeadGroup { kvh: h, group, q: &qv[a * hidden..b * hidden], spans: &spans[a..b] };
                    attend_group(&rk, &g, &mut out);
                }
                out
            };
            // Spread over the pool only when there is enough of it.
            let outs: Vec<Vec<f32>> = match att_work > PARALLEL_ATTENTION_WORK {
                true => att_tasks.par_iter().map(run).collect(),
                false => att_tasks.iter().map(run).collect(),
            };
            // Each task's query heads (those of its key heads: contiguous in a query's row).
            for (t, out) in att_tasks.iter().zip(&outs) {
                let cols = t.heads.start * group * hd..t.heads.end * group * hd;
                for (i, qi) in t.queries.clone().enumerate() {
                    att[qi * hidden..(qi + 1) * hidden][cols.clone()]
                        .copy_from_slice(&out[i * hidden..(i + 1) * hidden][cols.clone()]);
                }
            }
            layer.wo.matmul(&att, &mut o);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            rms_norm(&x, &layer.ffn_norm, c.eps, &mut h);
            Weights::matmul_many(&h, &mut [(&layer.gate, &mut g), (&layer.up, &mut u)]);
            swiglu_rows(&mut g, &u);
            layer.down.matmul(&g, &mut dn);
            x.iter_mut().zip(&dn).for_each(|(a, b)| *a += b);
        }
        for (r, &ForwardRow { id, tokens, fork_of, .. }) in rows.iter().enumerate() {
            if !ok[r] || fork_of.is_some() {
                continue;
            }
            if let Some(cache) = self.seqs.get_mut(&id) {
                cache.len += tokens.len();
                if let Some((k, v)) = node_kv.remove(&r) {
                    let parents = match rows[r].draft {
                        Some(t) => (0..t.len()).map(|v| t.parent(v)).collect(),
                        None => Vec::new(),
                    };
                    cache.draft = Some(DraftKv { parents, k, v });
                }
            }
        }
        // Forks start as copies of their sources' caches (their new tokens included).
        for &(r, src) in &forks {
            let copy = self.seqs.get(&rows[src].id).map(|c| Cache {
                len: c.len,
                k: c.k.clone(),
                v: c.v.clone(),
                draft: None,
            });
            if let Some(copy) = copy {
                self.seqs.insert(rows[r].id, copy);
            }
        }
        // The final norm and the output product, for the tokens that give logits only.
        let mut sel = vec![0.0f32; wanted.len() * hidden];
        for (k, &qi) in wanted.iter().enumerate() {
            sel[k * hidden..(k + 1) * hidden].copy_from_slice(&x[qi * hidden..(qi + 1) * hidden]);
        }
        let mut hn = vec![0.0f32; sel.len()];
        rms_norm(&sel, &self.norm, c.eps, &mut hn);
        let mut out = vec![0.0f32; wanted.len() * vocab];
        self.output.matmul(&hn, &mut out);
        logits.clear();
        logits.resize(out_rows * vocab, 0.0);
        // `wanted` is in row order: each ok row's logits rows, in order.
        let mut k = 0;
        for (r, &base) in bases.iter().enumerate() {
            if !ok[r] || rows[r].fork_of.is_some() {
                continue;
            }
            let n_out = rows[r].logits_rows();
            logits[base * vocab..(base + n_out) * vocab]
                .copy_from_slice(&out[k * vocab..(k + n_out) * vocab]);
            k += n_out;
        }
        // A fork's row: its source's after the source's last token.
        for &(r, src) in &forks {
            let from = bases[src] + rows[src].own_rows() - 1;
            logits.copy_within(from * vocab..(from + 1) * vocab, bases[r] * vocab);
        }
        failed
    }
}

/// RMS norm of each row of `x` (width `w.len()`), scaled by `w`.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    out.chunks_mut(d).zip(x.chunks(d)).for_each(|(o, xr)| {
        // (`dot`'s eight partial sums: a plain `sum` is one chain of dependent adds, a
        // third of a millisecond of a batch-8 step.)
        let ms = dot(xr, xr) / d as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for ((a, &b), &g) in o.iter_mut().zip(xr).zip(w) {
            *a = b * inv * g;
        }
    });
}

/// Rounds `x` in place to half precision, the cache's (beyond ±65,504, the largest half,
/// it saturates there rather than becoming infinite), and leaves the halves in `half` for
/// the cache: the conversions of the `half` crate, vectorized where the CPU has F16C and
/// the same values where it has not.
fn round_to_half(x: &mut [f32], half: &mut Vec<f16>) {
    const MAX: f32 = 65_504.0;
    x.iter_mut().for_each(|v| *v = v.clamp(-MAX, MAX));
    half.resize(x.len(), f16::ZERO);
    half.convert_from_f32_slice(x);
    half.convert_to_f32_slice(x);
}

/// Rotates each head of `x` (interleaved pairs, as GGUF's Llama weights expect) by `pos`.
fn rope(x: &mut [f32], pos: usize, hd: usize, cos: &[f32], sin: &[f32]) {
    let half = hd / 2;
    let (c, s) = (&cos[pos * half..(pos + 1) * half], &sin[pos * half..(pos + 1) * half]);
    for head in x.chunks_exact_mut(hd) {
        for i in 0..half {
            let (a, b) = (head[2 * i], head[2 * i + 1]);
            head[2 * i] = a * c[i] - b * s[i];
            head[2 * i + 1] = a * s[i] + b * c[i];
        }
    }
}

/// A row's keys and values in one layer: the cache's (keys in [`Cache`]'s blocks, values
/// `[position, kv]`, half precision) and its draft nodes' (`[node, kv]`, node `v` at row
/// `v − 1`, rounded to half but held in `f32`); `hd` values per head.
struct RowKv<'a> {
    ck: &'a [f16],
    cv: &'a [f16],
    nk: &'a [f32],
    nv: &'a [f32],
    kv: usize,
    hd: usize,
    kv_heads: usize,
}

/// The keys one query sees: the cache's first `upto` positions, then the draft nodes on
/// its path, in depth order.
struct Span {
    upto: usize,
    path: Vec<usize>,
}

/// Some of a row's queries (`q`: their rows of every head, `spans`: what each sees), for the
/// `group` query heads that share key head `kvh`.
struct HeadGroup<'a> {
    kvh: usize,
    group: usize,
    q: &'a [f32],
    spans: &'a [Span],
}

/// Attention of `g`'s queries over the row's keys and values `kv`, added into their places in
/// `out` (laid out as `g.q`, zeros there beforehand). Each block of 16 keys, and of values, is
/// read once for all of them: a draft tree's nodes, and a prompt's tokens, share their row's
/// cache.
///
/// Every score, softmax and weighted sum is the same operations in the same order as for
/// the query alone, on every CPU: with AVX-512 two hot loops take explicit 16-lane form
/// (lane by lane the same multiplies and adds), with AVX2 the compiler only gets wider
/// registers (Rust never fuses a multiply and an add).
fn attend_group(kv: &RowKv<'_>, g: &HeadGroup<'_>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::quant::kernels::Level;
        match Level::best() {
            // SAFETY: the CPU has AVX-512 F (`Level::best`).
            Level::Avx512Vnni => return unsafe { attend_group_avx512(kv, g, out) },
            // SAFETY: the CPU has AVX2 (`Level::best`).
            Level::Avx2 => return unsafe { attend_group_avx2(kv, g, out) },
            Level::Portable => {}
        }
    }
    attend_group_here::<false>(kv, g, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn attend_group_avx512(kv: &RowKv<'_>, g: &HeadGroup<'_>, out: &mut [f32]) {
    attend_group_here::<true>(kv, g, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn attend_group_avx2(kv: &RowKv<'_>, g: &HeadGroup<'_>, out: &mut [f32]) {
    attend_group_here::<false>(kv, g, out)
}

/// `WIDE`: AVX-512 F is there (the caller is compiled for it).
#[inline(always)]
fn attend_group_here<const WIDE: bool>(kv: &RowKv<'_>, g: &HeadGroup<'_>, out: &mut [f32]) {
    // The common head size as a constant, for the compiler to unroll by.
    match kv.hd {
        64 => attend_group_of::<WIDE>(kv, g, out, 64),
        hd => attend_group_of::<WIDE>(kv, g, out, hd),
    }
}

#[inline(always)]
fn attend_group_of<const WIDE: bool>(rk: &RowKv<'_>, g: &HeadGroup<'_>, out: &mut [f32], hd: usize) {
    let HeadGroup { kvh, group, q, spans } = *g;
    let RowKv { ck, cv, nk, nv, kv, kv_heads, .. } = *rk;
    let width = group * kv_heads * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let block = kv_heads * hd * KEY_BLOCK;
    let off = kvh * hd;
    let len = spans.iter().map(|s| s.upto + s.path.len()).max().unwrap_or(0);
    let blocks = spans.iter().map(|s| s.upto).max().unwrap_or(0).div_ceil(KEY_BLOCK);
    // Per query head: its span, where its query and its output sit in `q` and `out`
    // (worked out once: the loops below run per block of 16 keys).
    let heads: Vec<(&Span, usize)> = spans
        .iter()
        .enumerate()
        .flat_map(|(i, span)| (0..group).map(move |g| (span, i * width + (kvh * group + g) * hd)))
        .collect();
    let mut scores = vec![0.0f32; heads.len() * len];
    // The 16-lane loops read halves directly; the plain ones read a block of keys, or of
    // value rows, converted to `f32` once for all the group's query heads.
    let direct_values = WIDE && hd == 64;
    let mut buf = vec![0.0f32; if direct_values { 0 } else { hd * KEY_BLOCK }];
    for b in 0..blocks {
        let keys = &ck[b * block + off * KEY_BLOCK..b * block + (off + hd) * KEY_BLOCK];
        if !WIDE {
            keys.convert_to_f32_slice(&mut buf);
        }
        for (s, &(span, at)) in scores.chunks_exact_mut(len.max(1)).zip(&heads) {
            if span.upto > b * KEY_BLOCK {
                let n = (span.upto - b * KEY_BLOCK).min(KEY_BLOCK);
                block_scores::<WIDE>(
                    keys,
                    &buf,
                    &q[at..at + hd],
                    hd,
                    scale,
                    &mut s[b * KEY_BLOCK..b * KEY_BLOCK + n],
                );
            }
        }
    }
    for (s, &(span, at)) in scores.chunks_exact_mut(len.max(1)).zip(&heads) {
        let (upto, path) = (span.upto, &span.path);
        let s = &mut s[..upto + path.len()];
        let mut max = s[..upto].iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        for (x, &v) in s[upto..].iter_mut().zip(path) {
            *x = dot(&q[at..at + hd], &nk[(v - 1) * kv + off..(v - 1) * kv + off + hd]) * scale;
            max = max.max(*x);
        }
        let sum = softmax_numerators(s, max);
        // The weights, divided here in one vectorized pass (a division rounds the same
        // in any register: the weighted sums' bits are those of dividing per value row,
        // which had one scalar division per key in the values' loop).
        s.iter_mut().for_each(|x| *x /= sum);
    }
    let upto = spans.iter().map(|s| s.upto).max().unwrap_or(0);
    for b in 0..blocks {
        let values = &cv[b * KEY_BLOCK * kv..];
        if !direct_values {
            // The block's value rows of this key head, `hd` apart.
            for j in 0..(upto - b * KEY_BLOCK).min(KEY_BLOCK) {
                values[j * kv + off..j * kv + off + hd].convert_to_f32_slice(&mut buf[j * hd..(j + 1) * hd]);
            }
        }
        for (s, &(span, at)) in scores.chunks_exact(len.max(1)).zip(&heads) {
            if span.upto > b * KEY_BLOCK {
                let n = (span.upto - b * KEY_BLOCK).min(KEY_BLOCK);
                let p = &s[b * KEY_BLOCK..b * KEY_BLOCK + n];
                weighted_values::<WIDE>(&mut out[at..at + hd], p, values, kv, off, &buf);
            }
        }
    }
    for (s, &(span, at)) in scores.chunks_exact(len.max(1)).zip(&heads) {
        let o = &mut out[at..at + hd];
        for (&x, &v) in s[span.upto..].iter().zip(&span.path) {
            axpy(o, x, &nv[(v - 1) * kv + off..(v - 1) * kv + off + hd]);
        }
    }
}

/// One block's scores for the query head `qh` (`out.len()` ≤ 16 positions): each the sums
/// of `dot` in its order (eight partial sums by dimension mod 8, their tree, then the
/// rest) times `scale`, so that a score's bits do not depend on where its key sits. The
/// 16-lane form reads the block's halves (`keys`), the plain one the block in `f32`
/// (`plain`, `hd × 16` values).
#[inline(always)]
fn block_scores<const WIDE: bool>(
    keys: &[f16],
    plain: &[f32],
    qh: &[f32],
    hd: usize,
    scale: f32,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if WIDE {
        // SAFETY: AVX-512 F is there (`WIDE`); `keys` holds `hd` rows of 16, `qh` `hd`
        // values, `out` at most 16 (a masked store).
        return unsafe { wide::block_scores(keys, qh, hd, scale, out) };
    }
    let _ = keys;
    let keys = &plain[..hd * KEY_BLOCK];
    let whole = hd / 8 * 8;
    let mut acc = [[0.0f32; KEY_BLOCK]; 8];
    for d8 in (0..whole).step_by(8) {
        for (i, acc) in acc.iter_mut().enumerate() {
            let (qd, row) = (qh[d8 + i], &keys[(d8 + i) * KEY_BLOCK..(d8 + i + 1) * KEY_BLOCK]);
            for (a, &k) in acc.iter_mut().zip(row) {
                *a += qd * k;
            }
        }
    }
    let mut sum = [0.0f32; KEY_BLOCK];
    for (j, s) in sum.iter_mut().enumerate() {
        *s = ((acc[0][j] + acc[4][j]) + (acc[1][j] + acc[5][j]))
            + ((acc[2][j] + acc[6][j]) + (acc[3][j] + acc[7][j]));
    }
    for d in whole..hd {
        for (s, &k) in sum.iter_mut().zip(&keys[d * KEY_BLOCK..(d + 1) * KEY_BLOCK]) {
            *s += qh[d] * k;
        }
    }
    for (s, &x) in out.iter_mut().zip(&sum) {
        *s = x * scale;
    }
}

/// `o += p_j · v_j` for the value rows `v_j` of the weights `p`, in order: the 16-lane form
/// reads the cache's halves (`values`, rows `kv` apart, from `off`), the plain one the rows
/// in `f32` (`plain`, `hd` apart).
#[inline(always)]
fn weighted_values<const WIDE: bool>(
    o: &mut [f32],
    p: &[f32],
    values: &[f16],
    kv: usize,
    off: usize,
    plain: &[f32],
) {
    let hd = o.len();
    #[cfg(target_arch = "x86_64")]
    if WIDE && hd == 64 {
        // SAFETY: AVX-512 F is there (`WIDE`); every value row holds `hd` = 64 values.
        return unsafe { wide::weighted_values_64(o, p, values, kv, off) };
    }
    let _ = (values, kv, off);
    for (j, &x) in p.iter().enumerate() {
        axpy(o, x, &plain[j * hd..(j + 1) * hd]);
    }
}

/// The attention's hot loops in explicit AVX-512 form: lane by lane the multiplies and adds
/// of the plain loops, in their order (so, the same bits).
#[cfg(target_arch = "x86_64")]
mod wide {
    use super::KEY_BLOCK;
    use half::f16;
    use std::arch::x86_64::*;

    /// Sixteen halves at `p` in `f32` (exactly).
    #[inline(always)]
    unsafe fn load16(p: *const f16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }

    /// One key block's scores for the query head `qh`: `out[j] = scale · (the sum of
    /// `dot`'s shape over dimension rows `keys[d·16..]`)`, `out.len()` ≤ 16.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn block_scores(keys: &[f16], qh: &[f32], hd: usize, scale: f32, out: &mut [f32]) {
        debug_assert!(keys.len() >= hd * KEY_BLOCK && qh.len() >= hd && out.len() <= KEY_BLOCK);
        let k = keys.as_ptr();
        let whole = hd / 8 * 8;
        let mut acc = [_mm512_setzero_ps(); 8];
        let mut d8 = 0;
        while d8 < whole {
            for (i, a) in acc.iter_mut().enumerate() {
                let row = load16(k.add((d8 + i) * KEY_BLOCK));
                *a = _mm512_add_ps(*a, _mm512_mul_ps(_mm512_set1_ps(*qh.get_unchecked(d8 + i)), row));
            }
            d8 += 8;
        }
        let mut s = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[1], acc[5])),
            _mm512_add_ps(_mm512_add_ps(acc[2], acc[6]), _mm512_add_ps(acc[3], acc[7])),
        );
        for d in whole..hd {
            let row = load16(k.add(d * KEY_BLOCK));
            s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(*qh.get_unchecked(d)), row));
        }
        s = _mm512_mul_ps(s, _mm512_set1_ps(scale));
        let mask: __mmask16 = ((1u32 << out.len()) - 1) as __mmask16;
        _mm512_mask_storeu_ps(out.as_mut_ptr(), mask, s);
    }

    /// `o += p_j · v_j` over the cache's first `p.len()` value rows (`kv` apart, from
    /// `off`), a 64-value head in four registers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn weighted_values_64(o: &mut [f32], p: &[f32], cv: &[f16], kv: usize, off: usize) {
        debug_assert!(o.len() == 64 && cv.len() >= p.len().saturating_sub(1) * kv + off + 64);
        let mut acc = [
            _mm512_loadu_ps(o.as_ptr()),
            _mm512_loadu_ps(o.as_ptr().add(16)),
            _mm512_loadu_ps(o.as_ptr().add(32)),
            _mm512_loadu_ps(o.as_ptr().add(48)),
        ];
        for (j, &pj) in p.iter().enumerate() {
            let w = _mm512_set1_ps(pj);
            let v = cv.as_ptr().add(j * kv + off);
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm512_add_ps(*a, _mm512_mul_ps(w, load16(v.add(16 * c))));
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(o.as_mut_ptr().add(16 * c), *a);
        }
    }
}

/// `e^(s − max)` in place of each score, and their sum: sixteen partial sums (by position
/// mod 16) added pairwise at the end — a fixed order, so the same bits for the same scores,
/// in a shape the compiler vectorizes.
#[inline(always)]
fn softmax_numerators(scores: &mut [f32], max: f32) -> f32 {
    let mut part = [0.0f32; 16];
    let mut chunks = scores.chunks_exact_mut(16);
    for c in &mut chunks {
        for (p, s) in part.iter_mut().zip(c.iter_mut()) {
            *s = exp_nonpositive(*s - max);
            *p += *s;
        }
    }
    for (p, s) in part.iter_mut().zip(chunks.into_remainder()) {
        *s = exp_nonpositive(*s - max);
        *p += *s;
    }
    for width in [8, 4, 2, 1] {
        for i in 0..width {
            part[i] += part[i + width];
        }
    }
    part[0]
}

/// `e^x` for `x ≤ 0` (a score less the largest), within 2 ulp of the true value (Cephes'
/// `expf`: `2^n · e^r` with `|r| ≤ ln 2 / 2` and a degree-6 polynomial for `e^r`); below
/// −87 it is `e^−87`, a weight no sum of at most a context's positions notices. Plain
/// multiplies and adds, no call: the compiler vectorizes the loop around it.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 0.0);
    let n = (x * LOG2_E + MAGIC) - MAGIC;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_2e-4f32;
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = p * r + c;
    }
    let y = p * (r * r) + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `g[i] = swiglu(g[i], u[i])`, compiled for AVX-512 where the CPU has it: sixteen lanes of
/// the same operations (so the same values), where the baseline build has four.
fn swiglu_rows(g: &mut [f32], u: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::quant::kernels::Level::best() == super::quant::kernels::Level::Avx512Vnni {
        // SAFETY: the CPU has AVX-512 F (`Level::best`).
        return unsafe { swiglu_rows_avx512(g, u) };
    }
    swiglu_rows_here(g, u)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn swiglu_rows_avx512(g: &mut [f32], u: &[f32]) {
    swiglu_rows_here(g, u)
}

#[inline(always)]
fn swiglu_rows_here(g: &mut [f32], u: &[f32]) {
    g.iter_mut().zip(u).for_each(|(a, &b)| *a = swiglu(*a, b));
}

/// `a · σ(a) · b` (SwiGLU), the logistic function from [`exp_nonpositive`] of `−|a|`:
/// plain arithmetic the compiler vectorizes, where a libm `expf` call per value was the
/// most of the step's one-thread work between products.
#[inline(always)]
fn swiglu(a: f32, b: f32) -> f32 {
    let e = exp_nonpositive(-a.abs());
    let sigmoid = if a >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) };
    a * sigmoid * b
}

/// `y += a·x`.
#[inline(always)]
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (p, &q) in y.iter_mut().zip(x) {
        *p += a * q;
    }
}

/// A dot product in eight lanes (vectorized by the compiler; the same order every time).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = crate::model::simulated::mix(seed ^ (i as u64).wrapping_mul(0x9E37_79B9));
                (h >> 40) as f32 / 16_777_216.0 * 2.0 - 1.0
            })
            .collect()
    }

    /// Attention over the blocked half-precision key cache, several queries of a row
    /// together, on every instruction level, is bit for bit each query's attention alone
    /// in the plain row-major form (each key's score a `dot`): for a head size with the
    /// 16-lane loops (64) and one with leftover dimensions (36), caches seen up to inside a
    /// block, draft nodes on a path.
    #[test]
    fn blocked_keys_attend_as_row_major_keys_on_every_level() {
        for hd in [64usize, 36] {
            let (kv_heads, heads, total) = (3, 9, 37);
            let (kv, group, width) = (kv_heads * hd, heads / kv_heads, heads * hd);
            let mut cache = Cache { k: vec![Vec::new()], v: vec![Vec::new()], ..Cache::default() };
            // (In half precision, as the forward rounds them before the cache takes them.)
            let (mut keys, mut values) = (noise(total * kv, 1), noise(total * kv, 2));
            let (mut kh, mut vh) = (Vec::new(), Vec::new());
            round_to_half(&mut keys, &mut kh);
            round_to_half(&mut values, &mut vh);
            for j in 0..total {
                cache.push(0, &kh[j * kv..(j + 1) * kv], &vh[j * kv..(j + 1) * kv]);
            }
            let (nk, nv) = (noise(3 * kv, 3), noise(3 * kv, 4));
            let spans = [
                Span { upto: 30, path: vec![] },
                Span { upto: 37, path: vec![1, 3] },
                Span { upto: 5, path: vec![2] },
            ];
            let q = noise(spans.len() * width, 5);
            let rk = RowKv { ck: &cache.k[0], cv: &cache.v[0], nk: &nk, nv: &nv, kv, hd, kv_heads };
            // 0: plain; 1: AVX2 (where the CPU has it); 2: the best level.
            let run = |level: u8| {
                let mut out = vec![0.0f32; spans.len() * width];
                for kvh in 0..kv_heads {
                    let g = HeadGroup { kvh, group, q: &q, spans: &spans };
                    match level {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: only where the CPU has AVX2.
                        1 if std::arch::is_x86_feature_detected!("avx2") => unsafe {
                            attend_group_avx2(&rk, &g, &mut out)
                        },
                        2 => attend_group(&rk, &g, &mut out),
                        _ => attend_group_here::<false>(&rk, &g, &mut out),
                    }
                }
                out
            };
            // The plain form, one query at a time, keys row-major.
            let mut want = vec![0.0f32; spans.len() * width];
            let scale = 1.0 / (hd as f32).sqrt();
            for (i, span) in spans.iter().enumerate() {
                for head in 0..heads {
                    let off = (head / group) * hd;
                    let qh = &q[i * width + head * hd..i * width + (head + 1) * hd];
                    let mut s: Vec<f32> = (0..span.upto)
                        .map(|j| dot(qh, &keys[j * kv + off..j * kv + off + hd]) * scale)
                        .collect();
                    s.extend(
                        span.path
                            .iter()
                            .map(|&v| dot(qh, &nk[(v - 1) * kv + off..(v - 1) * kv + off + hd]) * scale),
                    );
                    let max = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                    let sum = softmax_numerators(&mut s, max);
                    let o = &mut want[i * width + head * hd..i * width + (head + 1) * hd];
                    for (j, &x) in s[..span.upto].iter().enumerate() {
                        axpy(o, x / sum, &values[j * kv + off..j * kv + off + hd]);
                    }
                    for (&x, &v) in s[span.upto..].iter().zip(&span.path) {
                        axpy(o, x / sum, &nv[(v - 1) * kv + off..(v - 1) * kv + off + hd]);
                    }
                }
            }
            assert_eq!(run(0), want, "head size {hd}, plain");
            assert_eq!(run(1), want, "head size {hd}, AVX2");
            assert_eq!(run(2), want, "head size {hd}, best level");
        }
    }

    /// SwiGLU gives the same bits whatever the vector width, and stays within a few ulp of
    /// `a / (1 + e^−a) · b` (libm's `e^x`) over the values a forward meets.
    #[test]
    fn swiglu_is_the_same_on_every_level_and_close_to_libm() {
        let g: Vec<f32> =
            (0..20_000).map(|i| (i as f32 - 10_000.0) * 0.013).chain([0.0, -0.0, 95.0, -95.0]).collect();
        let u = noise(g.len(), 9);
        let mut plain = g.clone();
        swiglu_rows_here(&mut plain, &u);
        let mut best = g.clone();
        swiglu_rows(&mut best, &u);
        assert_eq!(
            plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            best.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        for ((&a, &b), &got) in g.iter().zip(&u).zip(&plain) {
            let want = a / (1.0 + (-a).exp()) * b;
            // (Below −87 the weight is e^−87, not less: a value under 1e-35 either way.)
            assert!(
                (got - want).abs() <= 4.0 * f32::EPSILON * want.abs() + 1e-35,
                "swiglu({a}, {b}): {got} against {want}"
            );
        }
    }

    /// The attention's `e^x` is within 2 ulp of libm's over the range softmax feeds it.
    #[test]
    fn the_attention_exp_is_within_two_ulp_of_libm() {
        let mut worst = 0u32;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let (got, want) = (exp_nonpositive(x), x.exp());
            let ulp = got.to_bits().abs_diff(want.to_bits());
            assert!(ulp <= 2, "e^{x}: {got} against {want} ({ulp} ulp)");
            worst = worst.max(ulp);
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        eprintln!("largest difference {worst} ulp");
    }
}
