//! Bad input gives typed errors, leaves the logits untouched, and never panics.

use grammask_gpu::{
    apply_token_bitmask_inplace, apply_token_bitmask_inplace_cpu, apply_token_bitmask_inplace_cpu_bytes,
    ApplyError, Bitmask, BitmaskError, DType, Device, Indices, Logits, LogitsLayout, MaskLayout, Parallelism,
};
use proptest::prelude::*;

fn cpu(
    logits: &mut [f32],
    layout: LogitsLayout,
    mask: &[u32],
    ml: MaskLayout,
    idx: Option<&[i32]>,
) -> Result<(), ApplyError> {
    apply_token_bitmask_inplace_cpu(logits, layout, mask, ml, idx)
}

#[test]
fn bad_stride() {
    let mut l = vec![0.0f32; 20];
    let e = cpu(&mut l, LogitsLayout::strided(2, 10, 9), &[0; 2], MaskLayout::new(2, 1), None).unwrap_err();
    assert_eq!(e, ApplyError::BadStride { vocab: 10, row_stride: 9 });
    // Also for an empty batch.
    let e = cpu(&mut [], LogitsLayout::strided(0, 10, 9), &[], MaskLayout::new(0, 1), None).unwrap_err();
    assert!(matches!(e, ApplyError::BadStride { .. }));
}

#[test]
fn logits_length_mismatch() {
    let ml = MaskLayout::new(2, 1);
    // Too short: needs at least 12 + 10 = 22 for [2, 10] with stride 12.
    let mut l = vec![1.0f32; 21];
    let e = cpu(&mut l, LogitsLayout::strided(2, 10, 12), &[0; 2], ml, None).unwrap_err();
    assert!(matches!(e, ApplyError::LogitsLen { len: 21, min: 22, max: 24, .. }), "{e:?}");
    assert!(l.iter().all(|&x| x == 1.0));
    // Too long.
    let mut l = vec![1.0f32; 25];
    let e = cpu(&mut l, LogitsLayout::strided(2, 10, 12), &[0; 2], ml, None).unwrap_err();
    assert!(matches!(e, ApplyError::LogitsLen { len: 25, .. }));
    // Both ends are fine.
    cpu(&mut [0.0; 22], LogitsLayout::strided(2, 10, 12), &[0; 2], ml, None).unwrap();
    cpu(&mut [0.0; 24], LogitsLayout::strided(2, 10, 12), &[0; 2], ml, None).unwrap();
    // Empty batch needs an empty buffer.
    let e = cpu(&mut [0.0; 3], LogitsLayout::contiguous(0, 3), &[], MaskLayout::new(0, 1), None).unwrap_err();
    assert!(matches!(e, ApplyError::LogitsLen { .. }));
}

#[test]
fn mask_length_and_rows() {
    let mut l = vec![1.0f32; 64];
    let layout = LogitsLayout::contiguous(2, 32);
    let e = cpu(&mut l, layout, &[0; 3], MaskLayout::new(2, 1), None).unwrap_err();
    assert_eq!(e, ApplyError::MaskLen { len: 3, rows: 2, words: 1, expected: 2 });
    let e = cpu(&mut l, layout, &[0; 3], MaskLayout::new(3, 1), None).unwrap_err();
    assert_eq!(e, ApplyError::MaskRowsMismatch { batch: 2, mask_rows: 3 });
    // With indices the row counts may differ.
    cpu(&mut l, layout, &[0; 3], MaskLayout::new(3, 1), Some(&[1])).unwrap();
    cpu(&mut l, layout, &[0; 1], MaskLayout::new(1, 1), Some(&[0])).unwrap();
    assert!(l.iter().all(|&x| x == f32::NEG_INFINITY));
    // Overflowing mask layout.
    let e = cpu(&mut l, layout, &[0; 2], MaskLayout::new(usize::MAX, 2), Some(&[])).unwrap_err();
    assert!(matches!(e, ApplyError::TooLarge { .. }));
}

#[test]
fn indices_out_of_range() {
    let mut l = vec![1.0f32; 64];
    let layout = LogitsLayout::contiguous(2, 32);
    for (idx, pos, index) in [
        (vec![0, 2], 1usize, 2i64),
        (vec![-1], 0, -1),
        (vec![1, 0, 1, 5], 3, 5),
        (vec![i32::MIN], 0, i32::MIN as i64),
    ] {
        let e = cpu(&mut l, layout, &[0; 2], MaskLayout::new(2, 1), Some(&idx)).unwrap_err();
        assert_eq!(e, ApplyError::IndexOutOfRange { position: pos, index, batch: 2, mask_rows: 2 });
    }
    // In range for the logits but not for a shorter mask.
    let e = cpu(&mut l, layout, &[0; 1], MaskLayout::new(1, 1), Some(&[1])).unwrap_err();
    assert!(matches!(e, ApplyError::IndexOutOfRange { index: 1, mask_rows: 1, .. }));
    assert!(l.iter().all(|&x| x == 1.0), "nothing written on error");
}

#[test]
fn dtype_errors() {
    assert_eq!("float16".parse::<DType>().unwrap(), DType::F16);
    assert_eq!("torch.bfloat16".parse::<DType>().unwrap(), DType::BF16);
    assert_eq!("F32".parse::<DType>().unwrap(), DType::F32);
    assert!(matches!("float64".parse::<DType>(), Err(ApplyError::UnsupportedDType(_))));
    assert!(matches!("int8".parse::<DType>(), Err(ApplyError::UnsupportedDType(_))));
    // 7 bytes are not a whole number of f32s.
    let mut bytes = vec![0u8; 7];
    let e = apply_token_bitmask_inplace_cpu_bytes(
        Parallelism::Auto,
        &mut bytes,
        DType::F32,
        LogitsLayout::contiguous(1, 1),
        &[0u32],
        MaskLayout::new(1, 1),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, ApplyError::DTypeMismatch { expected: DType::F32, .. }), "{e:?}");
    // Misaligned bf16 view.
    let mut storage = vec![0u32; 5];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut storage);
    let e = apply_token_bitmask_inplace_cpu_bytes(
        Parallelism::Auto,
        &mut bytes[1..17],
        DType::BF16,
        LogitsLayout::contiguous(1, 8),
        &[0u32],
        MaskLayout::new(1, 1),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, ApplyError::DTypeMismatch { expected: DType::BF16, .. }));
    // Right size for bf16 but declared as f32 with the wrong element count.
    let e = apply_token_bitmask_inplace_cpu_bytes(
        Parallelism::Auto,
        &mut bytes[0..16],
        DType::F32,
        LogitsLayout::contiguous(1, 8),
        &[0u32],
        MaskLayout::new(1, 1),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, ApplyError::LogitsLen { len: 4, .. }));
}

#[test]
fn huge_layout_is_an_error_not_an_overflow() {
    let layout = LogitsLayout::strided(usize::MAX / 2, 10, 10);
    assert!(matches!(layout.len_bounds(), Err(ApplyError::TooLarge { .. })));
    let e = cpu(&mut [], layout, &[], MaskLayout::new(0, 0), Some(&[])).unwrap_err();
    assert!(matches!(e, ApplyError::TooLarge { .. }));
}

#[test]
fn cuda_unavailable_is_an_error() {
    // On machines without CUDA (like CI) asking for a device is a typed error, not
    // a panic. On a GPU machine it succeeds.
    match Device::cuda(0) {
        Ok(dev) => assert!(dev.is_cuda()),
        Err(e) => assert!(matches!(e, BitmaskError::CudaUnavailable(_)), "{e:?}"),
    }
    // A device that cannot exist.
    let e = Device::cuda(1 << 20).unwrap_err();
    assert!(matches!(e, BitmaskError::CudaUnavailable(_)), "{e:?}");
    if !grammask_gpu::cuda_available() {
        assert!(Device::cuda(0).is_err());
    }
}

#[test]
fn unified_api_errors() {
    let mut l = vec![1.0f32; 32];
    let e = apply_token_bitmask_inplace(
        &Device::Cpu(Parallelism::Sequential),
        Logits::Host(&mut l),
        LogitsLayout::contiguous(1, 32),
        Bitmask::Host(&[0u32; 1]),
        MaskLayout::new(1, 1),
        Some(Indices::Host(&[3])),
    )
    .unwrap_err();
    assert!(matches!(e, BitmaskError::Apply(ApplyError::IndexOutOfRange { .. })));
    assert!(l.iter().all(|&x| x == 1.0));
}

proptest! {
    /// Arbitrary (mostly invalid) arguments: the call returns Ok or a typed error,
    /// never panics, and on error writes nothing.
    #[test]
    fn arbitrary_arguments_never_panic(
        len in 0usize..200,
        batch in 0usize..12,
        vocab in 0usize..80,
        stride in 0usize..90,
        mask_len in 0usize..20,
        rows in 0usize..12,
        words in 0usize..5,
        idx in proptest::option::of(proptest::collection::vec(-3i32..14, 0..8)),
    ) {
        let mut l = vec![2.0f32; len];
        let mask = vec![0x5555_5555u32; mask_len];
        let r = cpu(&mut l, LogitsLayout::strided(batch, vocab, stride), &mask, MaskLayout::new(rows, words), idx.as_deref());
        if r.is_err() {
            prop_assert!(l.iter().all(|&x| x == 2.0));
        }
    }
}
