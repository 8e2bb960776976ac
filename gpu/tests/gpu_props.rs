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

/// Random mask words in the proportions `make_case` uses (all-zero, all-one,
/// one-bit and random words).
fn random_mask(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| match rng.below(6) {
            0 => 0,
            1 | 2 => u32::MAX,
            3 => 1u32 << rng.below(32),
            _ => rng.next() as u32,
        })
        .collect()
}

/// One captured apply, replayed with new mask contents (and new logits) written
/// into the same device buffers, each replay checked bit for bit against the CPU
/// path. `raw` captures `apply_raw` instead of the unified entry point.
fn graph_replays<T: LogitElem + grammask_gpu::cudarc::driver::DeviceRepr>(
    dtype: DType,
    use_indices: bool,
    offset: usize,
    raw: bool,
    to: fn(&[u32]) -> Vec<T>,
    from: fn(&[T]) -> Vec<u32>,
) {
    use grammask_gpu::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use grammask_gpu::cudarc::driver::{DevicePtr, DevicePtrMut};

    // A context handle of our own, with cudarc's event tracking off before any
    // stream or buffer exists: capture rejects waits on events recorded outside it.
    let ctx = grammask_gpu::cuda_context(0).expect("a CUDA device");
    // SAFETY: every buffer below is used on `stream` only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    // Compiled (or found) before capture: no NVRTC work may happen inside it.
    let device = Device::cuda_on_stream(stream.clone()).unwrap();
    let kernel = CudaBitmaskKernel::shared(&ctx).unwrap();

    let mut base = make_case(dtype, 4, 5000, 3, false, 0, 1, false, 11);
    if use_indices {
        // Repeats and a subset; the mask has one row more than the logits.
        base.indices = Some(vec![3, 0, 3, 1]);
        base.mask_layout = MaskLayout::new(5, base.mask_layout.words);
        base.mask = vec![0; 5 * base.mask_layout.words];
    }
    let mut logits: CudaSlice<T> = stream.clone_htod(&to(&vec![0; offset + base.len + 1])).unwrap();
    let mut mask: CudaSlice<u32> = stream.alloc_zeros(base.mask.len().max(1)).unwrap();
    let idx: CudaSlice<i32> = stream.clone_htod(base.indices.as_deref().unwrap_or(&[0])).unwrap();
    let sentinel = to(&[0x3c3c])[0];
    stream.memcpy_htod(&[sentinel], &mut logits.slice_mut(offset + base.len..)).unwrap();
    stream.synchronize().unwrap();

    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    {
        let mut view = logits.slice_mut(offset..offset + base.len);
        let mask_view = mask.slice(..base.mask.len());
        let idx_view = idx.slice(..base.indices.as_ref().map_or(0, Vec::len));
        let result = if raw {
            let (lp, _l) = view.device_ptr_mut(&stream);
            let (mp, _m) = mask_view.device_ptr(&stream);
            let (ip, _i) = idx_view.device_ptr(&stream);
            let indices = base.indices.as_ref().map(|i| (ip, i.len()));
            // SAFETY: pointers of live buffers of this context, sized for the layouts.
            unsafe { kernel.apply_raw(&stream, lp, dtype, base.layout, mp, base.mask_layout, indices) }
        } else {
            apply_token_bitmask_inplace(
                &device,
                Logits::Cuda(view),
                base.layout,
                Bitmask::Cuda(mask_view),
                base.mask_layout,
                base.indices.as_ref().map(|_| Indices::Cuda(idx_view)),
            )
        };
        if let Err(e) = result {
            // End the capture either way, so the stream is usable for the report.
            let _ = stream.end_capture(CUgraphInstantiate_flags(0));
            panic!("apply during capture: {e}");
        }
    }
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
    // Capturing runs nothing.
    let untouched = stream.clone_dtoh(&logits).unwrap();
    assert!(from(&untouched[..offset + base.len]).iter().all(|&b| b == 0), "capture executed work");

    let mut rng = Rng::new(0x6a09_e667);
    for replay in 0..4 {
        let mut case = base.clone();
        case.mask = random_mask(&mut rng, base.mask.len());
        if replay == 3 {
            case.mask.iter_mut().for_each(|w| *w = u32::MAX); // the all-ones fast path
        }
        case.bits = (0..base.len)
            .map(|_| if dtype == DType::F32 { rng.next() as u32 } else { rng.next() as u32 & 0xffff })
            .collect();
        // New contents in the same buffers, then the same graph.
        stream.memcpy_htod(&to(&case.bits), &mut logits.slice_mut(offset..offset + base.len)).unwrap();
        if !case.mask.is_empty() {
            stream.memcpy_htod(&case.mask, &mut mask.slice_mut(..case.mask.len())).unwrap();
        }
        graph.launch().unwrap();
        let back = from(&stream.clone_dtoh(&logits).unwrap());
        assert_eq!(back[offset + base.len], from(&[sentinel])[0], "wrote after the buffer");
        let got = &back[offset..offset + base.len];
        let want = run_cpu(&case);
        assert_eq!(
            first_diff(got, &want, &case.layout),
            None,
            "replay {replay}: dtype {dtype} indices {:?} offset {offset} raw {raw}",
            case.indices
        );
    }
    assert!(!kernel.take_index_error(&stream).unwrap(), "valid indices flagged");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_apply_replays_in_a_cuda_graph() {
    for use_indices in [false, true] {
        for offset in [0, 1] {
            for raw in [false, true] {
                graph_replays::<f32>(DType::F32, use_indices, offset, raw, to_f32, from_f32);
                graph_replays::<half::f16>(DType::F16, use_indices, offset, raw, to_f16, from_f16);
                graph_replays::<half::bf16>(DType::BF16, use_indices, offset, raw, to_bf16, from_bf16);
            }
        }
    }
}
