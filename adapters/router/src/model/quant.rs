//! The matrix products of the Llama forward: weight matrices in GGUF's block formats
//! (Q4_1, Q8_0) or in `f32`, times a batch of activation rows.
//!
//! The product is multi-row: each weight row is read (and each quantized block unpacked)
//! once for every activation row of the forward, four rows at a time, so that a forward of
//! eight rows or of a draft tree's nodes costs little more memory traffic than one row.
//! Activations are quantized per row to 8 bits in blocks of 32 (ggml's Q8_1 for Q4_1
//! weights, Q8_0 for Q8_0 weights), and a block's dot product is an integer one, as
//! ggml's and candle's CPU kernels do it.
//!
//! Every output `(row, column)` is computed by the same instructions in the same order
//! whatever the number of rows and wherever the row sits in the batch: a row's logits are
//! bit for bit the same in any batch or tree shape. The AVX2 path (detected at run time)
//! and the portable path sum in different orders, so they may differ in the last bits.

use half::f16;
use rayon::prelude::*;

/// Values per quantized block.
pub(crate) const BLOCK: usize = 32;

/// A weight matrix `[rows, cols]` (`rows` outputs, each a dot product over `cols`).
#[derive(Debug, Clone)]
pub(crate) enum Weights {
    /// GGUF Q4_1: per block of 32, `w = d·q + m` with 4-bit `q`.
    Q4_1 {
        rows: usize,
        cols: usize,
        /// Per block: scale and minimum.
        d: Vec<f32>,
        m: Vec<f32>,
        /// Per block 16 bytes: value `j` in the low nibble of byte `j`, value `j + 16` in
        /// its high nibble.
        qs: Vec<u8>,
    },
    /// GGUF Q8_0: per block of 32, `w = d·q` with 8-bit `q`.
    Q8_0 { rows: usize, cols: usize, d: Vec<f32>, qs: Vec<i8> },
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
                let blocks = need(20)?;
                let (mut d, mut m, mut qs) =
                    (Vec::with_capacity(blocks), Vec::with_capacity(blocks), Vec::with_capacity(blocks * 16));
                for b in bytes.chunks_exact(20) {
                    d.push(h(&b[0..2]));
                    m.push(h(&b[2..4]));
                    qs.extend_from_slice(&b[4..20]);
                }
                Ok(Weights::Q4_1 { rows, cols, d, m, qs })
            }
            8 => {
                let blocks = need(34)?;
                let (mut d, mut qs) = (Vec::with_capacity(blocks), Vec::with_capacity(blocks * 32));
                for b in bytes.chunks_exact(34) {
                    d.push(h(&b[0..2]));
                    qs.extend(b[2..34].iter().map(|&x| x as i8));
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
        match self {
            Weights::F32 { w, .. } => out.copy_from_slice(&w[r * c..(r + 1) * c]),
            Weights::Q4_1 { d, m, qs, .. } => {
                for b in 0..c / BLOCK {
                    let k = r * c / BLOCK + b;
                    let q = &qs[k * 16..k * 16 + 16];
                    for j in 0..16 {
                        out[b * BLOCK + j] = f32::from(q[j] & 0xF) * d[k] + m[k];
                        out[b * BLOCK + j + 16] = f32::from(q[j] >> 4) * d[k] + m[k];
                    }
                }
            }
            Weights::Q8_0 { d, qs, .. } => {
                for b in 0..c / BLOCK {
                    let k = r * c / BLOCK + b;
                    for j in 0..BLOCK {
                        out[b * BLOCK + j] = f32::from(qs[k * BLOCK + j]) * d[k];
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
        // Output columns in chunks (a few per thread: each chunk is a task of the pool,
        // and a task costs microseconds), each chunk's results gathered then scattered.
        let total: usize = products.iter().map(|p| p.0.rows()).sum();
        let chunk = total.div_ceil(rayon::current_num_threads().max(1) * 4).max(16);
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
                let acts = match w {
                    Weights::Q4_1 { .. } => q8_1.as_ref(),
                    Weights::Q8_0 { .. } => q8_0.as_ref(),
                    Weights::F32 { .. } => None,
                };
                // Row-major within the chunk (`[r][j − j0]`), so that the results go out
                // as one copy per activation row.
                let width = j1 - j0;
                let mut part = vec![0.0f32; width * n];
                let mut col = vec![0.0f32; n];
                for j in j0..j1 {
                    w.dot_rows(level, j, x, acts, &mut col);
                    for (r, &v) in col.iter().enumerate() {
                        part[r * width + j - j0] = v;
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

    /// Weight row `j` against every activation row: `dst[r]`.
    fn dot_rows(&self, level: kernels::Level, j: usize, x: &[f32], acts: Option<&Q8Rows>, dst: &mut [f32]) {
        match (self, acts) {
            (Weights::Q4_1 { cols, d, m, qs, .. }, Some(a)) => {
                let nb = cols / BLOCK;
                let (d, m, qs) =
                    (&d[j * nb..(j + 1) * nb], &m[j * nb..(j + 1) * nb], &qs[j * nb * 16..(j + 1) * nb * 16]);
                kernels::q4_1_rows(level, d, m, qs, a, dst);
            }
            (Weights::Q8_0 { cols, d, qs, .. }, Some(a)) => {
                let nb = cols / BLOCK;
                kernels::q8_0_rows(level, &d[j * nb..(j + 1) * nb], &qs[j * cols..(j + 1) * cols], a, dst);
            }
            (Weights::F32 { cols, w, .. }, _) => {
                kernels::f32_rows(level, &w[j * cols..(j + 1) * cols], x, dst);
            }
            _ => {}
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
    pub qs: Vec<i8>,
    /// `d` and `s` block-major (`[nb][padded rows]`, rows padded with zeros to a whole
    /// tile): the scales of a tile of rows for one block are contiguous.
    pub d_t: Vec<f32>,
    pub s_t: Vec<f32>,
    /// Rows in `d_t` and `s_t` per block.
    pub padded: usize,
}

impl Q8Rows {
    /// Quantizes each row of `x` (`cols` values) as ggml's `quantize_row_q8_1` (with the
    /// sums) or `quantize_row_q8_0` does.
    pub fn quantize(x: &[f32], cols: usize, sums: bool) -> Self {
        let nb_total = x.len() / BLOCK;
        let (mut d, mut s, mut qs) = (Vec::with_capacity(nb_total), Vec::new(), Vec::with_capacity(x.len()));
        for block in x.chunks_exact(BLOCK) {
            let amax = block.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let dd = amax / 127.0;
            let id = if dd != 0.0 { 1.0 / dd } else { 0.0 };
            let mut sum = 0i32;
            for &v in block {
                // Round to nearest (ties to even: ggml's roundf takes ties away from zero,
                // a difference only at exact halves) without a libm call: adding 1.5·2²³
                // leaves no fraction bits.
                const MAGIC: f32 = 12_582_912.0;
                let q = ((v * id + MAGIC) - MAGIC) as i32;
                sum += q;
                qs.push(q as i8);
            }
            d.push(dd);
            if sums {
                s.push(dd * sum as f32);
            }
        }
        let nb = cols / BLOCK;
        let rows = d.len() / nb.max(1);
        let padded = rows.div_ceil(kernels::TILE) * kernels::TILE;
        let (mut d_t, mut s_t) = (vec![0.0; nb * padded], vec![0.0; if sums { nb * padded } else { 0 }]);
        for r in 0..rows {
            for b in 0..nb {
                d_t[b * padded + r] = d[r * nb + b];
                if sums {
                    s_t[b * padded + r] = s[r * nb + b];
                }
            }
        }
        Self { nb, d, s, qs, d_t, s_t, padded }
    }

    pub(crate) fn rows(&self) -> usize {
        self.d.len() / self.nb.max(1)
    }
}

// The kernels walk blocks by index across several parallel arrays (scales, minimums,
// quantized values): index loops are the clearer form there.
#[allow(clippy::needless_range_loop)]
pub(crate) mod kernels {
    use super::{Q8Rows, BLOCK};

    /// Rows handled together: each weight block is unpacked once for them.
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

    pub fn q4_1_rows(level: Level, d: &[f32], m: &[f32], qs: &[u8], a: &Q8Rows, dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        match level.min(Level::best()) {
            // SAFETY: the CPU has what the level needs (`Level::best`).
            Level::Avx512Vnni => return unsafe { avx512::q4_1_rows(d, m, qs, a, dst) },
            // SAFETY: as above.
            Level::Avx2 => return unsafe { avx2::q4_1_rows(d, m, qs, a, dst) },
            Level::Portable => {}
        }
        let nb = a.nb;
        for (r, out) in dst.iter_mut().enumerate().take(a.rows()) {
            let mut acc = 0.0f32;
            for b in 0..nb {
                let (y, k) = (&a.qs[(r * nb + b) * BLOCK..(r * nb + b + 1) * BLOCK], r * nb + b);
                let q = &qs[b * 16..b * 16 + 16];
                let mut sumi = 0i32;
                for j in 0..16 {
                    sumi +=
                        i32::from(q[j] & 0xF) * i32::from(y[j]) + i32::from(q[j] >> 4) * i32::from(y[j + 16]);
                }
                acc += d[b] * a.d[k] * sumi as f32 + m[b] * a.s[k];
            }
            *out = acc;
        }
    }

    pub fn q8_0_rows(level: Level, d: &[f32], qs: &[i8], a: &Q8Rows, dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        match level.min(Level::best()) {
            // SAFETY: the CPU has what the level needs (`Level::best`).
            Level::Avx512Vnni => return unsafe { avx512::q8_0_rows(d, qs, a, dst) },
            // SAFETY: as above.
            Level::Avx2 => return unsafe { avx2::q8_0_rows(d, qs, a, dst) },
            Level::Portable => {}
        }
        let nb = a.nb;
        for (r, out) in dst.iter_mut().enumerate().take(a.rows()) {
            let mut acc = 0.0f32;
            for b in 0..nb {
                let k = r * nb + b;
                let y = &a.qs[k * BLOCK..(k + 1) * BLOCK];
                let w = &qs[b * BLOCK..(b + 1) * BLOCK];
                let sumi: i32 = w.iter().zip(y).map(|(&p, &q)| i32::from(p) * i32::from(q)).sum();
                acc += d[b] * a.d[k] * sumi as f32;
            }
            *out = acc;
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

    /// Two blocks per instruction: 64 weight bytes against 64 activation bytes with VNNI's
    /// `vpdpbusd`, each row's scales for the two blocks in the two halves of a vector.
    #[cfg(target_arch = "x86_64")]
    mod avx512 {
        use super::{Q8Rows, BLOCK, TILE};
        use std::arch::x86_64::*;

        /// `lo` and `hi` as the two halves of one vector (AVX-512 F only).
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        unsafe fn pair(lo: __m256, hi: __m256) -> __m512 {
            _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castps_pd(_mm512_castps256_ps512(lo)),
                _mm256_castps_pd(hi),
                1,
            ))
        }

        /// Lane `i` of `lo` in the low half, lane `i` of `hi` in the high half.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        unsafe fn pair_index(i: i32) -> __m512i {
            _mm512_setr_epi32(i, i, i, i, i, i, i, i, 8 + i, 8 + i, 8 + i, 8 + i, 8 + i, 8 + i, 8 + i, 8 + i)
        }

        /// Q4_1 × Q8_1 (see `avx2::q4_1_rows`), two blocks per step (an odd last block
        /// the 256-bit way), `T` rows at a time (a constant, so that the row loop unrolls).
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        pub unsafe fn q4_1_rows(d: &[f32], m: &[f32], qs: &[u8], a: &Q8Rows, dst: &mut [f32]) {
            let rows = a.rows().min(dst.len());
            let mut r0 = 0;
            while r0 < rows {
                let t = TILE.min(rows - r0);
                let out = &mut dst[r0..r0 + t];
                match t {
                    8 => q4_1_tile::<8>(d, m, qs, a, r0, out),
                    7 => q4_1_tile::<7>(d, m, qs, a, r0, out),
                    6 => q4_1_tile::<6>(d, m, qs, a, r0, out),
                    5 => q4_1_tile::<5>(d, m, qs, a, r0, out),
                    4 => q4_1_tile::<4>(d, m, qs, a, r0, out),
                    3 => q4_1_tile::<3>(d, m, qs, a, r0, out),
                    2 => q4_1_tile::<2>(d, m, qs, a, r0, out),
                    _ => q4_1_tile::<1>(d, m, qs, a, r0, out),
                }
                r0 += t;
            }
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        unsafe fn q4_1_tile<const T: usize>(
            d: &[f32],
            m: &[f32],
            qs: &[u8],
            a: &Q8Rows,
            r0: usize,
            dst: &mut [f32],
        ) {
            let nb = a.nb;
            let low = _mm256_set1_epi8(0x0F);
            let idx: [__m512i; T] = std::array::from_fn(|i| pair_index(i as i32));
            let mut acc = [_mm512_setzero_ps(); T];
            let mut mins = _mm256_setzero_ps();
            let y0 = a.qs.as_ptr().add(r0 * nb * BLOCK);
            let row = nb * BLOCK;
            let mut b = 0;
            while b + 2 <= nb {
                // [q_b | q_b+1] → [lo_b, hi_b, lo_b+1, hi_b+1] (16 bytes each), the
                // activations' order for two consecutive blocks.
                let q = _mm256_loadu_si256(qs.as_ptr().add(b * 16) as *const __m256i);
                let lo = _mm256_and_si256(q, low);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
                let z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                let w = _mm512_shuffle_i64x2(z, z, 0b11_01_10_00);
                let (at0, at1) = (b * a.padded + r0, (b + 1) * a.padded + r0);
                let s0 = _mm256_mul_ps(_mm256_set1_ps(d[b]), _mm256_loadu_ps(a.d_t.as_ptr().add(at0)));
                let s1 = _mm256_mul_ps(_mm256_set1_ps(d[b + 1]), _mm256_loadu_ps(a.d_t.as_ptr().add(at1)));
                let scales = pair(s0, s1);
                mins = _mm256_fmadd_ps(_mm256_set1_ps(m[b]), _mm256_loadu_ps(a.s_t.as_ptr().add(at0)), mins);
                mins =
                    _mm256_fmadd_ps(_mm256_set1_ps(m[b + 1]), _mm256_loadu_ps(a.s_t.as_ptr().add(at1)), mins);
                for i in 0..T {
                    let y = _mm512_loadu_si512(y0.add(i * row + b * BLOCK) as *const _);
                    let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, y);
                    let scale = _mm512_permutexvar_ps(idx[i], scales);
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[i]);
                }
                b += 2;
            }
            let mut tail = [0.0f32; T];
            if b < nb {
                // The odd last block: its 32 products in the low half of a vector.
                let q = _mm_loadu_si128(qs.as_ptr().add(b * 16) as *const __m128i);
                let w256 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
                let w = _mm512_castsi256_si512(w256);
                let at = b * a.padded + r0;
                mins = _mm256_fmadd_ps(_mm256_set1_ps(m[b]), _mm256_loadu_ps(a.s_t.as_ptr().add(at)), mins);
                for (i, t) in tail.iter_mut().enumerate() {
                    let y = _mm512_castsi256_si512(_mm256_loadu_si256(
                        y0.add(i * row + b * BLOCK) as *const __m256i
                    ));
                    let p = _mm512_maskz_dpbusd_epi32(0x00FF, _mm512_setzero_si512(), w, y);
                    *t = _mm512_reduce_add_epi32(p) as f32 * (d[b] * a.d_t[at + i]);
                }
            }
            let mut m8 = [0.0f32; TILE];
            _mm256_storeu_ps(m8.as_mut_ptr(), mins);
            for i in 0..T {
                dst[i] = _mm512_reduce_add_ps(acc[i]) + tail[i] + m8[i];
            }
        }

        /// Q8_0 × Q8_0 (see `avx2::q8_0_rows`), two blocks per step.
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
        pub unsafe fn q8_0_rows(d: &[f32], qs: &[i8], a: &Q8Rows, dst: &mut [f32]) {
            let nb = a.nb;
            let rows = a.rows().min(dst.len());
            let idx: [__m512i; TILE] = std::array::from_fn(|i| pair_index(i as i32));
            let lane: [__m256i; TILE] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
            let ones = _mm256_set1_epi16(1);
            let mut r0 = 0;
            while r0 < rows {
                let t = TILE.min(rows - r0);
                let mut acc = [_mm512_setzero_ps(); TILE];
                let mut acc_tail = [_mm256_setzero_ps(); TILE];
                let mut b = 0;
                while b + 2 <= nb {
                    let w = _mm512_loadu_si512(qs.as_ptr().add(b * BLOCK) as *const _);
                    // vpdpbusd takes unsigned × signed: |w| × (y with w's sign).
                    let wa = _mm512_abs_epi8(w);
                    let neg = _mm512_movepi8_mask(w);
                    let (at0, at1) = (b * a.padded + r0, (b + 1) * a.padded + r0);
                    let s0 = _mm256_mul_ps(_mm256_set1_ps(d[b]), _mm256_loadu_ps(a.d_t.as_ptr().add(at0)));
                    let s1 =
                        _mm256_mul_ps(_mm256_set1_ps(d[b + 1]), _mm256_loadu_ps(a.d_t.as_ptr().add(at1)));
                    let scales = pair(s0, s1);
                    for (i, acc) in acc.iter_mut().enumerate().take(t) {
                        let k = (r0 + i) * nb + b;
                        let y = _mm512_loadu_si512(a.qs.as_ptr().add(k * BLOCK) as *const _);
                        let ys = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
                        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa, ys);
                        let scale = _mm512_permutexvar_ps(idx[i], scales);
                        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, *acc);
                    }
                    b += 2;
                }
                if b < nb {
                    let w = _mm256_loadu_si256(qs.as_ptr().add(b * BLOCK) as *const __m256i);
                    let wa = _mm256_sign_epi8(w, w);
                    let at = b * a.padded + r0;
                    let scales = _mm256_mul_ps(_mm256_set1_ps(d[b]), _mm256_loadu_ps(a.d_t.as_ptr().add(at)));
                    for (i, acc) in acc_tail.iter_mut().enumerate().take(t) {
                        let k = (r0 + i) * nb + b;
                        let y = _mm256_loadu_si256(a.qs.as_ptr().add(k * BLOCK) as *const __m256i);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(y, w)), ones);
                        let scale = _mm256_permutevar8x32_ps(scales, lane[i]);
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, *acc);
                    }
                }
                for i in 0..t {
                    dst[r0 + i] = _mm512_reduce_add_ps(acc[i]) + super::avx2::hsum(acc_tail[i]);
                }
                r0 += t;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    mod avx2 {
        use super::{Q8Rows, BLOCK, TILE};
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

        /// Q4_1 × Q8_1, a tile of `TILE` activation rows per unpacked weight block: the
        /// tile's scales for a block are one vector product (`d_w · d_y[tile]`), its
        /// minimum terms one fused multiply-add, each row's scale a lane of it.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn q4_1_rows(d: &[f32], m: &[f32], qs: &[u8], a: &Q8Rows, dst: &mut [f32]) {
            let nb = a.nb;
            let rows = a.rows().min(dst.len());
            let low = _mm256_set1_epi8(0x0F);
            let ones = _mm256_set1_epi16(1);
            let lane: [__m256i; TILE] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
            let mut r0 = 0;
            while r0 < rows {
                let t = TILE.min(rows - r0);
                let mut acc = [_mm256_setzero_ps(); TILE];
                let mut mins = _mm256_setzero_ps();
                for b in 0..nb {
                    // 32 weights as bytes: the low nibbles (values 0..16), then the high.
                    let q = _mm_loadu_si128(qs.as_ptr().add(b * 16) as *const __m128i);
                    let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
                    let w = _mm256_and_si256(both, low);
                    let at = b * a.padded + r0;
                    let scales = _mm256_mul_ps(_mm256_set1_ps(d[b]), _mm256_loadu_ps(a.d_t.as_ptr().add(at)));
                    mins =
                        _mm256_fmadd_ps(_mm256_set1_ps(m[b]), _mm256_loadu_ps(a.s_t.as_ptr().add(at)), mins);
                    for (i, acc) in acc.iter_mut().enumerate().take(t) {
                        let k = (r0 + i) * nb + b;
                        let y = _mm256_loadu_si256(a.qs.as_ptr().add(k * BLOCK) as *const __m256i);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), ones);
                        let scale = _mm256_permutevar8x32_ps(scales, lane[i]);
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, *acc);
                    }
                }
                let mut m8 = [0.0f32; TILE];
                _mm256_storeu_ps(m8.as_mut_ptr(), mins);
                for i in 0..t {
                    dst[r0 + i] = hsum(acc[i]) + m8[i];
                }
                r0 += t;
            }
        }

        /// Q8_0 × Q8_0, a tile of `TILE` activation rows per weight block.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn q8_0_rows(d: &[f32], qs: &[i8], a: &Q8Rows, dst: &mut [f32]) {
            let nb = a.nb;
            let rows = a.rows().min(dst.len());
            let ones = _mm256_set1_epi16(1);
            let lane: [__m256i; TILE] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
            let mut r0 = 0;
            while r0 < rows {
                let t = TILE.min(rows - r0);
                let mut acc = [_mm256_setzero_ps(); TILE];
                for b in 0..nb {
                    let w = _mm256_loadu_si256(qs.as_ptr().add(b * BLOCK) as *const __m256i);
                    // maddubs takes unsigned × signed: |w| × (y with w's sign).
                    let wa = _mm256_sign_epi8(w, w);
                    let at = b * a.padded + r0;
                    let scales = _mm256_mul_ps(_mm256_set1_ps(d[b]), _mm256_loadu_ps(a.d_t.as_ptr().add(at)));
                    for (i, acc) in acc.iter_mut().enumerate().take(t) {
                        let k = (r0 + i) * nb + b;
                        let y = _mm256_loadu_si256(a.qs.as_ptr().add(k * BLOCK) as *const __m256i);
                        let ys = _mm256_sign_epi8(y, w);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, ys), ones);
                        let scale = _mm256_permutevar8x32_ps(scales, lane[i]);
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, *acc);
                    }
                }
                for i in 0..t {
                    dst[r0 + i] = hsum(acc[i]);
                }
                r0 += t;
            }
        }

        /// f32 × f32, `TILE` activation rows per weight chunk.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn f32_rows(w: &[f32], x: &[f32], dst: &mut [f32]) {
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
    /// quantization of the activations), and a row's result is bit for bit the same in
    /// any batch, at any position.
    #[test]
    fn products_match_the_dequantized_weights_and_do_not_depend_on_the_batch() {
        // 96 columns: three blocks (an odd last one); 11 rows: a full tile of 8 and one of 3.
        let (rows, cols, n) = (70, 96, 11);
        let w = noise(rows * cols, 1);
        let x = noise(n * cols, 2);
        for level in kernels::Level::available() {
            for (kind, bytes) in [
                (3u32, q4_1_bytes(&w)),
                (8, q8_0_bytes(&w)),
                (0, w.iter().flat_map(|v| v.to_le_bytes()).collect()),
            ] {
                let q = Weights::from_gguf(kind, rows, cols, &bytes).unwrap();
                let product = |x: &[f32]| {
                    let mut out = vec![0.0; x.len() / cols * rows];
                    Weights::matmul_many_at(level, x, &mut [(&q, &mut out)]);
                    out
                };
                let got = product(&x);
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
}
