//! Property tests of the CPU path against the scalar reference: random shapes,
//! dtypes, paddings, strides, mask widths, mask contents and indices.
//!
//! The CPU path is grammask's one implementation (`grammask::bitmask`), reached
//! here through this crate's re-exports and `Device::Cpu`; these are its property
//! tests. They live here, next to the GPU tests, so that the case generator and the
//! scalar reference (`common/mod.rs`) exist once for the CPU, the CUDA kernel and
//! the kernel emulation.

mod common;

use common::*;
use grammask_gpu::{
    apply_token_bitmask_inplace, apply_token_bitmask_inplace_cpu_bytes, apply_token_bitmask_inplace_cpu_with,
    Bitmask, DType, Device, Indices, Logits, Parallelism, PARALLEL_TILE,
};
use proptest::prelude::*;

/// Runs the CPU path on `case` and returns the resulting bits.
fn run_cpu(case: &Case, parallelism: Parallelism, mask_as_i32: bool) -> Vec<u32> {
    let idx = case.indices.as_deref();
    let mask_i32: Vec<i32> = case.mask.iter().map(|&w| w as i32).collect();
    macro_rules! go {
        ($to:ident, $from:ident) => {{
            let mut v = $to(&case.bits);
            let r = if mask_as_i32 {
                apply_token_bitmask_inplace_cpu_with(
                    parallelism,
                    &mut v,
                    case.layout,
                    &mask_i32,
                    case.mask_layout,
                    idx,
                )
            } else {
                apply_token_bitmask_inplace_cpu_with(
                    parallelism,
                    &mut v,
                    case.layout,
                    &case.mask,
                    case.mask_layout,
                    idx,
                )
            };
            r.expect("valid case");
            $from(&v)
        }};
    }
    match case.dtype {
        DType::F32 => go!(to_f32, from_f32),
        DType::F16 => go!(to_f16, from_f16),
        DType::BF16 => go!(to_bf16, from_bf16),
    }
}

fn check(case: &Case, parallelism: Parallelism, mask_as_i32: bool) -> Result<(), TestCaseError> {
    let want = reference(case);
    let got = run_cpu(case, parallelism, mask_as_i32);
    if let Some(d) = first_diff(&got, &want, &case.layout) {
        return Err(TestCaseError::fail(format!(
            "{d}; dtype {} layout {:?} mask {:?} indices {:?} {parallelism:?}",
            case.dtype, case.layout, case.mask_layout, case.indices
        )));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn cpu_matches_reference_small(case in case_strategy(6, 300), par in 0..3u8, i32_mask in any::<bool>()) {
        let parallelism = [Parallelism::Sequential, Parallelism::Parallel, Parallelism::Auto][par as usize];
        check(&case, parallelism, i32_mask)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Rows longer than a parallel tile, so tiles and their mask offsets are exercised.
    #[test]
    fn cpu_matches_reference_long_rows(case in case_strategy(3, 2 * PARALLEL_TILE + 100), par in 0..3u8) {
        let parallelism = [Parallelism::Sequential, Parallelism::Parallel, Parallelism::Auto][par as usize];
        check(&case, parallelism, false)?;
    }

    /// The unified entry point and the byte-level entry point agree with the reference.
    #[test]
    fn unified_and_bytes_entry_points(case in case_strategy(5, 200)) {
        let want = reference(&case);
        let idx = case.indices.as_deref();
        // Unified API, Device::Cpu.
        let got = match case.dtype {
            DType::F32 => {
                let mut v = to_f32(&case.bits);
                apply_token_bitmask_inplace(&Device::cpu(), Logits::Host(&mut v), case.layout,
                    Bitmask::Host(&case.mask), case.mask_layout, idx.map(Indices::Host)).unwrap();
                from_f32(&v)
            }
            DType::F16 => {
                let mut v = to_f16(&case.bits);
                apply_token_bitmask_inplace(&Device::cpu(), Logits::Host(&mut v), case.layout,
                    Bitmask::Host(&case.mask), case.mask_layout, idx.map(Indices::Host)).unwrap();
                from_f16(&v)
            }
            DType::BF16 => {
                let mut v = to_bf16(&case.bits);
                apply_token_bitmask_inplace(&Device::cpu(), Logits::Host(&mut v), case.layout,
                    Bitmask::Host(&case.mask), case.mask_layout, idx.map(Indices::Host)).unwrap();
                from_bf16(&v)
            }
        };
        prop_assert!(first_diff(&got, &want, &case.layout).is_none());
        // Bytes API: build native-endian bytes in an aligned buffer.
        let got = match case.dtype {
            DType::F32 => {
                let mut v = to_f32(&case.bits);
                apply_token_bitmask_inplace_cpu_bytes(Parallelism::Auto, bytemuck::cast_slice_mut(&mut v),
                    DType::F32, case.layout, &case.mask, case.mask_layout, idx).unwrap();
                from_f32(&v)
            }
            dt => {
                let mut v: Vec<u16> = case.bits.iter().map(|&b| b as u16).collect();
                apply_token_bitmask_inplace_cpu_bytes(Parallelism::Auto, bytemuck::cast_slice_mut(&mut v),
                    dt, case.layout, &case.mask, case.mask_layout, idx).unwrap();
                v.iter().map(|&b| u32::from(b)).collect()
            }
        };
        prop_assert!(first_diff(&got, &want, &case.layout).is_none());
    }
}

/// Edge shapes spelled out, so they are covered on every run regardless of the
/// random draw.
#[test]
fn edge_shapes() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for &(batch, vocab, pad) in &[
            (0, 0, 0),
            (0, 100, 3),
            (3, 0, 0),
            (3, 0, 5),
            (1, 1, 0),
            (1, 31, 0),
            (1, 32, 0),
            (1, 33, 1),
            (2, 63, 7),
            (2, 64, 0),
            (2, 65, 0),
            (4, 1000, 24),
            (2, 1024, 0),
            (2, 1025, 0),
        ] {
            for dw in -2..=2 {
                for use_idx in [false, true] {
                    for seed in 0..4 {
                        for truncate in [false, true] {
                            let case = make_case(dtype, batch, vocab, pad, truncate, dw, 1, use_idx, seed);
                            for par in [Parallelism::Sequential, Parallelism::Parallel] {
                                check(&case, par, seed % 2 == 0).unwrap();
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn nan_and_values_in_allowed_slots_are_preserved() {
    let mut logits = vec![f32::NAN, -0.0, 1.5, f32::INFINITY, f32::MIN_POSITIVE, 7.0];
    let before: Vec<u32> = logits.iter().map(|x| x.to_bits()).collect();
    // Allow tokens 0..4; 4 and 5 are disallowed.
    grammask_gpu::apply_token_bitmask_inplace_cpu(
        &mut logits,
        grammask_gpu::LogitsLayout::contiguous(1, 6),
        &[0b1111u32],
        grammask_gpu::MaskLayout::new(1, 1),
        None,
    )
    .unwrap();
    for i in 0..4 {
        assert_eq!(logits[i].to_bits(), before[i]);
    }
    assert_eq!(logits[4], f32::NEG_INFINITY);
    assert_eq!(logits[5], f32::NEG_INFINITY);
}
