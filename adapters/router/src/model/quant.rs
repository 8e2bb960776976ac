//! The matrix products of the Llama forward: weight matrices in GGUF's block formats
//! (Q4_1, Q8_0) or in `f32`, times a batch of activation rows.
//!
//! Quantized weights are stored interleaved by groups of [`GROUP`] rows: for each block of
//! 32 columns, four consecutive values of each of the group's 16 rows side by side, so that
//! one 512-bit `vpdpbusd` (AVX-512 VNNI) against four activation bytes broadcast gives the
//! 16 rows' partial sums in its 16 lanes — no horizontal sums; a group's weights are read
//! from memory once for every activation row of the forward (with AVX-512 each block is
//! unpacked once for a tile of eight rows; the AVX2 and portable kernels unpack it per row,
//! from cache): a forward of eight rows, or of a draft tree's nodes, costs little more
//! weight traffic than one row.
//! Activations are quantized per row to 8 bits in blocks of 32 (ggml's Q8_1 for Q4_1
//! weights, Q8_0 for Q8_0 weights), and a block's dot product is an exact integer one, as
//! ggml's and candle's CPU kernels do it.
//!
//! Every output `(row, column)` is computed by the same floating-point operations in the
//! same order whatever the number of rows and wherever the row sits in the batch: a row's
//! logits are bit for bit the same in any batch or tree shape. The quantized products are
//! moreover the same bits on every instruction level (portable, AVX2, AVX-512 VNNI); `f32`
//! weights (F32 / F16 tensors, [`Weights::dequantized`]) are summed in eight lanes with AVX2
//! and in sequence without, so they may differ across CPUs in the last bits.

use half::f16;
use rayon::prelude::*;

/// Values per quantized block.
pub(crate) const BLOCK: usize = 32;

/// Weight rows interleaved together (the lanes of a 512-bit vector of `i32`).
pub(crate) const GROUP: usize = 16;

/// Bytes of one group's block: Q4_1 (32 values of 4 bits per row) and Q8_0 (32 bytes).
const Q4_GROUP_BLOCK: usize = GROUP * BLOCK / 2;
const Q8_GROUP_BLOCK: usize = GROUP * BLOCK;

/// A weight matrix `[rows, cols]` (`rows` outputs, each a dot product over `cols`).
#[derive(Debug, Clone)]
pub(crate) enum Weights {
    /// GGUF Q4_1: per block of 32, `w = d·q + m` with 4-bit `q`; rows padded with zeros to
    /// a whole number of groups.
    Q4_1 {
        rows: usize,
        cols: usize,
        /// Per group and block, the 16 rows' scales and minimums (`[group][block][row]`).
        d: Vec<f32>,
        m: Vec<f32>,
        /// Per group and block 256 bytes: four chunks `h` of 64 bytes, whose byte `4k + t`
        /// is byte `4h + t` of row `k`'s GGUF block (value `4h + t` in its low nibble,
        /// `16 + 4h + t` in its high nibble).
        qs: Vec<u8>,
    },
    /// GGUF Q8_0: per block of 32, `w = d·q` with 8-bit `q`; rows padded as for Q4_1.
    Q8_0 {
        rows: usize,
        cols: usize,
        /// Per group and block, the 16 rows' scales.
        d: Vec<f32>,
        /// Per group and block 512 bytes: eight chunks `g` of 64 bytes, whose byte
        /// `4k + t` is row `k`'s value `4g + t` plus 128 (`vpdpbusd` multiplies unsigned
        /// bytes by signed ones; the 128 is taken back with the activations' block sum).
        qs: Vec<u8>,
    },
    /// Plain `f32`, row-major.
    F32 { rows: usize, cols: usize, w: Vec<f32> },
}

/// Why a weight tensor cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct WeightError(pub String);

impl Weights {
    /// Reads a GGUF tensor's raw bytes: `kind` is ggml's type id (0 F32, 1 F16, 3 Q4_1,
    /// 8 Q8_0); `rows × cols` with `cols` the fastest dimension.
    pub fn from_gguf(kind: u32, rows: usize, cols: usize, bytes: &[u8]) -> Result<Self, WeightError> {
        let n = rows * cols;
        let need = |per_block: usize| -> Result<usize, WeightError> {
            if !cols.is_multiple_of(BLOCK) {
                return Err(WeightError(format!("{cols} columns are not a whole number of blocks")));
            }
            let blocks = n / BLOCK;
            if bytes.len() != blocks * per_block {
                return Err(WeightError(format!("{} bytes for {blocks} blocks of {per_block}", bytes.len())));
            }
            Ok(blocks)
        };
        let h = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        let (nb, groups) = (cols / BLOCK, rows.div_ceil(GROUP));
        // Where row `r`'s block `b` goes: its group's block, lane `r % GROUP`.
        let slot = |r: usize, b: usize| ((r / GROUP) * nb + b, r % GROUP);
        match kind {
            0 | 1 => {
                let size = if kind == 0 { 4 } else { 2 };
                if bytes.len() != n * size {
                    return Err(WeightError(format!("{} bytes for {n} values", bytes.len())));
                }
                let w = if kind == 0 {
                    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
                } else {
                    bytes.chunks_exact(2).map(h).collect()
                };
                Ok(Weights::F32 { rows, cols, w })
            }
            3 => {
                need(20)?;
                let (mut d, mut m) = (vec![0.0; groups * nb * GROUP], vec![0.0; groups * nb * GROUP]);
                let mut qs = vec![0u8; groups * nb * Q4_GROUP_BLOCK];
                for (i, blk) in bytes.chunks_exact(20).enumerate() {
                    let (gb, k) = slot(i / nb, i % nb);
                    d[gb * GROUP + k] = h(&blk[0..2]);
                    m[gb * GROUP + k] = h(&blk[2..4]);
                    for (j, &byte) in blk[4..20].iter().enumerate() {
                        qs[gb * Q4_GROUP_BLOCK + (j / 4) * 64 + 4 * k + j % 4] = byte;
                    }
                }
                Ok(Weights::Q4_1 { rows, cols, d, m, qs })
            }
            8 => {
                need(34)?;
                let mut d = vec![0.0; groups * nb * GROUP];
                // Padding rows hold weight 0, stored as 128.
                let mut qs = vec![0x80u8; groups * nb * Q8_GROUP_BLOCK];
                for (i, blk) in bytes.chunks_exact(34).enumerate() {
                    let (gb, k) = slot(i / nb, i % nb);
                    d[gb * GROUP + k] = h(&blk[0..2]);
                    for (j, &byte) in blk[2..34].iter().enumerate() {
                        qs[gb * Q8_GROUP_BLOCK + (j / 4) * 64 + 4 * k + j % 4] = byte ^ 0x80;
                    }
                }
                Ok(Weights::Q8_0 { rows, cols, d, qs })
            }
            k => Err(WeightError(format!("ggml type {k} is not supported (F32, F16, Q4_1, Q8_0 are)"))),
        }
    }

    /// Outputs per input row.
    pub fn rows(&self) -> usize {
        match self {
            Weights::Q4_1 { rows, .. } | Weights::Q8_0 { rows, .. } | Weights::F32 { rows, .. } => *rows,
        }
    }

    /// Inputs per row.
    pub fn cols(&self) -> usize {
        match self {
            Weights::Q4_1 { cols, .. } | Weights::Q8_0 { cols, .. } | Weights::F32 { cols, .. } => *cols,
        }
    }

    /// Row `r` as `f32` (an embedding lookup).
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        let c = self.cols();
        let nb = c / BLOCK;
        let (g, k) = (r / GROUP, r % GROUP);
        match self {
            Weights::F32 { w, .. } => out.copy_from_slice(&w[r * c..(r + 1) * c]),
            Weights::Q4_1 { d, m, qs, .. } => {
                for b in 0..nb {
                    let gb = g * nb + b;
                    let (dd, mm) = (d[gb * GROUP + k], m[gb * GROUP + k]);
                    for j in 0..16 {
                        let q = qs[gb * Q4_GROUP_BLOCK + (j / 4) * 64 + 4 * k + j % 4];
                        out[b * BLOCK + j] = f32::from(q & 0xF) * dd + mm;
                        out[b * BLOCK + j + 16] = f32::from(q >> 4) * dd + mm;
                    }
                }
            }
            Weights::Q8_0 { d, qs, .. } => {
                for b in 0..nb {
                    let gb = g * nb + b;
                    for j in 0..BLOCK {
                        let q = (qs[gb * Q8_GROUP_BLOCK + (j / 4) * 64 + 4 * k + j % 4] ^ 0x80) as i8;
                        out[b * BLOCK + j] = f32::from(q) * d[gb * GROUP + k];
                    }
                }
            }
        }
    }

    /// The same matrix dequantized to `f32` (the other way to make rows cheap: a plain
    /// multi-row product, four times the memory of Q8 and eight of Q4).
    pub fn dequantized(&self) -> Self {
        let (rows, cols) = (self.rows(), self.cols());
        let mut w = vec![0.0; rows * cols];
        for r in 0..rows {
            self.row_f32(r, &mut w[r * cols..(r + 1) * cols]);
        }
        Weights::F32 { rows, cols, w }
    }

    /// Bytes the weights take.
    pub fn memory_bytes(&self) -> usize {
        match self {
            Weights::Q4_1 { d, m, qs, .. } => (d.len() + m.len()) * 4 + qs.len(),
            Weights::Q8_0 { d, qs, .. } => d.len() * 4 + qs.len(),
            Weights::F32 { w, .. } => w.len() * 4,
        }
    }

    /// `out[r·rows + j] = Σ_c w[j][c] · x[r·cols + c]` for the `n = x.len() / cols` rows of
    /// `x`, on the rayon pool.
    pub fn matmul(&self, x: &[f32], out: &mut [f32]) {
        Self::matmul_many(x, &mut [(self, out)]);
    }

    /// [`matmul`](Self::matmul) of several matrices with the same input (Q, K and V; gate
    /// and up): the input quantized once, one pass of the pool for all of them.
    pub fn matmul_many(x: &[f32], products: &mut [(&Weights, &mut [f32])]) {
        Self::matmul_many_at(kernels::Level::best(), x, products);
    }

    /// [`matmul_many`](Self::matmul_many) on the instructions of `level` (or the best the
    /// CPU has below it).
    pub(crate) fn matmul_many_at(level: kernels::Level, x: &[f32], products: &mut [(&Weights, &mut [f32])]) {
        let Some(cols) = products.first().map(|p| p.0.cols()) else { return };
        let n = x.len() / cols.max(1);
        let need = |f: fn(&Weights) -> bool| products.iter().any(|p| f(p.0));
        let q8_1 = need(|w| matches!(w, Weights::Q4_1 { .. })).then(|| Q8Rows::quantize(x, cols, true));
        let q8_0 = need(|w| matches!(w, Weights::Q8_0 { .. })).then(|| Q8Rows::quantize(x, cols, false));
        // Output columns in chunks of whole groups (a few per thread: each chunk is a task
        // of the pool, and a task costs microseconds), each chunk's results gathered then
        // scattered.
        let total: usize = products.iter().map(|p| p.0.rows()).sum();
        let chunk =
            total.div_ceil(rayon::current_num_threads().max(1) * 4).max(GROUP).next_multiple_of(GROUP);
        let mut tasks = Vec::new();
        for (k, (w, _)) in products.iter().enumerate() {
            for j0 in (0..w.rows()).step_by(chunk) {
                tasks.push((k, j0, (j0 + chunk).min(w.rows())));
            }
        }
        let weights: Vec<&Weights> = products.iter().map(|p| p.0).collect();
        let parts: Vec<Vec<f32>> = tasks
            .par_iter()
            .map(|&(k, j0, j1)| {
                let w = weights[k];
                // Row-major within the chunk (`[r][j − j0]`), so that the results go out
                // as one copy per activation row.
                let width = j1 - j0;
                let mut part = vec![0.0f32; width * n];
                let acts = match w {
                    Weights::Q4_1 { .. } => q8_1.as_ref(),
                    Weights::Q8_0 { .. } => q8_0.as_ref(),
                    Weights::F32 { cols, w: fw, .. } => {
                        let mut col = vec![0.0f32; n];
                        for j in j0..j1 {
                            kernels::f32_rows(level, &fw[j * cols..(j + 1) * cols], x, &mut col);
                            for (r, &v) in col.iter().enumerate() {
                                part[r * width + j - j0] = v;
                            }
                        }
                        return part;
                    }
                };
                let Some(a) = acts else { return part };
                let mut lanes = vec![0.0f32; n * GROUP];
                for g in j0 / GROUP..j1.div_ceil(GROUP) {
                    w.group_rows(level, g, a, &mut lanes);
                    let (lo, hi) = (g * GROUP, ((g + 1) * GROUP).min(j1));
                    for r in 0..n {
                        part[r * width + lo - j0..r * width + hi - j0]
                            .copy_from_slice(&lanes[r * GROUP..r * GROUP + hi - lo]);
                    }
                }
                part
            })
            .collect();
        for (&(k, j0, j1), part) in tasks.iter().zip(parts) {
            let (rows, width) = (weights[k].rows(), j1 - j0);
            let out = &mut *products[k].1;
            for r in 0..n {
                out[r * rows + j0..r * rows + j1].copy_from_slice(&part[r * width..(r + 1) * width]);
            }
        }
    }

    /// Group `g`'s 16 weight rows against every activation row: `out[r·16 + k]`.
    fn group_rows(&self, level: kernels::Level, g: usize, a: &Q8Rows, out: &mut [f32]) {
        let nb = a.nb;
        let blocks = g * nb..(g + 1) * nb;
        match self {
            Weights::Q4_1 { d, m, qs, .. } => {
                let span = |s: &std::ops::Range<usize>, per: usize| s.start * per..s.end * per;
                kernels::q4_1_group(
                    level,
                    &d[span(&blocks, GROUP)],
                    &m[span(&blocks, GROUP)],
                    &qs[span(&blocks, Q4_GROUP_BLOCK)],
                    a,
                    out,
                );
            }
            Weights::Q8_0 { d, qs, .. } => kernels::q8_0_group(
                level,
                &d[blocks.start * GROUP..blocks.end * GROUP],
                &qs[blocks.start * Q8_GROUP_BLOCK..blocks.end * Q8_GROUP_BLOCK],
                a,
                out,
            ),
            Weights::F32 { .. } => {}
        }
    }
}

/// Activation rows quantized to 8 bits per block of 32: `x ≈ d·q`, and (Q8_1) `s = d·Σq`.
#[derive(Debug)]
pub(crate) struct Q8Rows {
    /// Blocks per row.
    pub nb: usize,
    pub d: Vec<f32>,
    pub s: Vec<f32>,
    /// Per block, `Σq` (the Q8_0 kernels take back the 128 added to the weights with it).
    pub sum: Vec<i32>,
    pub qs: Vec<i8>,
}

impl Q8Rows {
    /// Quantizes each row of `x` (`cols` values) as ggml's `quantize_row_q8_1` (with the
    /// sums) or `quantize_row_q8_0` does.
    pub fn quantize(x: &[f32], cols: usize, sums: bool) -> Self {
        #[cfg(target_arch = "x86_64")]
        if kernels::Level::best() == kernels::Level::Avx512Vnni {
            // SAFETY: the CPU has AVX-512 F and BW (`Level::best`).
            return unsafe { Self::quantize_avx512(x, cols, sums) };
        }
        Self::quantize_here(x, cols, sums)
    }

    /// [`quantize_here`](Self::quantize_here) in explicit AVX-512 form, block by block: the
    /// same values (the largest magnitude is exact in any order; a product rounded to
    /// nearest, ties to even, by `vcvtps2dq` is what adding and taking away 1.5·2²³ gives).
    /// The compiler left the plain loop's saturating `as i32` scalar, and with it the
    /// whole block: a twentieth of a batch-8 SmolLM2 step, on the step's one thread.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    unsafe fn quantize_avx512(x: &[f32], cols: usize, sums: bool) -> Self {
        use std::arch::x86_64::*;
        let nb_total = x.len() / BLOCK;
        let mut rows = Self::zeroed(x.len(), cols, sums);
        let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
        for k in 0..nb_total {
            let p = x.as_ptr().add(k * BLOCK);
            let (a, b) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
            // (`vmaxps` answers its second operand where either is NaN: the running maximum
            // goes second, so a NaN is passed over as `f32::max` passes it over.)
            let running = _mm512_max_ps(_mm512_abs_ps(a), _mm512_setzero_ps());
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(b), running));
            let (dd, id) = Self::scales(amax);
            let id = _mm512_set1_ps(id);
            // A NaN product (a NaN value, or an infinite one times a zero inverse) is 0, as
            // the plain loop's `as i32` makes it (`vcvtps2dq` would give `i32::MIN`).
            let to_int = |v: __m512| {
                let p = _mm512_mul_ps(v, id);
                let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(p, p);
                let r = _mm512_maskz_mov_epi32(ordered, _mm512_cvtps_epi32(p));
                _mm512_min_epi32(_mm512_max_epi32(r, lo), hi)
            };
            let (qa, qb) = (to_int(a), to_int(b));
            let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
            let out = rows.qs.as_mut_ptr().add(k * BLOCK);
            _mm_storeu_si128(out as *mut __m128i, _mm512_cvtepi32_epi8(qa));
            _mm_storeu_si128(out.add(16) as *mut __m128i, _mm512_cvtepi32_epi8(qb));
            rows.set_block(k, dd, sum);
        }
        rows
    }

    /// Rows of `values` activations, `cols` each, every block zero (filled block by block).
    fn zeroed(values: usize, cols: usize, sums: bool) -> Self {
        let nb_total = values / BLOCK;
        Self {
            nb: cols / BLOCK,
            d: vec![0.0; nb_total],
            s: vec![0.0; if sums { nb_total } else { 0 }],
            sum: vec![0; nb_total],
            qs: vec![0i8; nb_total * BLOCK],
        }
    }

    /// Block `k`'s scale and byte sum (and, where the sums are kept, `d·Σq`).
    #[inline(always)]
    fn set_block(&mut self, k: usize, dd: f32, sum: i32) {
        self.d[k] = dd;
        self.sum[k] = sum;
        if let Some(s) = self.s.get_mut(k) {
            *s = dd * sum as f32;
        }
    }

    /// A block's scale `amax / 127` and the inverse the values are multiplied by: zero for
    /// a block whose scale is zero or subnormal (its bytes all zero), so that every product
    /// of finite values is finite (at most ~127) and rounds alike in either form.
    #[inline(always)]
    fn scales(amax: f32) -> (f32, f32) {
        let dd = amax / 127.0;
        (dd, if dd >= f32::MIN_POSITIVE { 1.0 / dd } else { 0.0 })
    }

    #[inline(always)]
    fn quantize_here(x: &[f32], cols: usize, sums: bool) -> Self {
        let mut rows = Self::zeroed(x.len(), cols, sums);
        for (k, block) in x.chunks_exact(BLOCK).enumerate() {
            let q = &mut rows.qs[k * BLOCK..(k + 1) * BLOCK];
            let mut amax = [0.0f32; 8];
            for c in block.chunks_exact(8) {
                for (m, v) in amax.iter_mut().zip(c) {
                    *m = m.max(v.abs());
                }
            }
            let amax = amax.iter().fold(0.0f32, |a, &m| a.max(m));
            let (dd, id) = Self::scales(amax);
            let mut sum = 0i32;
            for (q, &v) in q.iter_mut().zip(block) {
                // Round to nearest (ties to even: ggml's roundf takes ties away from zero,
                // a difference only at exact halves) without a libm call: adding 1.5·2²³
                // leaves no fraction bits. (|v · id| ≤ 127 and a little: clamped.)
                const MAGIC: f32 = 12_582_912.0;
                let r = (((v * id + MAGIC) - MAGIC) as i32).clamp(-127, 127);
                sum += r;
                *q = r as i8;
            }
            rows.set_block(k, dd, sum);
        }
        rows
    }

    pub(crate) fn rows(&self) -> usize {
        self.d.len() / self.nb.max(1)
    }
}

// The kernels walk blocks by index across several parallel arrays (scales, minimums,
// quantized values): index loops are the clearer form there.
#[allow(clippy::needless_range_loop)]
pub(crate) mod kernels {
    use super::{Q8Rows, BLOCK, GROUP, Q4_GROUP_BLOCK, Q8_GROUP_BLOCK};

    /// Activation rows handled together: each weight block is unpacked once for them.
    pub const TILE: usize = 8;

    /// The instructions a product runs on.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub enum Level {
        /// Plain Rust.
        Portable,
        /// AVX2 and FMA.
        Avx2,
        /// AVX-512 F/BW with VNNI (one instruction per 64 byte products), AVX2 and FMA.
        Avx512Vnni,
    }

    impl Level {
        /// The best this CPU has (detected once).
        pub fn best() -> Level {
            static BEST: std::sync::OnceLock<Level> = std::sync::OnceLock::new();
            *BEST.get_or_init(|| {
                #[cfg(target_arch = "x86_64")]
                {
                    use std::arch::is_x86_feature_detected as has;
                    if has!("avx2") && has!("fma") {
                        if has!("avx512f") && has!("avx512bw") && has!("avx512vnni") {
                            return Level::Avx512Vnni;
                        }
                        return Level::Avx2;
                    }
                }
                Level::Portable
            })
        }

        /// Every level this CPU can run, lowest first.
        #[cfg(test)]
        pub fn available() -> Vec<Level> {
            [Level::Portable, Level::Avx2, Level::Avx512Vnni]
                .into_iter()
                .filter(|l| *l <= Level::best())
                .collect()
        }
    }

    // Every level takes the same floating-point steps for one block of one output, in this
    // order, so that every level gives the same bits: the exact integer dot product `p`,
    // then `acc = fma(p, d_w·d_y, acc)`, then for Q4_1 `acc = fma(m_w, s_y, acc)`.

    /// The activation rows a group's product computes, once the slices' lengths are checked
    /// (the SIMD kernels read them unchecked).
    fn checked(a: &Q8Rows, d: &[f32], qs: &[u8], per_block: usize, out: &[f32]) -> usize {
        let nb = a.nb;
        assert!(d.len() >= nb * GROUP && qs.len() >= nb * per_block, "a group's weights are short");
        assert!(a.qs.len() >= a.rows() * nb * BLOCK && a.sum.len() >= a.rows() * nb, "activations are short");
        a.rows().min(out.len() / GROUP)
    }

    /// Q4_1 group × Q8_1 rows: `out[r·16 + k]` for weight row `k` of the group.
    pub fn q4_1_group(level: Level, d: &[f32], m: &[f32], qs: &[u8], a: &Q8Rows, out: &mut [f32]) {
        let rows = checked(a, d, qs, Q4_GROUP_BLOCK, out);
        assert!(m.len() >= a.nb * GROUP && a.s.len() >= rows * a.nb, "Q4_1 needs minimums and sums");
        #[cfg(target_arch = "x86_64")]
        match level.min(Level::best()) {
            // SAFETY: the CPU has what the level needs (`Level::best`); the slices' lengths
            // were checked above.
            Level::Avx512Vnni => return unsafe { avx512::q4_1_group(d, m, qs, a, rows, out) },
            // SAFETY: as above.
            Level::Avx2 => return unsafe { avx2::q4_1_group(d, m, qs, a, rows, out) },
            Level::Portable => {}
        }
        let nb = a.nb;
        for r in 0..rows {
            let mut acc = [0.0f32; GROUP];
            for b in 0..nb {
                let k = r * nb + b;
                let y = &a.qs[k * BLOCK..(k + 1) * BLOCK];
                let blk = &qs[b * Q4_GROUP_BLOCK..(b + 1) * Q4_GROUP_BLOCK];
                for (lane, acc) in acc.iter_mut().enumerate() {
                    let mut p = 0i32;
                    for h in 0..4 {
                        for t in 0..4 {
                            let q = blk[h * 64 + 4 * lane + t];
                            p += i32::from(q & 0xF) * i32::from(y[4 * h + t])
                                + i32::from(q >> 4) * i32::from(y[16 + 4 * h + t]);
                        }
                    }
                    let scale = d[b * GROUP + lane] * a.d[k];
                    *acc = (p as f32).mul_add(scale, *acc);
                    *acc = m[b * GROUP + lane].mul_add(a.s[k], *acc);
                }
            }
            out[r * GROUP..(r + 1) * GROUP].copy_from_slice(&acc);
        }
    }

    /// Q8_0 group × Q8_0 rows: `out[r·16 + k]` for weight row `k` of the group.
    pub fn q8_0_group(level: Level, d: &[f32], qs: &[u8], a: &Q8Rows, out: &mut [f32]) {
        let rows = checked(a, d, qs, Q8_GROUP_BLOCK, out);
        #[cfg(target_arch = "x86_64")]
        match level.min(Level::best()) {
            // SAFETY: the CPU has what the level needs (`Level::best`); the slices' lengths
            // were checked above.
            Level::Avx512Vnni => return unsafe { avx512::q8_0_group(d, qs, a, rows, out) },
            // SAFETY: as above.
            Level::Avx2 => return unsafe { avx2::q8_0_group(d, qs, a, rows, out) },
            Level::Portable => {}
        }
        let nb = a.nb;
        for r in 0..rows {
            let mut acc = [0.0f32; GROUP];
            for b in 0..nb {
                let k = r * nb + b;
                let y = &a.qs[k * BLOCK..(k + 1) * BLOCK];
                let blk = &qs[b * Q8_GROUP_BLOCK..(b + 1) * Q8_GROUP_BLOCK];
                for (lane, acc) in acc.iter_mut().enumerate() {
                    let mut p = 0i32;
                    for j in 0..BLOCK {
                        let q = (blk[(j / 4) * 64 + 4 * lane + j % 4] ^ 0x80) as i8;
                        p += i32::from(q) * i32::from(y[j]);
                    }
                    let scale = d[b * GROUP + lane] * a.d[k];
                    *acc = (p as f32).mul_add(scale, *acc);
                }
            }
            out[r * GROUP..(r + 1) * GROUP].copy_from_slice(&acc);
        }
    }

    pub fn f32_rows(level: Level, w: &[f32], x: &[f32], dst: &mut [f32]) {
        let cols = w.len();
        #[cfg(target_arch = "x86_64")]
        if level.min(Level::best()) >= Level::Avx2 {
            // SAFETY: the CPU has AVX2 and FMA (`Level::best`).
            return unsafe { avx2::f32_rows(w, x, dst) };
        }
        for (r, out) in dst.iter_mut().enumerate() {
            let xr = &x[r * cols..(r + 1) * cols];
            *out = w.iter().zip(xr).map(|(a, b)| a * b).sum();
        }
    }

    /// Four activation bytes at `p` as one `i32` (to broadcast to every lane).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn four(p: *const i8) -> i32 {
        std::ptr::read_unaligned(p as *const i32)
    }

    /// One `vpdpbusd` per four columns: 16 weight rows' bytes (one chunk of 64) against
    /// four activation bytes broadcast, the 16 rows' sums in the 16 lanes.
    #[cfg(target_arch = "x86_64")]
    mod avx512 {
        /// `$tile::<T>(args…, r0, out)` over the activation rows in tiles of up to [`TILE`]
        /// from `r0`, `T` a constant (so that each tile's row loop unrolls).
        macro_rules! tiles {
            ($rows:expr, $tile:ident($($arg:expr),*), $out:expr) => {{
                let mut r0 = 0;
                while r0 < $rows {
                    let t = TILE.min($rows - r0);
                    match t {
                        8 => $tile::<8>($($arg,)* r0, $out),
                        7 => $tile::<7>($($arg,)* r0, $out),
                        6 => $tile::<6>($($arg,)* r0, $out),
                        5 => $tile::<5>($($arg,)* r0, $out),
                        4 => $tile::<4>($($arg,)* r0, $out),
                        3 => $tile::<3>($($arg,)* r0, $out),
                        2 => $tile::<2>($($arg,)* r0, $out),
                        _ => $tile::<1>($($arg,)* r0, $out),
                    }
                    r0 += t;
                }
            }};
        }

        use super::{four, Q8Rows, BLOCK, GROUP, Q4_GROUP_BLOCK, Q8_GROUP_BLOCK, TILE};
        use std::arch::x86_64::*;

        /// The caller checked the slices' lengths (`kernels::checked`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        pub unsafe fn q4_1_group(d: &[f32], m: &[f32], qs: &[u8], a: &Q8Rows, rows: usize, out: &mut [f32]) {
            tiles!(rows, q4_1_tile(d, m, qs, a), out);
        }

        /// `T` activation rows (a constant, so that the row loop unrolls) from `r0`.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        unsafe fn q4_1_tile<const T: usize>(
            d: &[f32],
            m: &[f32],
            qs: &[u8],
            a: &Q8Rows,
            r0: usize,
            out: &mut [f32],
        ) {
            let nb = a.nb;
            let low = _mm512_set1_epi8(0x0F);
            let mut acc = [_mm512_setzero_ps(); T];
            for b in 0..nb {
                let blk = qs.as_ptr().add(b * Q4_GROUP_BLOCK);
                let mut lo = [_mm512_setzero_si512(); 4];
                let mut hi = [_mm512_setzero_si512(); 4];
                for h in 0..4 {
                    let q = _mm512_loadu_si512(blk.add(h * 64) as *const _);
                    lo[h] = _mm512_and_si512(q, low);
                    hi[h] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low);
                }
                let dw = _mm512_loadu_ps(d.as_ptr().add(b * GROUP));
                let mw = _mm512_loadu_ps(m.as_ptr().add(b * GROUP));
                for i in 0..T {
                    let k = (r0 + i) * nb + b;
                    let y = a.qs.as_ptr().add(k * BLOCK);
                    // Two chains of four (the low nibbles' values, the high ones') for
                    // twice the instruction-level parallelism; the integer sum is exact.
                    let mut p0 = _mm512_setzero_si512();
                    let mut p1 = _mm512_setzero_si512();
                    for h in 0..4 {
                        p0 = _mm512_dpbusd_epi32(p0, lo[h], _mm512_set1_epi32(four(y.add(4 * h))));
                        p1 = _mm512_dpbusd_epi32(p1, hi[h], _mm512_set1_epi32(four(y.add(16 + 4 * h))));
                    }
                    let p = _mm512_cvtepi32_ps(_mm512_add_epi32(p0, p1));
                    let scale = _mm512_mul_ps(dw, _mm512_set1_ps(*a.d.get_unchecked(k)));
                    acc[i] = _mm512_fmadd_ps(p, scale, acc[i]);
                    acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(*a.s.get_unchecked(k)), acc[i]);
                }
            }
            for i in 0..T {
                _mm512_storeu_ps(out.as_mut_ptr().add((r0 + i) * GROUP), acc[i]);
            }
        }

        /// The caller checked the slices' lengths (`kernels::checked`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        pub unsafe fn q8_0_group(d: &[f32], qs: &[u8], a: &Q8Rows, rows: usize, out: &mut [f32]) {
            tiles!(rows, q8_0_tile(d, qs, a), out);
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        unsafe fn q8_0_tile<const T: usize>(d: &[f32], qs: &[u8], a: &Q8Rows, r0: usize, out: &mut [f32]) {
            let nb = a.nb;
            let mut acc = [_mm512_setzero_ps(); T];
            for b in 0..nb {
                let blk = qs.as_ptr().add(b * Q8_GROUP_BLOCK);
                let dw = _mm512_loadu_ps(d.as_ptr().add(b * GROUP));
                for i in 0..T {
                    let k = (r0 + i) * nb + b;
                    let y = a.qs.as_ptr().add(k * BLOCK);
                    let mut p0 = _mm512_setzero_si512();
                    let mut p1 = _mm512_setzero_si512();
                    for g in 0..4 {
                        let w0 = _mm512_loadu_si512(blk.add(g * 64) as *const _);
                        let w1 = _mm512_loadu_si512(blk.add((g + 4) * 64) as *const _);
                        p0 = _mm512_dpbusd_epi32(p0, w0, _mm512_set1_epi32(four(y.add(4 * g))));
                        p1 = _mm512_dpbusd_epi32(p1, w1, _mm512_set1_epi32(four(y.add(16 + 4 * g))));
                    }
                    // Σ (w + 128)·y − 128·Σy = Σ w·y.
                    let bias = _mm512_set1_epi32(128 * *a.sum.get_unchecked(k));
                    let p = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_add_epi32(p0, p1), bias));
                    let scale = _mm512_mul_ps(dw, _mm512_set1_ps(*a.d.get_unchecked(k)));
                    acc[i] = _mm512_fmadd_ps(p, scale, acc[i]);
                }
            }
            for i in 0..T {
                _mm512_storeu_ps(out.as_mut_ptr().add((r0 + i) * GROUP), acc[i]);
            }
        }
    }

    /// The AVX-512 layout in two halves of eight lanes (rows 0–7, then 8–15 of the group),
    /// with `vpmaddubsw` + `vpmaddwd` for `vpdpbusd`.
    #[cfg(target_arch = "x86_64")]
    mod avx2 {
        use super::{four, Q8Rows, BLOCK, GROUP, Q4_GROUP_BLOCK, Q8_GROUP_BLOCK};
        use std::arch::x86_64::*;

        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(super) unsafe fn hsum(v: __m256) -> f32 {
            let lo = _mm256_castps256_ps128(v);
            let hi = _mm256_extractf128_ps(v, 1);
            let s = _mm_add_ps(lo, hi);
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
            _mm_cvtss_f32(s)
        }

        /// The caller checked the slices' lengths (`kernels::checked`).
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn q4_1_group(d: &[f32], m: &[f32], qs: &[u8], a: &Q8Rows, rows: usize, out: &mut [f32]) {
            let nb = a.nb;
            let low = _mm256_set1_epi8(0x0F);
            let ones = _mm256_set1_epi16(1);
            for half in 0..2 {
                for r in 0..rows {
                    let mut acc = _mm256_setzero_ps();
                    for b in 0..nb {
                        let blk = qs.as_ptr().add(b * Q4_GROUP_BLOCK + half * 32);
                        let k = r * nb + b;
                        let y = a.qs.as_ptr().add(k * BLOCK);
                        // Eight products of ≤ 15·127·2 each: the 16-bit sums cannot overflow.
                        let mut p16 = _mm256_setzero_si256();
                        for h in 0..4 {
                            let q = _mm256_loadu_si256(blk.add(h * 64) as *const __m256i);
                            let lo = _mm256_and_si256(q, low);
                            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
                            let ylo = _mm256_set1_epi32(four(y.add(4 * h)));
                            let yhi = _mm256_set1_epi32(four(y.add(16 + 4 * h)));
                            p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(lo, ylo));
                            p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(hi, yhi));
                        }
                        let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                        let dw = _mm256_loadu_ps(d.as_ptr().add(b * GROUP + half * 8));
                        let mw = _mm256_loadu_ps(m.as_ptr().add(b * GROUP + half * 8));
                        let scale = _mm256_mul_ps(dw, _mm256_set1_ps(*a.d.get_unchecked(k)));
                        acc = _mm256_fmadd_ps(p, scale, acc);
                        acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(*a.s.get_unchecked(k)), acc);
                    }
                    _mm256_storeu_ps(out.as_mut_ptr().add(r * GROUP + half * 8), acc);
                }
            }
        }

        /// The caller checked the slices' lengths (`kernels::checked`).
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn q8_0_group(d: &[f32], qs: &[u8], a: &Q8Rows, rows: usize, out: &mut [f32]) {
            let nb = a.nb;
            let ones = _mm256_set1_epi16(1);
            let flip = _mm256_set1_epi8(-128);
            for half in 0..2 {
                for r in 0..rows {
                    let mut acc = _mm256_setzero_ps();
                    for b in 0..nb {
                        let blk = qs.as_ptr().add(b * Q8_GROUP_BLOCK + half * 32);
                        let k = r * nb + b;
                        let y = a.qs.as_ptr().add(k * BLOCK);
                        let mut p32 = _mm256_setzero_si256();
                        for g in 0..8 {
                            // Back to signed weights; maddubs takes unsigned × signed:
                            // |w| × (y with w's sign), each pair ≤ 128·127·2.
                            let w =
                                _mm256_xor_si256(_mm256_loadu_si256(blk.add(g * 64) as *const __m256i), flip);
                            let yb = _mm256_set1_epi32(four(y.add(4 * g)));
                            let pair = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(yb, w));
                            p32 = _mm256_add_epi32(p32, _mm256_madd_epi16(pair, ones));
                        }
                        let dw = _mm256_loadu_ps(d.as_ptr().add(b * GROUP + half * 8));
                        let scale = _mm256_mul_ps(dw, _mm256_set1_ps(*a.d.get_unchecked(k)));
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, acc);
                    }
                    _mm256_storeu_ps(out.as_mut_ptr().add(r * GROUP + half * 8), acc);
                }
            }
        }

        /// f32 × f32, `TILE` activation rows per weight chunk.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn f32_rows(w: &[f32], x: &[f32], dst: &mut [f32]) {
            use super::TILE;
            let cols = w.len();
            let rows = dst.len().min(x.len() / cols.max(1));
            let mut r0 = 0;
            while r0 < rows {
                let t = TILE.min(rows - r0);
                let mut acc = [_mm256_setzero_ps(); TILE];
                let mut c = 0;
                while c + 8 <= cols {
                    let wv = _mm256_loadu_ps(w.as_ptr().add(c));
                    for (i, acc) in acc.iter_mut().enumerate().take(t) {
                        let xv = _mm256_loadu_ps(x.as_ptr().add((r0 + i) * cols + c));
                        *acc = _mm256_fmadd_ps(wv, xv, *acc);
                    }
                    c += 8;
                }
                for i in 0..t {
                    let mut s = hsum(acc[i]);
                    for cc in c..cols {
                        s += w[cc] * x[(r0 + i) * cols + cc];
                    }
                    dst[r0 + i] = s;
                }
                r0 += t;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = crate::model::simulated::mix(seed ^ i as u64);
                (h >> 40) as f32 / 16_777_216.0 * 2.0 - 1.0
            })
            .collect()
    }

    fn q4_1_bytes(w: &[f32]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in w.chunks_exact(32) {
            let (lo, hi) = b.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            let d = (hi - lo) / 15.0;
            out.extend(f16::from_f32(d).to_le_bytes());
            out.extend(f16::from_f32(lo).to_le_bytes());
            let q = |v: f32| if d > 0.0 { ((v - lo) / d).round().clamp(0.0, 15.0) as u8 } else { 0 };
            for j in 0..16 {
                out.push(q(b[j]) | (q(b[j + 16]) << 4));
            }
        }
        out
    }

    fn q8_0_bytes(w: &[f32]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in w.chunks_exact(32) {
            let amax = b.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            out.extend(f16::from_f32(d).to_le_bytes());
            out.extend(b.iter().map(|&v| if d > 0.0 { (v / d).round() as i8 as u8 } else { 0 }));
        }
        out
    }

    /// Each format's product is the dequantized weights' product (within the 8-bit
    /// quantization of the activations), a row's result is bit for bit the same in any
    /// batch, at any position, and the quantized products the same on every level.
    #[test]
    fn products_match_the_dequantized_weights_and_do_not_depend_on_the_batch() {
        // 96 columns: three blocks; 70 weight rows: four groups of 16 and one padded from 6;
        // 11 activation rows: a full tile of 8 and one of 3.
        let (rows, cols, n) = (70, 96, 11);
        let w = noise(rows * cols, 1);
        let x = noise(n * cols, 2);
        let mut first: Vec<Vec<f32>> = Vec::new();
        for level in kernels::Level::available() {
            for (f, (kind, bytes)) in [
                (3u32, q4_1_bytes(&w)),
                (8, q8_0_bytes(&w)),
                (0, w.iter().flat_map(|v| v.to_le_bytes()).collect()),
            ]
            .into_iter()
            .enumerate()
            {
                let q = Weights::from_gguf(kind, rows, cols, &bytes).unwrap();
                let product = |x: &[f32]| {
                    let mut out = vec![0.0; x.len() / cols * rows];
                    Weights::matmul_many_at(level, x, &mut [(&q, &mut out)]);
                    out
                };
                let got = product(&x);
                // The quantized products are the same bits on every level.
                if f < 2 {
                    match first.get(f) {
                        Some(want) => {
                            assert_eq!(&got, want, "{level:?}, type {kind}: other bits than portable")
                        }
                        None => first.push(got.clone()),
                    }
                }
                let Weights::F32 { w: fw, .. } = q.dequantized() else { unreachable!() };
                for r in 0..n {
                    for j in 0..rows {
                        let want: f32 = (0..cols).map(|c| fw[j * cols + c] * x[r * cols + c]).sum();
                        let a = got[r * rows + j];
                        assert!(
                            (a - want).abs() < 0.05 + 0.02 * want.abs(),
                            "{level:?}, type {kind}: {a} vs {want}"
                        );
                    }
                }
                // Row 9 alone, second of two, and eighth of eight gives the same bits.
                let row = |r: usize| x[r * cols..(r + 1) * cols].to_vec();
                for (batch, at) in [(vec![9], 0), (vec![3, 9], 1), (vec![0, 1, 2, 3, 4, 5, 6, 9], 7)] {
                    let xs: Vec<f32> = batch.iter().flat_map(|&r| row(r)).collect();
                    let out = product(&xs);
                    assert_eq!(
                        out[at * rows..(at + 1) * rows],
                        got[9 * rows..10 * rows],
                        "{level:?}, type {kind}"
                    );
                }
            }
        }
    }

    /// The plain loop quantizes as a reference written with `round_ties_even` does, and
    /// the explicit AVX-512 form (where the CPU has it) gives the plain loop's values:
    /// random blocks at many scales, ties, tiny and zero blocks, non-finite values.
    #[test]
    fn quantization_is_the_same_on_every_level() {
        let cols = 32 * 24;
        let mut x = Vec::new();
        for (i, scale) in [1e-40f32, 1e-38, 3e-36, 1e-3, 0.5, 1.0, 7.0, 1e4, 3e30].iter().enumerate() {
            x.extend(noise(cols, 20 + i as u64).iter().map(|v| v * scale));
        }
        // Exact halves after scaling (ties), and all-zero blocks.
        let mut tie = vec![0.0f32; cols];
        for (i, v) in tie.iter_mut().enumerate().take(cols / 2) {
            *v = if i % 32 == 0 { 127.0 } else { (i % 7) as f32 + 0.5 };
        }
        x.extend(tie);
        // Non-finite and extreme values, in either half of a block and in every block.
        let mut odd = noise(cols, 40);
        for (i, &bad) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX].iter().enumerate()
        {
            for b in 0..cols / 32 {
                if b % 5 == i {
                    odd[b * 32 + (b * 7 + i * 3) % 32] = bad;
                }
            }
        }
        x.extend(odd);
        // The reference: per block the largest magnitude (NaN passed over), its scale,
        // each value times the inverse rounded to nearest even and clamped (NaN to 0).
        let plain = Q8Rows::quantize_here(&x, cols, true);
        for (k, block) in x.chunks_exact(BLOCK).enumerate() {
            let amax = block.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let (dd, id) = Q8Rows::scales(amax);
            let q: Vec<i8> =
                block.iter().map(|v| ((v * id).round_ties_even() as i32).clamp(-127, 127) as i8).collect();
            assert_eq!(&plain.qs[k * BLOCK..(k + 1) * BLOCK], &q[..], "block {k}");
            assert_eq!(plain.d[k].to_bits(), dd.to_bits(), "block {k}");
            assert_eq!(plain.sum[k], q.iter().map(|&v| i32::from(v)).sum::<i32>(), "block {k}");
        }
        #[cfg(target_arch = "x86_64")]
        if kernels::Level::best() != kernels::Level::Avx512Vnni {
            eprintln!("no AVX-512 here: the plain form checked against the reference only");
            return;
        }
        #[cfg(target_arch = "x86_64")]
        for sums in [false, true] {
            let plain = Q8Rows::quantize_here(&x, cols, sums);
            // SAFETY: the CPU has AVX-512 F and BW (`Level::best`).
            let wide = unsafe { Q8Rows::quantize_avx512(&x, cols, sums) };
            assert!(plain.qs.iter().any(|&q| q != 0) && plain.d.iter().any(|d| d.is_infinite()));
            assert_eq!(plain.qs, wide.qs);
            assert_eq!(plain.sum, wide.sum);
            assert_eq!(
                plain.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                wide.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
            assert_eq!(
                plain.s.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                wide.s.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    /// A block of activations so small that its scale is subnormal quantizes to bytes
    /// whose sum is the block sum the Q8_0 kernels take back, and the product is the same
    /// bits on every level.
    #[test]
    fn tiny_activations_keep_their_block_sums() {
        let (rows, cols) = (16, 64);
        let w = noise(rows * cols, 7);
        let mut x = noise(cols, 8);
        for (i, v) in x[..32].iter_mut().enumerate() {
            *v = if i % 2 == 0 { 1e-38 } else { -3e-39 };
        }
        let a = Q8Rows::quantize(&x, cols, false);
        for b in 0..2 {
            let bytes: i32 = a.qs[b * BLOCK..(b + 1) * BLOCK].iter().map(|&q| i32::from(q)).sum();
            assert_eq!(a.sum[b], bytes, "block {b}");
        }
        let q = Weights::from_gguf(8, rows, cols, &q8_0_bytes(&w)).unwrap();
        let mut outs = Vec::new();
        for level in kernels::Level::available() {
            let mut out = vec![0.0; rows];
            Weights::matmul_many_at(level, &x, &mut [(&q, &mut out)]);
            outs.push(out);
        }
        assert!(outs.windows(2).all(|p| p[0] == p[1]), "{outs:?}");
    }
}
