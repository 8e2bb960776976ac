//! Benchmark of the bitmask application, CPU and CUDA.
//!
//! ```text
//! cargo run --release -p grammask-gpu --bin bench_bitmask -- --cpu
//! cargo run --release -p grammask-gpu --bin bench_bitmask -- --cuda [--torch] [--flush-l2] [--spin-us 2000]
//! ```
//!
//! Shapes: batch 1, 16, 64, 512, 4096 × vocab 128 256 (override with `--batches`
//! and `--vocab`), each without indices and with indices selecting half the rows
//! (every other row). Mask patterns (`--pattern`, a comma-separated list): `random`
//! (each token allowed with probability 1/2, the worst case, every word mixed),
//! `sparse` (~1 % allowed, typical of JSON), `dense` (~99 % allowed), `ones`
//! (everything allowed). CPU mode defaults to `random`, CUDA mode to all four.
//!
//! * CPU mode (`--cpu`, f32 by default): median wall time over repeated runs, single
//!   thread and rayon; GB/s counts the logits bytes of the masked rows, and
//!   "per core" divides by the threads used.
//! * CUDA mode (`--cuda`, f32, f16 and bf16 by default): each run is queued behind a
//!   spin kernel of `--spin-us` microseconds (2 000 by default, far longer than the
//!   host needs to queue the run, so the device never idles between the events and
//!   they bracket only the kernel, not launch latency); median of `--runs` runs
//!   after warm-up. GB/s counts a read and a write of every logit of the masked rows
//!   plus the mask (what a read-modify-write moves; the kernel itself reads only
//!   mixed vectors and writes only vectors with a disallowed token), compared with
//!   the measured device-to-device copy bandwidth (read + write). `--torch` runs
//!   `gpu/scripts/bench_torch.py` (XGrammar's `apply_token_bitmask_inplace` if
//!   installed, with `--xgrammar-backend`, `auto` by default: Triton on CUDA in
//!   0.2.8; and PyTorch `masked_fill_`) with the same shapes, patterns, spin and
//!   runs, and the one table printed at the end puts them side by side.

#[cfg(any(feature = "cuda", test))]
use std::collections::HashMap;
use std::time::{Duration, Instant};

use grammask_gpu::{DType, LogitsLayout, MaskLayout, Parallelism};

struct Opts {
    mode: Mode,
    batches: Vec<usize>,
    vocab: usize,
    dtypes: Vec<DType>,
    patterns: Vec<String>,
    runs: usize,
    repeats_secs: f64,
    spin_us: f64,
    torch: bool,
    xgrammar_backend: String,
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

const PATTERNS: [&str; 4] = ["random", "sparse", "dense", "ones"];

fn usage() -> ! {
    eprintln!(
        "usage: bench_bitmask [--cpu | --cuda] [--batches 1,16,64,512,4096] [--vocab 128256]\n\
         \x20                    [--dtypes f32,f16,bf16] [--pattern random,sparse,dense,ones] [--runs 200]\n\
         \x20                    [--spin-us 2000] [--seconds 0.5] [--threads N] [--device 0] [--torch]\n\
         \x20                    [--xgrammar-backend auto|cuda|triton] [--flush-l2]"
    );
    std::process::exit(2)
}

fn parse() -> Opts {
    let mut o = Opts {
        mode: Mode::Auto,
        batches: vec![1, 16, 64, 512, 4096],
        vocab: 128_256,
        dtypes: Vec::new(),
        patterns: Vec::new(),
        runs: 200,
        repeats_secs: 0.5,
        spin_us: 2000.0,
        torch: false,
        xgrammar_backend: "auto".into(),
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
            "--pattern" | "--patterns" => {
                o.patterns = val().split(',').map(|s| s.trim().to_string()).collect();
                if o.patterns.iter().any(|p| !PATTERNS.contains(&p.as_str())) {
                    usage()
                }
            }
            "--runs" => o.runs = val().parse().unwrap_or_else(|_| usage()),
            "--seconds" => o.repeats_secs = val().parse().unwrap_or_else(|_| usage()),
            "--spin-us" => o.spin_us = val().parse().unwrap_or_else(|_| usage()),
            "--threads" => o.threads = Some(val().parse().unwrap_or_else(|_| usage())),
            "--device" => o.device = val().parse().unwrap_or_else(|_| usage()),
            "--torch" => o.torch = true,
            "--xgrammar-backend" => o.xgrammar_backend = val(),
            "--flush-l2" => o.flush_l2 = true,
            _ => usage(),
        }
    }
    if o.runs == 0 || o.spin_us.is_nan() || o.spin_us < 0.0 {
        usage()
    }
    o
}

/// Deterministic random mask words for `pattern` (one of [`PATTERNS`]).
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
        let patterns = if o.patterns.is_empty() { vec!["random".to_string()] } else { o.patterns.clone() };
        for pattern in &patterns {
            bench_cpu(&o, pattern);
        }
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

// The CUDA table and its PyTorch columns (only built with the CUDA path).
/// One timed cell of the CUDA table, keyed like the PyTorch script's output.
#[cfg(any(feature = "cuda", test))]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Cell {
    pattern: String,
    dtype: String,
    batch: usize,
    rows: usize,
}

/// The PyTorch script's timings: (implementation, cell) → median µs (`None`: the
/// implementation failed on that cell).
#[cfg(any(feature = "cuda", test))]
type TorchResults = HashMap<(String, Cell), Option<f64>>;

/// Parses the PyTorch script's machine-readable lines,
/// `RESULT <impl> <pattern> <dtype> <batch> <rows> <median_us>` (tab-separated);
/// other lines are returned to be echoed. `median_us` may be `failed`.
#[cfg(any(feature = "cuda", test))]
fn parse_torch_output(out: &str) -> (TorchResults, Vec<String>) {
    let mut results = HashMap::new();
    let mut other = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let parsed = match f.as_slice() {
            ["RESULT", imp, pattern, dtype, batch, rows, us] => {
                batch.parse().ok().zip(rows.parse().ok()).map(|(batch, rows)| {
                    let cell = Cell { pattern: pattern.to_string(), dtype: dtype.to_string(), batch, rows };
                    ((imp.to_string(), cell), us.parse::<f64>().ok())
                })
            }
            _ => None,
        };
        match parsed {
            Some((k, v)) => {
                results.insert(k, v);
            }
            None => other.push(line.to_string()),
        }
    }
    (results, other)
}

fn bench_cpu(o: &Opts, pattern: &str) {
    let threads = o.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    let dtypes = if o.dtypes.is_empty() { vec![DType::F32] } else { o.dtypes.clone() };
    println!(
        "# CPU: vocab {}, mask pattern {:?}, rayon threads {threads}, median of repeated runs (>= {} s or 5 runs)",
        o.vocab, pattern, o.repeats_secs
    );
    println!(
        "{:>5} {:>6} {:>6} {:>8} {:>12} {:>10} {:>12}",
        "dtype", "batch", "rows", "mode", "median_us", "GB/s", "GB/s/core"
    );
    for dtype in dtypes {
        for &batch in &o.batches {
            let layout = LogitsLayout::contiguous(batch, o.vocab);
            let ml = MaskLayout::for_vocab(batch, o.vocab);
            let mask = make_mask(ml.rows * ml.words, pattern, 0x5eed + batch as u64);
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
    use grammask_gpu::cudarc::driver::{CudaEvent, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
    use grammask_gpu::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
    use grammask_gpu::{BitmaskError, CudaBitmaskKernel, CudaIndices};
    use std::sync::Arc;

    /// Busy-waits `ns` nanoseconds of the device's global timer (independent of the
    /// SM clock, so the spin is a time, not a cycle count).
    const SPIN_SRC: &str = r#"
extern "C" __global__ void gm_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
"#;

    fn e<E: std::fmt::Debug>(op: &'static str) -> impl FnOnce(E) -> BitmaskError {
        move |err| BitmaskError::Cuda { op, message: format!("{err:?}") }
    }

    /// One grammask measurement.
    struct Timed {
        cell: Cell,
        us: f64,
        /// Bytes a read-modify-write of the masked rows moves (GB/s numerator).
        bytes: f64,
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
        let spin_ns = (o.spin_us * 1e3) as u64;
        let spin = |stream: &Arc<CudaStream>| -> Result<(), BitmaskError> {
            let mut b = stream.launch_builder(&spin_fn);
            b.arg(&spin_ns);
            // SAFETY: the kernel takes one u64 by value.
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

        let patterns: Vec<String> =
            if o.patterns.is_empty() { PATTERNS.map(String::from).to_vec() } else { o.patterns.clone() };
        let dtypes =
            if o.dtypes.is_empty() { vec![DType::F32, DType::F16, DType::BF16] } else { o.dtypes.clone() };
        let mut flush =
            if o.flush_l2 { Some(stream.alloc_zeros::<u8>(256 << 20).map_err(e("alloc"))?) } else { None };
        let mut results = Vec::new();
        for pattern in &patterns {
            for &dtype in &dtypes {
                for &batch in &o.batches {
                    let layout = LogitsLayout::contiguous(batch, o.vocab);
                    let ml = MaskLayout::for_vocab(batch, o.vocab);
                    let mask_host = make_mask(ml.rows * ml.words, pattern, 0x5eed + batch as u64);
                    let mask = stream.clone_htod(&mask_host).map_err(e("htod"))?;
                    let idx_host = half_indices(batch);
                    let idx_dev = stream.clone_htod(&idx_host).map_err(e("htod"))?;
                    let elems = batch * o.vocab;
                    for with_idx in [false, true] {
                        let rows = if with_idx { idx_host.len() } else { batch };
                        let idx = with_idx.then_some(&idx_dev);
                        let env =
                            Env { o, stream: &stream, kernel: &kernel, spin: &spin, new_event: &new_event };
                        let t = match dtype {
                            DType::F32 => {
                                let mut l: CudaSlice<f32> = stream.alloc_zeros(elems).map_err(e("alloc"))?;
                                env.time(&mut l, layout, &mask, ml, idx, &mut flush)?
                            }
                            DType::F16 => {
                                let mut l: CudaSlice<half::f16> =
                                    stream.alloc_zeros(elems).map_err(e("alloc"))?;
                                env.time(&mut l, layout, &mask, ml, idx, &mut flush)?
                            }
                            DType::BF16 => {
                                let mut l: CudaSlice<half::bf16> =
                                    stream.alloc_zeros(elems).map_err(e("alloc"))?;
                                env.time(&mut l, layout, &mask, ml, idx, &mut flush)?
                            }
                        };
                        let bytes =
                            2.0 * (rows * o.vocab * dtype.size()) as f64 + (rows * ml.words * 4) as f64;
                        eprintln!(
                            "grammask {pattern} {} batch {batch} rows {rows}: {:.2} µs",
                            dtype.name(),
                            t * 1e6
                        );
                        let cell =
                            Cell { pattern: pattern.clone(), dtype: dtype.name().to_string(), batch, rows };
                        results.push(Timed { cell, us: t * 1e6, bytes });
                    }
                }
            }
        }
        if kernel.take_index_error(&stream)? {
            eprintln!("warning: the kernel flagged an out-of-range index");
        }
        let torch = if o.torch { run_torch(o, &patterns, &dtypes) } else { None };

        println!(
            "# CUDA: {name} ({} SMs), kernel {} compiled in {compile_ms:.0} ms; device-to-device copy {copy_bw:.0} GB/s (read+write)",
            kernel.sm_count(),
            kernel.arch()
        );
        println!(
            "# vocab {}, median of {} runs after warm-up, each queued behind a {} µs spin kernel{}; \
             GB/s = (2 × logits bytes of the masked rows + mask bytes) / time; %copy = GB/s / copy bandwidth",
            o.vocab,
            o.runs,
            o.spin_us,
            if o.flush_l2 { ", L2 flushed before each run" } else { "" }
        );
        let (torch_results, other_lines) = match torch {
            Some((r, other)) => (Some(r), other),
            None => (None, Vec::new()),
        };
        for l in &other_lines {
            println!("{l}");
        }
        println!(
            "{:>7} {:>5} {:>6} {:>6} | {:>11} {:>7} {:>6} | {:>11} {:>6} {:>7} | {:>14}",
            "pattern",
            "dtype",
            "batch",
            "rows",
            "grammask_us",
            "GB/s",
            "%copy",
            "xgrammar_us",
            "%copy",
            "xgr/gm",
            "masked_fill_us"
        );
        let (mut compared, mut not_slower) = (0, 0);
        for r in &results {
            let gbs = r.bytes / (r.us * 1e-6) / 1e9;
            let other = |imp: &str| -> Option<f64> {
                torch_results
                    .as_ref()
                    .and_then(|t| t.get(&(imp.to_string(), r.cell.clone())).copied().flatten())
            };
            let fmt =
                |v: Option<f64>, prec: usize| v.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"));
            let xgr = other("xgrammar");
            let xgr_pct = xgr.map(|x| 100.0 * r.bytes / (x * 1e-6) / 1e9 / copy_bw);
            let ratio = xgr.map(|x| x / r.us);
            if let Some(x) = xgr {
                compared += 1;
                if r.us <= x {
                    not_slower += 1;
                }
            }
            println!(
                "{:>7} {:>5} {:>6} {:>6} | {:>11.2} {:>7.0} {:>5.0}% | {:>11} {:>5}% {:>7} | {:>14}{}",
                r.cell.pattern,
                r.cell.dtype,
                r.cell.batch,
                r.cell.rows,
                r.us,
                gbs,
                100.0 * gbs / copy_bw,
                fmt(xgr, 2),
                fmt(xgr_pct, 0),
                fmt(ratio, 2),
                fmt(other("masked_fill"), 2),
                if ratio.is_some_and(|q| q < 1.0) { "  <- grammask slower" } else { "" }
            );
        }
        if compared > 0 {
            println!("# grammask at most XGrammar's time in {not_slower} of {compared} cells");
        } else if o.torch {
            println!("# no XGrammar figures (not installed, or the PyTorch script failed)");
        }
        Ok(())
    }

    /// What every timed run shares.
    struct Env<'a> {
        o: &'a Opts,
        stream: &'a Arc<CudaStream>,
        kernel: &'a CudaBitmaskKernel,
        spin: &'a dyn Fn(&Arc<CudaStream>) -> Result<(), BitmaskError>,
        new_event: &'a dyn Fn() -> Result<CudaEvent, BitmaskError>,
    }

    impl Env<'_> {
        /// Median seconds of one apply, each run behind the spin kernel.
        fn time<T: grammask_gpu::LogitElem>(
            &self,
            logits: &mut CudaSlice<T>,
            layout: LogitsLayout,
            mask: &CudaSlice<u32>,
            ml: MaskLayout,
            idx: Option<&CudaSlice<i32>>,
            flush: &mut Option<CudaSlice<u8>>,
        ) -> Result<f64, BitmaskError> {
            let stream = self.stream;
            let view = idx.map(|i| i.slice(..));
            let apply = |logits: &mut CudaSlice<T>| {
                self.kernel.apply::<T, u32, _, _>(
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
            let mut events = Vec::with_capacity(64);
            let mut times = Vec::with_capacity(self.o.runs);
            for _ in 0..self.o.runs {
                if let Some(f) = flush.as_mut() {
                    stream.memset_zeros(f).map_err(e("memset"))?;
                }
                (self.spin)(stream)?;
                let (a, b) = ((self.new_event)()?, (self.new_event)()?);
                a.record(stream).map_err(e("record"))?;
                apply(logits)?;
                b.record(stream).map_err(e("record"))?;
                events.push((a, b));
                // Read back in batches: the host stays ahead of the device (each
                // run waits behind its spin) without holding thousands of events.
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
    }

    /// Runs `scripts/bench_torch.py` with the same shapes and protocol; its
    /// results (XGrammar, masked_fill) by cell, and its other output lines.
    fn run_torch(o: &Opts, patterns: &[String], dtypes: &[DType]) -> Option<(TorchResults, Vec<String>)> {
        // The binary may run on another machine than the one it was built on (the
        // GPU machine gets prebuilt binaries): $BENCH_TORCH_SCRIPT, else the source
        // tree it was built from, else the script relative to the working directory.
        let script = std::env::var("BENCH_TORCH_SCRIPT").ok().unwrap_or_else(|| {
            [concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench_torch.py"), "gpu/scripts/bench_torch.py"]
                .into_iter()
                .find(|p| std::path::Path::new(p).exists())
                .unwrap_or("scripts/bench_torch.py")
                .to_string()
        });
        let batches: Vec<String> = o.batches.iter().map(|b| b.to_string()).collect();
        let dtypes: Vec<&str> = dtypes.iter().map(|d| d.name()).collect();
        let mut cmd =
            std::process::Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()));
        cmd.arg(&script)
            .args(["--device", "cuda", "--batches", &batches.join(","), "--vocab", &o.vocab.to_string()])
            .args([
                "--dtypes",
                &dtypes.join(","),
                "--pattern",
                &patterns.join(","),
                "--runs",
                &o.runs.to_string(),
            ])
            .args(["--spin-us", &o.spin_us.to_string(), "--format", "tsv"])
            .args(["--xgrammar-backend", &o.xgrammar_backend])
            .stderr(std::process::Stdio::inherit());
        if o.flush_l2 {
            cmd.arg("--flush-l2");
        }
        match cmd.output() {
            Ok(out) if out.status.success() => {
                Some(parse_torch_output(&String::from_utf8_lossy(&out.stdout)))
            }
            Ok(out) => {
                println!("# PyTorch comparison failed ({})", out.status);
                None
            }
            Err(err) => {
                println!("# PyTorch comparison skipped: {err}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_output_is_parsed() {
        let out = "# PyTorch 2.9\nRESULT\txgrammar\trandom\tbf16\t16\t8\t10.5\nRESULT\tmasked_fill\tones\tf32\t1\t1\tfailed\nnoise";
        let (r, other) = parse_torch_output(out);
        let cell = Cell { pattern: "random".into(), dtype: "bf16".into(), batch: 16, rows: 8 };
        assert_eq!(r.get(&("xgrammar".to_string(), cell)), Some(&Some(10.5)));
        let cell = Cell { pattern: "ones".into(), dtype: "f32".into(), batch: 1, rows: 1 };
        assert_eq!(r.get(&("masked_fill".to_string(), cell)), Some(&None));
        assert_eq!(other, vec!["# PyTorch 2.9".to_string(), "noise".to_string()]);
    }

    #[test]
    fn patterns_have_the_stated_density() {
        let share = |p: &str| {
            let m = make_mask(4096, p, 7);
            m.iter().map(|w| w.count_ones() as f64).sum::<f64>() / (32.0 * m.len() as f64)
        };
        assert!((share("random") - 0.5).abs() < 0.02);
        assert!((share("sparse") - 0.01).abs() < 0.005);
        assert!((share("dense") - 0.99).abs() < 0.005);
        assert_eq!(share("ones"), 1.0);
    }
}
