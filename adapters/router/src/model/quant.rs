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
            if cols % BLOCK != 0 {
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
        let (rows, cols) = (self.rows(), self.cols());
        let n = x.len() / cols.max(1);
        debug_assert_eq!(out.len(), n * rows);
        let acts = match self {
            Weights::Q4_1 { .. } => Some(Q8Rows::quantize(x, cols, true)),
            Weights::Q8_0 { .. } => Some(Q8Rows::quantize(x, cols, false)),
            Weights::F32 { .. } => None,
        };
        // Columns of the output in chunks, each chunk's results gathered then scattered.
        const CHUNK: usize = 64;
        let parts: Vec<(usize, Vec<f32>)> = (0..rows.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                let (j0, j1) = (c * CHUNK, ((c + 1) * CHUNK).min(rows));
                let mut part = vec![0.0f32; (j1 - j0) * n];
                for j in j0..j1 {
                    let dst = &mut part[(j - j0) * n..(j - j0 + 1) * n];
                    self.dot_rows(j, x, acts.as_ref(), dst);
                }
                (j0, part)
            })
            .collect();
        for (j0, part) in parts {
            let width = part.len() / n.max(1);
            for dj in 0..width {
                for r in 0..n {
                    out[r * rows + j0 + dj] = part[dj * n + r];
                }
            }
        }
    }

    /// Weight row `j` against every activation row: `dst[r]`.
    fn dot_rows(&self, j: usize, x: &[f32], acts: Option<&Q8Rows>, dst: &mut [f32]) {
        match (self, acts) {
            (Weights::Q4_1 { cols, d, m, qs, .. }, Some(a)) => {
                let nb = cols / BLOCK;
                let (d, m, qs) = (&d[j * nb..(j + 1) * nb], &m[j * nb..(j + 1) * nb], &qs[j * nb * 16..(j + 1) * nb * 16]);
                kernels::q4_1_rows(d, m, qs, a, dst);
            }
            (Weights::Q8_0 { cols, d, qs, .. }, Some(a)) => {
                let nb = cols / BLOCK;
                kernels::q8_0_rows(&d[j * nb..(j + 1) * nb], &qs[j * cols..(j + 1) * cols], a, dst);
            }
            (Weights::F32 { cols, w, .. }, _) => {
                kernels::f32_rows(&w[j * cols..(j + 1) * cols], x, dst);
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
                let q = (v * id).round() as i32;
                sum += q;
                qs.push(q as i8);
            }
            d.push(dd);
            if sums {
                s.push(dd * sum as f32);
            }
        }
        Self { nb: cols / BLOCK, d, s, qs }
    }

    fn rows(&self) -> usize {
        self.d.len() / self.nb.max(1)
    }
}

mod kernels {
    use super::{Q8Rows, BLOCK};

    /// Rows handled together: each weight block is unpacked once for them.
    const TILE: usize = 4;

    pub fn q4_1_rows(d: &[f32], m: &[f32], qs: &[u8], a: &Q8Rows, dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            unsafe { avx2::q4_1_rows(d, m, qs, a, dst) };
            return;
        }
        let nb = a.nb;
        for (r, out) in dst.iter_mut().enumerate().take(a.rows()) {
            let mut acc = 0.0f32;
            for b in 0..nb {
                let (y, k) = (&a.qs[(r * nb + b) * BLOCK..(r * nb + b + 1) * BLOCK], r * nb + b);
                let q = &qs[b * 16..b * 16 + 16];
                let mut sumi = 0i32;
                for j in 0..16 {
                    sumi += i32::from(q[j] & 0xF) * i32::from(y[j]) + i32::from(q[j] >> 4) * i32::from(y[j + 16]);
                }
                acc += d[b] * a.d[k] * sumi as f32 + m[b] * a.s[k];
            }
            *out = acc;
        }
    }

    pub fn q8_0_rows(d: &[f32], qs: &[i8], a: &Q8Rows, dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            unsafe { avx2::q8_0_rows(d, qs, a, dst) };
            return;
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

    pub fn f32_rows(w: &[f32], x: &[f32], dst: &mut [f32]) {
        let cols = w.len();
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            unsafe { avx2::f32_rows(w, x, dst) };
            return;
        }
        for (r, out) in dst.iter_mut().enumerate() {
            let xr = &x[r * cols..(r + 1) * cols];
            *out = w.iter().zip(xr).map(|(a, b)| a * b).sum();
        }
    }

    #[cfg(target_arch = "x86_64")]
    mod avx2 {
        use super::{Q8Rows, BLOCK, TILE};
        use std::arch::x86_64::*;

        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn hsum(v: __m256) -> f32 {
            let lo = _mm256_castps256_ps128(v);
            let hi = _mm256_extractf128_ps(v, 1);
            let s = _mm_add_ps(lo, hi);
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
            _mm_cvtss_f32(s)
        }

        /// Q4_1 × Q8_1, `TILE` activation rows per unpacked weight block.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn q4_1_rows(d: &[f32], m: &[f32], qs: &[u8], a: &Q8Rows, dst: &mut [f32]) {
            let nb = a.nb;
            let rows = a.rows().min(dst.len());
            let low = _mm256_set1_epi8(0x0F);
            let ones = _mm256_set1_epi16(1);
            let mut r0 = 0;
            while r0 < rows {
                let t = TILE.min(rows - r0);
                let mut acc = [_mm256_setzero_ps(); TILE];
                let mut mins = [0.0f32; TILE];
                for b in 0..nb {
                    // 32 weights as bytes: the low nibbles (values 0..16), then the high.
                    let q = _mm_loadu_si128(qs.as_ptr().add(b * 16) as *const __m128i);
                    let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
                    let w = _mm256_and_si256(both, low);
                    for (i, acc) in acc.iter_mut().enumerate().take(t) {
                        let k = (r0 + i) * nb + b;
                        let y = _mm256_loadu_si256(a.qs.as_ptr().add(k * BLOCK) as *const __m256i);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), ones);
                        let scale = _mm256_set1_ps(d[b] * *a.d.get_unchecked(k));
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, *acc);
                        mins[i] += m[b] * *a.s.get_unchecked(k);
                    }
                }
                for i in 0..t {
                    dst[r0 + i] = hsum(acc[i]) + mins[i];
                }
                r0 += t;
            }
        }

        /// Q8_0 × Q8_0, `TILE` activation rows per weight block.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn q8_0_rows(d: &[f32], qs: &[i8], a: &Q8Rows, dst: &mut [f32]) {
            let nb = a.nb;
            let rows = a.rows().min(dst.len());
            let mut r0 = 0;
            while r0 < rows {
                let t = TILE.min(rows - r0);
                let mut acc = [_mm256_setzero_ps(); TILE];
                for b in 0..nb {
                    let w = _mm256_loadu_si256(qs.as_ptr().add(b * BLOCK) as *const __m256i);
                    // maddubs takes unsigned × signed: |w| × (y with w's sign).
                    let wa = _mm256_sign_epi8(w, w);
                    for (i, acc) in acc.iter_mut().enumerate().take(t) {
                        let k = (r0 + i) * nb + b;
                        let y = _mm256_loadu_si256(a.qs.as_ptr().add(k * BLOCK) as *const __m256i);
                        let ys = _mm256_sign_epi8(y, w);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, ys), _mm256_set1_epi16(1));
                        let scale = _mm256_set1_ps(d[b] * *a.d.get_unchecked(k));
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
        let (rows, cols) = (70, 96);
        let w = noise(rows * cols, 1);
        for (kind, bytes) in [(3u32, q4_1_bytes(&w)), (8, q8_0_bytes(&w)), (0, w.iter().flat_map(|v| v.to_le_bytes()).collect())] {
            let q = Weights::from_gguf(kind, rows, cols, &bytes).unwrap();
            let f = q.dequantized();
            let x = noise(7 * cols, 2);
            let mut got = vec![0.0; 7 * rows];
            q.matmul(&x, &mut got);
            let mut want = vec![0.0; 7 * rows];
            let Weights::F32 { w: fw, .. } = &f else { unreachable!() };
            for r in 0..7 {
                for j in 0..rows {
                    want[r * rows + j] = (0..cols).map(|c| fw[j * cols + c] * x[r * cols + c]).sum();
                }
            }
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 0.05 + 0.02 * b.abs(), "type {kind}: {a} vs {b}");
            }
            // Row 5 alone, and first of a batch of two, gives the same bits.
            for (x1, at) in [(x[5 * cols..6 * cols].to_vec(), 0), ([&x[3 * cols..4 * cols], &x[5 * cols..6 * cols]].concat(), 1)] {
                let n = x1.len() / cols;
                let mut one = vec![0.0; n * rows];
                q.matmul(&x1, &mut one);
                assert_eq!(one[at * rows..(at + 1) * rows], got[5 * rows..6 * rows], "type {kind}");
            }
        }
    }
}
