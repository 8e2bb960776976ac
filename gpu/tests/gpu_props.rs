//! The CPU properties, run on a CUDA device and compared bit for bit with the CPU
//! path (and the scalar reference). Ignored by default because CI has no GPU:
//!
//! ```text
//! cargo test --release -p grammask-gpu -- --ignored
//! ```
//!
//! (If NVRTC is not found, put the toolkit's `lib64` on `LD_LIBRARY_PATH`.)
#![cfg(feature = "cuda")]

mod common;

use std::sync::Arc;

use common::*;
use grammask_gpu::cudarc::driver::{CudaSlice, CudaStream};
use grammask_gpu::{
    apply_token_bitmask_inplace, apply_token_bitmask_inplace_cpu, ApplyError, Bitmask, BitmaskError,
    CudaBitmaskKernel, CudaIndices, DType, Device, Indices, LogitElem, Logits, LogitsLayout, MaskLayout,
};
use proptest::test_runner::{Config, TestCaseError, TestRunner};

struct Gpu {
    device: Device,
    kernel: Arc<CudaBitmaskKernel>,
    stream: Arc<CudaStream>,
}

fn gpu() -> Gpu {
    let ctx = grammask_gpu::cuda_context(0).expect("a CUDA device (these tests are for GPU machines)");
    let stream = ctx.new_stream().expect("stream");
    let device = Device::cuda_on_stream(stream.clone()).expect("kernel compiles");
    let kernel = CudaBitmaskKernel::shared(&ctx).unwrap();
    eprintln!("kernel compiled for {} ({} SMs)", kernel.arch(), kernel.sm_count());
    Gpu { device, kernel, stream }
}

/// How the buffers of one case are handed to the device.
#[derive(Debug, Clone, Copy)]
struct Variant {
    /// Elements of padding before the logits (misaligns vector stores when odd).
    offset: usize,
    /// Bitmask stays on the host (copied by the crate).
    host_mask: bool,
    /// Indices stay on the host.
    host_indices: bool,
    /// i32 instead of u32 mask words.
    i32_mask: bool,
}

fn run_typed<T: LogitElem + grammask_gpu::cudarc::driver::DeviceRepr>(
    g: &Gpu,
    case: &Case,
    v: Variant,
    to: fn(&[u32]) -> Vec<T>,
    from: fn(&[T]) -> Vec<u32>,
) -> Result<Vec<u32>, BitmaskError> {
    let s = &g.stream;
    let host = to(&case.bits);
    let mut padded = to(&vec![0x1234; v.offset]);
    padded.extend_from_slice(&host);
    padded.push(to(&[0x4321])[0]); // a sentinel after the buffer
    let mut dev: CudaSlice<T> = s.clone_htod(&padded).unwrap();
    let mask_u32 = s.clone_htod(&case.mask).unwrap();
    let mask_i32_host: Vec<i32> = case.mask.iter().map(|&w| w as i32).collect();
    let mask_i32 = s.clone_htod(&mask_i32_host).unwrap();
    let idx_dev = case.indices.as_ref().filter(|i| !i.is_empty()).map(|i| s.clone_htod(i).unwrap());
    {
        let view = dev.slice_mut(v.offset..v.offset + case.len);
        let indices = match (&case.indices, v.host_indices, &idx_dev) {
            (None, _, _) => None,
            (Some(i), true, _) => Some(Indices::Host(i)),
            (Some(_), false, Some(d)) => Some(Indices::Cuda(d.slice(..))),
            (Some(i), false, None) => Some(Indices::Host(i)), // empty: nothing to upload
        };
        if v.i32_mask {
            let mask = if v.host_mask {
                Bitmask::Host(&mask_i32_host[..])
            } else {
                Bitmask::Cuda(mask_i32.slice(..))
            };
            apply_token_bitmask_inplace(
                &g.device,
                Logits::Cuda(view),
                case.layout,
                mask,
                case.mask_layout,
                indices,
            )?;
        } else {
            let mask =
                if v.host_mask { Bitmask::Host(&case.mask[..]) } else { Bitmask::Cuda(mask_u32.slice(..)) };
            apply_token_bitmask_inplace(
                &g.device,
                Logits::Cuda(view),
                case.layout,
                mask,
                case.mask_layout,
                indices,
            )?;
        }
    }
    let back = s.clone_dtoh(&dev).unwrap();
    let before = from(&padded);
    let after = from(&back);
    assert_eq!(after[..v.offset], before[..v.offset], "wrote before the buffer");
    assert_eq!(after.last(), before.last(), "wrote after the buffer");
    assert!(!g.kernel.take_index_error(s).unwrap(), "valid indices flagged");
    Ok(after[v.offset..v.offset + case.len].to_vec())
}

fn run_gpu(g: &Gpu, case: &Case, v: Variant) -> Result<Vec<u32>, BitmaskError> {
    match case.dtype {
        DType::F32 => run_typed::<f32>(g, case, v, to_f32, from_f32),
        DType::F16 => run_typed::<half::f16>(g, case, v, to_f16, from_f16),
        DType::BF16 => run_typed::<half::bf16>(g, case, v, to_bf16, from_bf16),
    }
}

fn run_cpu(case: &Case) -> Vec<u32> {
    let idx = case.indices.as_deref();
    match case.dtype {
        DType::F32 => {
            let mut v = to_f32(&case.bits);
            apply_token_bitmask_inplace_cpu(&mut v, case.layout, &case.mask, case.mask_layout, idx).unwrap();
            from_f32(&v)
        }
        DType::F16 => {
            let mut v = to_f16(&case.bits);
            apply_token_bitmask_inplace_cpu(&mut v, case.layout, &case.mask, case.mask_layout, idx).unwrap();
            from_f16(&v)
        }
        DType::BF16 => {
            let mut v = to_bf16(&case.bits);
            apply_token_bitmask_inplace_cpu(&mut v, case.layout, &case.mask, case.mask_layout, idx).unwrap();
            from_bf16(&v)
        }
    }
}

fn property(g: &Gpu, cases: u32, max_batch: usize, max_vocab: usize) {
    let mut runner = TestRunner::new(Config { cases, ..Config::default() });
    let strategy = (
        case_strategy(max_batch, max_vocab),
        0usize..4,
        proptest::bool::ANY,
        proptest::bool::ANY,
        proptest::bool::ANY,
    );
    runner
        .run(&strategy, |(case, offset, host_mask, host_indices, i32_mask)| {
            let v = Variant { offset, host_mask, host_indices, i32_mask };
            let cpu = run_cpu(&case);
            let want = reference(&case);
            if let Some(d) = first_diff(&cpu, &want, &case.layout) {
                return Err(TestCaseError::fail(format!("CPU vs reference: {d}")));
            }
            let got = run_gpu(g, &case, v).map_err(|e| TestCaseError::fail(format!("{e}")))?;
            if let Some(d) = first_diff(&got, &cpu, &case.layout) {
                return Err(TestCaseError::fail(format!(
                    "GPU vs CPU: {d}; dtype {} layout {:?} mask {:?} indices {:?} {v:?}",
                    case.dtype, case.layout, case.mask_layout, case.indices
                )));
            }
            Ok(())
        })
        .unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_small_shapes() {
    let g = gpu();
    property(&g, 400, 6, 300);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_long_rows() {
    let g = gpu();
    property(&g, 60, 9, 140_000);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_edge_shapes() {
    let g = gpu();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for &(batch, vocab, pad) in &[
            (0, 0, 0),
            (0, 100, 3),
            (3, 0, 0),
            (1, 1, 0),
            (1, 31, 0),
            (2, 33, 1),
            (2, 1023, 1),
            (2, 1024, 0),
            (3, 1025, 3),
            (2, 128_256, 0),
            (3, 32_000, 8),
        ] {
            for dw in [-2, 0, 2] {
                for use_idx in [false, true] {
                    for offset in [0, 1, 2] {
                        let case =
                            make_case(dtype, batch, vocab, pad, offset == 1, dw, 1, use_idx, offset as u64);
                        let v = Variant {
                            offset,
                            host_mask: offset == 2,
                            host_indices: offset == 1,
                            i32_mask: offset == 0,
                        };
                        let got = run_gpu(&g, &case, v).unwrap();
                        assert_eq!(first_diff(&got, &run_cpu(&case), &case.layout), None, "{case:?}");
                    }
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_errors_and_device_index_flag() {
    let g = gpu();
    let s = &g.stream;
    let layout = LogitsLayout::contiguous(2, 64);
    let ml = MaskLayout::new(2, 2);
    let mut logits = s.clone_htod(&vec![1.0f32; 128]).unwrap();
    let mask = s.clone_htod(&[0u32; 4]).unwrap();

    // Host logits with a CUDA device.
    let mut host = vec![1.0f32; 128];
    let e = apply_token_bitmask_inplace(
        &g.device,
        Logits::Host(&mut host),
        layout,
        Bitmask::Host(&[0u32; 4]),
        ml,
        None,
    )
    .unwrap_err();
    assert!(matches!(e, BitmaskError::DeviceMismatch(_)));
    // CUDA logits with the CPU device.
    let e = apply_token_bitmask_inplace(
        &Device::cpu(),
        Logits::Cuda(logits.slice_mut(..)),
        layout,
        Bitmask::Host(&[0u32; 4]),
        ml,
        None,
    )
    .unwrap_err();
    assert!(matches!(e, BitmaskError::DeviceMismatch(_)));
    // Shape errors are reported before launching.
    let e = g
        .kernel
        .apply::<f32, u32, _, _>(s, &mut logits.slice_mut(..100), layout, &mask, ml, None)
        .unwrap_err();
    assert!(matches!(e, BitmaskError::Apply(ApplyError::LogitsLen { .. })));
    let e = g
        .kernel
        .apply::<f32, u32, _, _>(s, &mut logits, layout, &mask, ml, Some(CudaIndices::Host(&[0, 2])))
        .unwrap_err();
    assert!(matches!(e, BitmaskError::Apply(ApplyError::IndexOutOfRange { position: 1, .. })));

    // Out-of-range device indices: the row is skipped and the flag is raised.
    let bad = s.clone_htod(&[1i32, 7, -1]).unwrap();
    g.kernel
        .apply::<f32, u32, _, _>(s, &mut logits, layout, &mask, ml, Some(CudaIndices::Device(&bad.slice(..))))
        .unwrap();
    assert!(g.kernel.take_index_error(s).unwrap());
    assert!(!g.kernel.take_index_error(s).unwrap(), "flag is cleared");
    let back = s.clone_dtoh(&logits).unwrap();
    assert!(back[..64].iter().all(|&x| x == 1.0), "row 0 untouched");
    assert!(back[64..].iter().all(|&x| x == f32::NEG_INFINITY), "row 1 masked");

    // Raw pointers with a misaligned bitmask.
    let e = unsafe { g.kernel.apply_raw(s, 0x1000, DType::F32, layout, 0x1002, ml, None).unwrap_err() };
    assert!(matches!(e, BitmaskError::Misaligned { what: "bitmask", .. }));
}
