//! The router's CUDA kernels (the simulated model's and the device sampler's) compile
//! under NVRTC, as the CUDA path compiles them at run time. NVRTC needs no GPU: this
//! runs wherever `libnvrtc` loads (a CUDA toolkit's `lib64`, or the
//! `nvidia-cuda-nvrtc-cu12` wheel's `lib/`, on `LD_LIBRARY_PATH`). It is `#[ignore]`d,
//! so that a machine without NVRTC never passes it without checking anything:
//! `LD_LIBRARY_PATH=… cargo test --release -p grammask-router --test nvrtc -- --ignored`
//! (and it fails there if NVRTC does not load). The `--ignored` tests in `tests/cuda.rs`
//! run the kernels on a GPU.
#![cfg(feature = "cuda")]

use grammask_gpu::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

const SOURCES: [(&str, &str, &[&str]); 2] = [
    ("simulated.cu", include_str!("../src/model/simulated.cu"), &["grammask_sim_spin", "grammask_sim_rows"]),
    ("device.cu", include_str!("../src/sampling/device.cu"), &["grammask_sample_rows"]),
];

#[test]
#[ignore = "needs libnvrtc (a CUDA toolkit's lib64 or the nvidia-cuda-nvrtc-cu12 wheel's lib/ on LD_LIBRARY_PATH)"]
fn router_kernels_compile_with_nvrtc() {
    // SAFETY: only tries to dlopen the NVRTC library.
    let present = unsafe { grammask_gpu::cudarc::nvrtc::sys::is_culib_present() };
    assert!(present, "libnvrtc not found: put a CUDA lib64 (or the nvidia-cuda-nvrtc-cu12 wheel's lib/) on LD_LIBRARY_PATH");
    for arch in ["compute_75", "compute_90"] {
        for (name, source, kernels) in SOURCES {
            let opts = CompileOptions {
                options: vec![format!("--gpu-architecture={arch}")],
                name: Some(name.into()),
                ..Default::default()
            };
            let ptx = match compile_ptx_with_opts(source, opts) {
                Ok(p) => p.to_src(),
                Err(e) => panic!("NVRTC failed on {name} for {arch}: {e:?}"),
            };
            for k in kernels {
                assert!(ptx.contains(&format!(".entry {k}(")), "{name}: {k} missing for {arch}");
            }
            // Per-thread values live in registers (a spill would be slow on the device).
            assert!(!ptx.contains(".local"), "{name}: local memory for {arch}");
        }
    }
}
