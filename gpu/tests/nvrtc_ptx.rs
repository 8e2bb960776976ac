//! Compiles `src/kernel/bitmask.cu` with NVRTC, exactly as the CUDA path does, and
//! checks the PTX of every kernel variant. NVRTC needs no GPU, so this runs on any
//! machine where `libnvrtc` can be loaded (a CUDA toolkit's `lib64`, or the
//! `nvidia-cuda-nvrtc-cu12` wheel's `lib/`, on `LD_LIBRARY_PATH`). It is `#[ignore]`d, so
//! that a machine without NVRTC never passes it without checking anything:
//! `LD_LIBRARY_PATH=… cargo test --release -p grammask-gpu --test nvrtc_ptx -- --ignored`
//! (it fails there if NVRTC does not load).
//!
//! What it checks, per variant and for several target architectures:
//! * the source compiles under NVRTC (the emulation test compiles it with a host
//!   C++ compiler, which does not prove NVRTC accepts it);
//! * no local memory: the per-lane arrays of mask bits and loaded vectors must live
//!   in registers (a `.local` access would mean a spill or a dynamically indexed
//!   array, slow on the device);
//! * logits are loaded and stored with vector instructions of the variant's width
//!   (`.v4` for 16 bytes, `.v2` for 8);
//! * element-wide stores appear only in the straddling-tail code: at most VEC of
//!   them, not one per element of every vector step (32), which is what
//!   reintroducing per-element stores of mixed vectors would produce.
#![cfg(feature = "cuda")]

use grammask_gpu::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use grammask_gpu::plan::KERNEL_NAMES;
use grammask_gpu::KERNEL_SOURCE;

fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the NVRTC library.
    unsafe { grammask_gpu::cudarc::nvrtc::sys::is_culib_present() }
}

/// The virtual architectures NVRTC can target (e.g. 75, 80, 90).
fn supported_archs() -> Vec<i32> {
    use grammask_gpu::cudarc::nvrtc::sys;
    let mut n = 0i32;
    // SAFETY: plain NVRTC queries writing into a buffer of the size NVRTC reports.
    unsafe {
        assert_eq!(sys::nvrtcGetNumSupportedArchs(&mut n), sys::nvrtcResult::NVRTC_SUCCESS);
        let mut archs = vec![0i32; usize::try_from(n).unwrap_or(0)];
        assert_eq!(sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()), sys::nvrtcResult::NVRTC_SUCCESS);
        archs
    }
}

/// The body of `.entry name(...) { ... }` in `ptx`.
fn entry_body<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start =
        ptx.find(&format!(".entry {name}(")).unwrap_or_else(|| panic!("kernel {name} missing from the PTX"));
    let rest = &ptx[start..];
    // Entries end with a closing brace at the start of a line.
    let end = rest.find("\n}").unwrap_or(rest.len());
    &rest[..end]
}

/// Memory instructions of `body` whose opcode starts with `prefix` (e.g.
/// `st.global`), as their full opcode (`st.global.v4.u32`).
fn ops<'a>(body: &'a str, prefix: &str) -> Vec<&'a str> {
    body.lines().filter_map(|l| l.split_whitespace().find(|w| w.starts_with(prefix))).collect()
}

#[test]
#[ignore = "needs libnvrtc (a CUDA toolkit's lib64 or the nvidia-cuda-nvrtc-cu12 wheel's lib/ on LD_LIBRARY_PATH)"]
fn kernels_compile_with_nvrtc_and_use_whole_vectors() {
    assert!(
        nvrtc_available(),
        "libnvrtc not found: put a CUDA lib64 (or the nvidia-cuda-nvrtc-cu12 wheel's lib/) on LD_LIBRARY_PATH"
    );
    // The oldest target this NVRTC supports (the fallback of the CUDA path's own
    // choice), and Ampere and Hopper where supported.
    let supported = supported_archs();
    let oldest = supported.iter().copied().min().expect("NVRTC lists its architectures");
    let mut archs = vec![oldest];
    archs.extend([80, 90].into_iter().filter(|a| supported.contains(a) && *a != oldest));
    for arch in archs.iter().map(|a| format!("compute_{a}")) {
        let opts = CompileOptions {
            options: vec![format!("--gpu-architecture={arch}")],
            name: Some("grammask_bitmask.cu".into()),
            ..Default::default()
        };
        let ptx = match compile_ptx_with_opts(KERNEL_SOURCE, opts) {
            Ok(p) => p.to_src(),
            Err(e) => panic!("NVRTC failed for {arch}: {e:?}"),
        };
        assert!(!ptx.contains(".local"), "{arch}: local memory in the PTX");
        for name in KERNEL_NAMES {
            // Names are grammask_bitmask_b{element bits}_v{elements per vector}.
            let (elem_bits, vec) = name
                .strip_prefix("grammask_bitmask_b")
                .and_then(|s| s.split_once("_v"))
                .map(|(b, v)| (b.parse::<usize>().unwrap(), v.parse::<usize>().unwrap()))
                .unwrap_or_else(|| panic!("unexpected kernel name {name}"));
            let bytes = elem_bits / 8 * vec;
            let body = entry_body(&ptx, name);
            let stores = ops(body, "st.global");
            let loads = ops(body, "ld.global");
            let elem_op = if elem_bits == 32 { "st.global.u32" } else { "st.global.u16" };
            let vector_op = |kind: &str| match bytes {
                16 => format!("{kind}.global.v4.u32"),
                8 => format!("{kind}.global.v2.u32"),
                4 => format!("{kind}.global.u32"),
                _ => format!("{kind}.global.u16"),
            };
            assert!(
                stores.contains(&vector_op("st").as_str()),
                "{arch} {name}: no {} in {stores:?}",
                vector_op("st")
            );
            if vec > 1 {
                // Mixed vectors are read whole.
                assert!(
                    loads.contains(&vector_op("ld").as_str()),
                    "{arch} {name}: no {} in {loads:?}",
                    vector_op("ld")
                );
                let narrow = stores.iter().filter(|s| **s == elem_op).count();
                assert!(
                    narrow <= vec,
                    "{arch} {name}: {narrow} element-wide stores ({elem_op}); only the straddling tail \
                     (at most {vec}) may store elements one by one: {stores:?}"
                );
            }
            // No store of another width or shape appears.
            for s in &stores {
                assert!(*s == vector_op("st") || *s == elem_op, "{arch} {name}: unexpected store {s}");
            }
        }
    }
}
