//! Shared by the CPU, GPU and kernel-emulation tests: random cases and the scalar
//! reference.
#![allow(dead_code)]

use grammask_gpu::{DType, LogitsLayout, MaskLayout};
use proptest::prelude::*;

/// A tiny deterministic RNG (xorshift64*), so a case is fully described by its
/// shape parameters and a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// One randomly generated call, with logits stored as raw bits (u32 for f32, u16
/// for f16/bf16 widened to u32 here and narrowed when materialised).
#[derive(Debug, Clone)]
pub struct Case {
    pub dtype: DType,
    pub layout: LogitsLayout,
    /// Elements in the logits buffer (between the layout's min and max).
    pub len: usize,
    pub mask_layout: MaskLayout,
    pub mask: Vec<u32>,
    pub indices: Option<Vec<i32>>,
    /// Initial logits as bit patterns (one per element, low bits used for 16-bit).
    pub bits: Vec<u32>,
}

/// Shape parameters: (dtype, batch, vocab, pad, truncate last row, mask word delta,
/// extra mask rows, use indices, seed).
pub fn case_strategy(max_batch: usize, max_vocab: usize) -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)],
        0..=max_batch,
        prop_oneof![0..=max_vocab, Just(max_vocab), (1..=max_vocab / 32 + 1).prop_map(|w| w * 32)],
        prop_oneof![Just(0usize), 0..9usize],
        any::<bool>(),
        -2i64..=2,
        0..3usize,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(dtype, batch, vocab, pad, truncate, dw, extra_rows, use_idx, seed)| {
            make_case(dtype, batch, vocab, pad, truncate, dw, extra_rows, use_idx, seed)
        })
}

#[allow(clippy::too_many_arguments)]
pub fn make_case(
    dtype: DType,
    batch: usize,
    vocab: usize,
    pad: usize,
    truncate: bool,
    word_delta: i64,
    extra_rows: usize,
    use_indices: bool,
    seed: u64,
) -> Case {
    let mut rng = Rng::new(seed);
    let layout = LogitsLayout::strided(batch, vocab, vocab + pad);
    let (min, max) = layout.len_bounds().expect("valid layout");
    let len = if truncate { min } else { max };
    let words = (vocab.div_ceil(32) as i64 + word_delta).max(0) as usize;
    // With indices the mask may have more or fewer rows than the logits.
    let mask_rows = if use_indices { (batch + extra_rows).saturating_sub(rng.below(2)) } else { batch };
    let mask_layout = MaskLayout::new(mask_rows, words);
    let mask = (0..mask_rows * words)
        .map(|_| match rng.below(6) {
            0 => 0,
            1 | 2 => u32::MAX,
            3 => 1u32 << rng.below(32),
            _ => rng.next() as u32,
        })
        .collect();
    let indices = use_indices.then(|| {
        let limit = batch.min(mask_rows);
        let n = if limit == 0 { 0 } else { rng.below(batch + 2) };
        (0..n).map(|_| rng.below(limit) as i32).collect()
    });
    let bits = (0..len)
        .map(|_| {
            let b = rng.next() as u32;
            if dtype == DType::F32 {
                b
            } else {
                b & 0xffff
            }
        })
        .collect();
    Case { dtype, layout, len, mask_layout, mask, indices, bits }
}

/// The specification, one token at a time.
pub fn reference(case: &Case) -> Vec<u32> {
    let mut out = case.bits.clone();
    let LogitsLayout { batch, vocab, row_stride } = case.layout;
    let rows: Vec<usize> = match &case.indices {
        None => (0..batch).collect(),
        Some(idx) => idx.iter().map(|&i| i as usize).collect(),
    };
    let words = case.mask_layout.words;
    for r in rows {
        for t in 0..vocab {
            let w = t / 32;
            let allowed = w < words && (case.mask[r * words + w] >> (t % 32)) & 1 == 1;
            if !allowed {
                out[r * row_stride + t] = case.dtype.neg_inf_bits();
            }
        }
    }
    out
}

pub fn to_f32(bits: &[u32]) -> Vec<f32> {
    bits.iter().map(|&b| f32::from_bits(b)).collect()
}

pub fn to_f16(bits: &[u32]) -> Vec<half::f16> {
    bits.iter().map(|&b| half::f16::from_bits(b as u16)).collect()
}

pub fn to_bf16(bits: &[u32]) -> Vec<half::bf16> {
    bits.iter().map(|&b| half::bf16::from_bits(b as u16)).collect()
}

pub fn from_f32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub fn from_f16(v: &[half::f16]) -> Vec<u32> {
    v.iter().map(|x| u32::from(x.to_bits())).collect()
}

pub fn from_bf16(v: &[half::bf16]) -> Vec<u32> {
    v.iter().map(|x| u32::from(x.to_bits())).collect()
}

/// First differing element, for readable failures.
pub fn first_diff(a: &[u32], b: &[u32], layout: &LogitsLayout) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("lengths {} vs {}", a.len(), b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y).map(|i| {
        let (r, c) = match i.checked_div(layout.row_stride) {
            Some(r) => (r, i % layout.row_stride),
            None => (0, i),
        };
        format!("element {i} (row {r}, col {c}): got {:#x}, want {:#x}", a[i], b[i])
    })
}
