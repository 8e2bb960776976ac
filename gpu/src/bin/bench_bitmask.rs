//! Benchmark of the bitmask application, CPU and CUDA.
//!
//! ```text
//! cargo run --release -p grammask-gpu --bin bench_bitmask -- --cpu
//! cargo run --release -p grammask-gpu --bin bench_bitmask -- --cuda [--torch] [--flush-l2]
//! ```
//!
//! Shapes: batch 1, 16, 64, 512, 4096 × vocab 128 256 (override with `--batches`
//! and `--vocab`), each without indices and with indices selecting half the rows
//! (every other row). The mask is random with `--pattern` (`random`: each token
//! allowed with probability 1/2, the worst case, every word mixed; `sparse`: ~1 %
//! allowed, typical of JSON; `dense`: ~99 % allowed; `ones`: everything allowed).
//!
//! * CPU mode (`--cpu`, f32 by default): median wall time over repeated runs, single
//!   thread and rayon; GB/s counts the logits bytes of the masked rows, and
//!   "per core" divides by the threads used.
//! * CUDA mode (`--cuda`, f32 and bf16 by default): each run is queued behind a
//!   ~50 µs spin kernel so that the CUDA events bracket only the kernel, not the
//!   host's launch latency; median of `--runs` runs after warm-up. GB/s counts what
//!   a read-modify-write of the masked rows moves (2 × logits bytes + mask bytes;
//!   the kernel itself never reads the logits), compared with the measured
//!   device-to-device copy bandwidth (read + write). `--torch` then runs
//!   `gpu/scripts/bench_torch.py` (PyTorch masked_fill_ and, if installed,
//!   XGrammar) on the same shapes.

use std::time::{Duration, Instant};

use grammask_gpu::{DType, LogitsLayout, MaskLayout, Parallelism};

struct Opts {
    mode: Mode,
    batches: Vec<usize>,
    vocab: usize,
    dtypes: Vec<DType>,
    pattern: String,
    runs: usize,
    repeats_secs: f64,
    torch: bool,
    flush_l2: bool,
    device: usize,
    threads: Option<usize>,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Mode {
    Auto,
    Cpu,
    Cuda,
}

fn usage() -> ! {
    eprintln!(
        "usage: bench_bitmask [--cpu | --cuda] [--batches 1,16,64,512,4096] [--vocab 128256]\n\
         \x20                    [--dtypes f32,bf16] [--pattern random|sparse|dense|ones] [--runs 200]\n\
         \x20                    [--seconds 0.5] [--threads N] [--device 0] [--torch] [--flush-l2]"
    );
    std::process::exit(2)
}

fn parse() -> Opts {
    let mut o = Opts {
        mode: Mode::Auto,
        batches: vec![1, 16, 64, 512, 4096],
        vocab: 128_256,
        dtypes: Vec::new(),
        pattern: "random".into(),
        runs: 200,
        repeats_secs: 0.5,
        torch: false,
        flush_l2: false,
        device: 0,
        threads: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--cpu" => o.mode = Mode::Cpu,
            "--cuda" => o.mode = Mode::Cuda,
            "--batches" => {
                o.batches = val().split(',').map(|s| s.trim().parse().unwrap_or_else(|_| usage())).collect()
            }
            "--vocab" => o.vocab = val().parse().unwrap_or_else(|_| usage()),
            "--dtypes" => {
                o.dtypes = val().split(',').map(|s| s.parse().unwrap_or_else(|_| usage())).collect()
            }
            "--pattern" => o.pattern = val(),
            "--runs" => o.runs = val().parse().unwrap_or_else(|_| usage()),
            "--seconds" => o.repeats_secs = val().parse().unwrap_or_else(|_| usage()),
            "--threads" => o.threads = Some(val().parse().unwrap_or_else(|_| usage())),
            "--device" => o.device = val().parse().unwrap_or_else(|_| usage()),
            "--torch" => o.torch = true,
            "--flush-l2" => o.flush_l2 = true,
            _ => usage(),
        }
    }
    o
}

/// Deterministic random mask words for `pattern`.
fn make_mask(words: usize, pattern: &str, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    (0..words)
        .map(|_| match pattern {
            "random" => next() as u32,
            "ones" => u32::MAX,
            "sparse" | "dense" => {
                let mut w = 0u32;
                for k in 0..32 {
                    if next() % 100 == 0 {
                        w |= 1 << k;
                    }
                }
                if pattern == "dense" {
                    !w
                } else {
                    w
                }
            }
            _ => usage(),
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn half_indices(batch: usize) -> Vec<i32> {
    (0..batch).step_by(2).map(|r| r as i32).collect()
}

fn main() {
    let o = parse();
    let mode = match o.mode {
        Mode::Auto if grammask_gpu::cuda_available() => Mode::Cuda,
        Mode::Auto => {
            println!("# CUDA not available here: running the CPU benchmark (use --cuda to insist)");
            Mode::Cpu
        }
        m => m,
    };
    if mode == Mode::Cpu {
        bench_cpu(&o);
    } else {
        #[cfg(feature = "cuda")]
        if let Err(e) = cuda_bench::run(&o) {
            eprintln!("CUDA benchmark failed: {e}");
            std::process::exit(1);
        }
        #[cfg(not(feature = "cuda"))]
        {
            eprintln!("built without the `cuda` feature");
            std::process::exit(1);
        }
    }
}

fn bench_cpu(o: &Opts) {
    let threads = o.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    let dtypes = if o.dtypes.is_empty() { vec![DType::F32] } else { o.dtypes.clone() };
    println!(
        "# CPU: vocab {}, mask pattern {:?}, rayon threads {threads}, median of repeated runs (>= {} s or 5 runs)",
        o.vocab, o.pattern, o.repeats_secs
    );
    println!(
        "{:>5} {:>6} {:>6} {:>8} {:>12} {:>10} {:>12}",
        "dtype", "batch", "rows", "mode", "median_us", "GB/s", "GB/s/core"
    );
    for dtype in dtypes {
        for &batch in &o.batches {
            let layout = LogitsLayout::contiguous(batch, o.vocab);
            let ml = MaskLayout::for_vocab(batch, o.vocab);
            let mask = make_mask(ml.rows * ml.words, &o.pattern, 0x5eed + batch as u64);
            let mut buf = vec![0u8; batch * o.vocab * dtype.size()];
            for with_idx in [false, true] {
                let idx = half_indices(batch);
                let idx = with_idx.then_some(&idx[..]);
                let rows = idx.map_or(batch, <[i32]>::len);
                let bytes = (rows * o.vocab * dtype.size()) as f64;
                for (name, par, used) in
                    [("1 thread", Parallelism::Sequential, 1usize), ("rayon", Parallelism::Parallel, threads)]
                {
                    let mut run = || {
                        let mut go = || {
                            grammask_gpu::apply_token_bitmask_inplace_cpu_bytes(
                                par, &mut buf, dtype, layout, &mask, ml, idx,
                            )
                        };
                        // The single-thread figure is the calling thread's own,
                        // without a hop into the pool.
                        if par == Parallelism::Sequential { go() } else { pool.install(go) }
                            .expect("valid shapes");
                    };
                    run();
                    run();
                    let mut times = Vec::new();
                    let start = Instant::now();
                    while times.len() < 5
                        || (start.elapsed() < Duration::from_secs_f64(o.repeats_secs) && times.len() < 2000)
                    {
                        let t = Instant::now();
                        run();
                        times.push(t.elapsed().as_secs_f64());
                    }
                    let t = median(&mut times);
                    let gbs = bytes / t / 1e9;
                    println!(
                        "{:>5} {:>6} {:>6} {:>8} {:>12.1} {:>10.2} {:>12.2}",
                        dtype.name(),
                        batch,
                        rows,
                        name,
                        t * 1e6,
                        gbs,
                        gbs / used as f64
                    );
                }
            }
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda_bench {
    use super::*;
    use grammask_gpu::cudarc::driver::sys::CUevent_flags;
    use grammask_gpu::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
    use grammask_gpu::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
    use grammask_gpu::{BitmaskError, CudaBitmaskKernel, CudaIndices};
    use std::sync::Arc;

    const SPIN_SRC: &str = r#"
extern "C" __global__ void gm_spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) { }
}
"#;

    fn e<E: std::fmt::Debug>(op: &'static str) -> impl FnOnce(E) -> BitmaskError {
        move |err| BitmaskError::Cuda { op, message: format!("{err:?}") }
    }

    pub fn run(o: &Opts) -> Result<(), BitmaskError> {
        let ctx = grammask_gpu::cuda_context(o.device)?;
        let t0 = Instant::now();
        let kernel = CudaBitmaskKernel::shared(&ctx)?;
        let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        // SAFETY: one stream; nothing here relies on cudarc's cross-stream events.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(e("cuStreamCreate"))?;
        let name = ctx.name().unwrap_or_default();
        let ptx = compile_ptx_with_opts(
            SPIN_SRC,
            CompileOptions {
                options: vec![format!("--gpu-architecture={}", kernel.arch())],
                ..Default::default()
            },
        )
        .map_err(e("nvrtc"))?;
        let spin_fn = ctx
            .load_module(ptx)
            .map_err(e("cuModuleLoadData"))?
            .load_function("gm_spin")
            .map_err(e("cuModuleGetFunction"))?;
        let spin = |stream: &Arc<CudaStream>| -> Result<(), BitmaskError> {
            let cycles: i64 = 100_000;
            let mut b = stream.launch_builder(&spin_fn);
            b.arg(&cycles);
            unsafe {
                b.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 })
            }
            .map_err(e("launch spin"))?;
            Ok(())
        };
        let new_event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(e("cuEventCreate"));

        // Device-to-device copy bandwidth (bytes read + written).
        let copy_bytes: usize = 1 << 30;
        let src = stream.alloc_zeros::<u8>(copy_bytes).map_err(e("alloc"))?;
        let mut dst = stream.alloc_zeros::<u8>(copy_bytes).map_err(e("alloc"))?;
        let mut copy_times = Vec::new();
        for i in 0..25 {
            let (a, b) = (new_event()?, new_event()?);
            a.record(&stream).map_err(e("record"))?;
            stream.memcpy_dtod(&src, &mut dst).map_err(e("memcpy"))?;
            b.record(&stream).map_err(e("record"))?;
            let ms = a.elapsed_ms(&b).map_err(e("elapsed"))? as f64;
            if i >= 5 {
                copy_times.push(ms * 1e-3);
            }
        }
        drop((src, dst));
        let copy_bw = 2.0 * copy_bytes as f64 / median(&mut copy_times) / 1e9;
        println!(
            "# CUDA: {name} ({} SMs), kernel {} compiled in {compile_ms:.0} ms; device-to-device copy {copy_bw:.0} GB/s (read+write)",
            kernel.sm_count(),
            kernel.arch()
        );
        println!(
            "# vocab {}, mask pattern {:?}, median of {} runs after warm-up{}",
            o.vocab,
            o.pattern,
            o.runs,
            if o.flush_l2 { ", L2 flushed before each run" } else { "" }
        );
        println!(
            "{:>5} {:>6} {:>6} {:>12} {:>10} {:>8}",
            "dtype", "batch", "rows", "median_us", "GB/s", "%copy"
        );
        let mut flush =
            if o.flush_l2 { Some(stream.alloc_zeros::<u8>(256 << 20).map_err(e("alloc"))?) } else { None };
        let dtypes = if o.dtypes.is_empty() { vec![DType::F32, DType::BF16] } else { o.dtypes.clone() };
        for dtype in dtypes {
            for &batch in &o.batches {
                let layout = LogitsLayout::contiguous(batch, o.vocab);
                let ml = MaskLayout::for_vocab(batch, o.vocab);
                let mask_host = make_mask(ml.rows * ml.words, &o.pattern, 0x5eed + batch as u64);
                let mask = stream.clone_htod(&mask_host).map_err(e("htod"))?;
                let idx_host = half_indices(batch);
                let idx_dev = stream.clone_htod(&idx_host).map_err(e("htod"))?;
                let elems = batch * o.vocab;
                for with_idx in [false, true] {
                    let rows = if with_idx { idx_host.len() } else { batch };
                    let t = match dtype {
                        DType::F32 => {
                            let mut l: CudaSlice<f32> = stream.alloc_zeros(elems).map_err(e("alloc"))?;
                            time(
                                o,
                                &stream,
                                &kernel,
                                &mut l,
                                layout,
                                &mask,
                                ml,
                                with_idx.then_some(&idx_dev),
                                &spin,
                                &new_event,
                                &mut flush,
                            )?
                        }
                        DType::F16 => {
                            let mut l: CudaSlice<half::f16> =
                                stream.alloc_zeros(elems).map_err(e("alloc"))?;
                            time(
                                o,
                                &stream,
                                &kernel,
                                &mut l,
                                layout,
                                &mask,
                                ml,
                                with_idx.then_some(&idx_dev),
                                &spin,
                                &new_event,
                                &mut flush,
                            )?
                        }
                        DType::BF16 => {
                            let mut l: CudaSlice<half::bf16> =
                                stream.alloc_zeros(elems).map_err(e("alloc"))?;
                            time(
                                o,
                                &stream,
                                &kernel,
                                &mut l,
                                layout,
                                &mask,
                                ml,
                                with_idx.then_some(&idx_dev),
                                &spin,
                                &new_event,
                                &mut flush,
                            )?
                        }
                    };
                    let bytes = 2.0 * (rows * o.vocab * dtype.size()) as f64 + (rows * ml.words * 4) as f64;
                    let gbs = bytes / t / 1e9;
                    println!(
                        "{:>5} {:>6} {:>6} {:>12.2} {:>10.0} {:>7.0}%",
                        dtype.name(),
                        batch,
                        rows,
                        t * 1e6,
                        gbs,
                        100.0 * gbs / copy_bw
                    );
                }
            }
        }
        if kernel.take_index_error(&stream)? {
            eprintln!("warning: the kernel flagged an out-of-range index");
        }
        if o.torch {
            run_torch(o);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn time<T: grammask_gpu::LogitElem>(
        o: &Opts,
        stream: &Arc<CudaStream>,
        kernel: &CudaBitmaskKernel,
        logits: &mut CudaSlice<T>,
        layout: LogitsLayout,
        mask: &CudaSlice<u32>,
        ml: MaskLayout,
        idx: Option<&CudaSlice<i32>>,
        spin: &dyn Fn(&Arc<CudaStream>) -> Result<(), BitmaskError>,
        new_event: &dyn Fn() -> Result<grammask_gpu::cudarc::driver::CudaEvent, BitmaskError>,
        flush: &mut Option<CudaSlice<u8>>,
    ) -> Result<f64, BitmaskError> {
        let view = idx.map(|i| i.slice(..));
        let apply = |logits: &mut CudaSlice<T>| {
            kernel.apply::<T, u32, _, _>(
                stream,
                logits,
                layout,
                mask,
                ml,
                view.as_ref().map(CudaIndices::Device),
            )
        };
        for _ in 0..10 {
            apply(logits)?;
        }
        let mut events = Vec::with_capacity(o.runs);
        let mut times = Vec::with_capacity(o.runs);
        for _ in 0..o.runs {
            if let Some(f) = flush.as_mut() {
                stream.memset_zeros(f).map_err(e("memset"))?;
            }
            spin(stream)?;
            let (a, b) = (new_event()?, new_event()?);
            a.record(stream).map_err(e("record"))?;
            apply(logits)?;
            b.record(stream).map_err(e("record"))?;
            events.push((a, b));
            if events.len() >= 64 {
                for (a, b) in events.drain(..) {
                    times.push(a.elapsed_ms(&b).map_err(e("elapsed"))? as f64 * 1e-3);
                }
            }
        }
        for (a, b) in events.drain(..) {
            times.push(a.elapsed_ms(&b).map_err(e("elapsed"))? as f64 * 1e-3);
        }
        Ok(median(&mut times))
    }

    fn run_torch(o: &Opts) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench_torch.py");
        let batches: Vec<String> = o.batches.iter().map(|b| b.to_string()).collect();
        let dtypes: Vec<&str> = if o.dtypes.is_empty() {
            vec!["f32", "bf16"]
        } else {
            o.dtypes.iter().map(|d| d.name()).collect()
        };
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(script)
            .args(["--device", "cuda", "--batches", &batches.join(","), "--vocab", &o.vocab.to_string()])
            .args(["--dtypes", &dtypes.join(","), "--pattern", &o.pattern, "--runs", &o.runs.to_string()]);
        if o.flush_l2 {
            cmd.arg("--flush-l2");
        }
        match cmd.status() {
            Ok(s) if s.success() => {}
            Ok(s) => println!("# PyTorch comparison skipped ({s})"),
            Err(err) => println!("# PyTorch comparison skipped: {err}"),
        }
    }
}
