//! Sampling a row under its mask against sampling it whole: what masking folded into
//! sampling costs per row (the router's "apply"), by mask density, on a row the size of
//! Llama 3's vocabulary (random logits, fixed seed).
//!
//! ```sh
//! cargo run --release -p grammask-router --bin bench_sample -- --vocab 128256 --repeats 7
//! ```
//! Prints, per sampling mode (greedy, with its log-probability and without — OpenAI's
//! default; temperature 1, the Gumbel-max draw; temperature 1
//! with `top_p` 0.9, the general path) and mask density, the median µs per call of both
//! and their difference. One thread: the router samples rows in parallel, each row alone.
//! With `--cross-thread`, a second table: each masked draw after a round trip to a helper
//! thread on the other CPU, the mask written last by the drawing thread or by the helper.

use clap::Parser;
use grammask_router::sampling::{Sampler, SamplingParams};
use std::time::Instant;

#[derive(Debug, Parser)]
struct Args {
    /// Tokens per row.
    #[arg(long, default_value_t = 128_256)]
    vocab: usize,
    /// Calls per timing.
    #[arg(long, default_value_t = 300)]
    calls: usize,
    /// Timings per figure (the median is printed).
    #[arg(long, default_value_t = 7)]
    repeats: usize,
    /// Mask densities (fractions of the vocabulary allowed).
    #[arg(long, value_delimiter = ',', default_value = "1,0.99,0.9,0.5,0.1,0.001")]
    densities: Vec<f64>,
    /// Only the modes whose name starts with this (`greedy`, `temperature`).
    #[arg(long)]
    mode: Option<String>,
    /// Also time each masked draw right after its mask was written again, by this thread
    /// and by another one (as the router's fill pool writes masks its step then reads):
    /// what bringing a mask from another core's cache costs a draw.
    #[arg(long)]
    cross_thread: bool,
}

/// A mask sent to the helper thread, and whether it writes it before sending it back.
type Trip = (Vec<u32>, bool);

/// The median µs of one masked draw right after a round trip to the helper thread (not
/// timed), before which the mask was written again by this thread or (`there`) by the
/// helper: both draws follow the same wake-up, and only who wrote the mask last differs
/// (the mask travels by channel, its lines left in the writer's cache).
fn rewritten_us(
    args: &Args,
    sampler: &mut Sampler,
    row: &mut [f32],
    mut mask: Vec<u32>,
    (to, from): &(std::sync::mpsc::Sender<Trip>, std::sync::mpsc::Receiver<Trip>),
    there: bool,
) -> (f64, Vec<u32>) {
    let mut t = Vec::with_capacity(args.calls * args.repeats.max(1));
    for _ in 0..args.calls * args.repeats.max(1) {
        if !there {
            rewrite(&mut mask);
        }
        if let Err(e) = to.send((mask, there)) {
            mask = e.0 .0;
            break;
        }
        match from.recv() {
            Ok((m, _)) => mask = m,
            // (The helper is gone, and the mask with it.)
            Err(_) => return (f64::NAN, Vec::new()),
        }
        let t0 = Instant::now();
        std::hint::black_box(sampler.sample_masked(row, &mask).ok());
        t.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(f64::total_cmp);
    (t.get(t.len() / 2).copied().unwrap_or(f64::NAN), mask)
}

/// Keeps the calling thread on CPU `cpu` (Linux, Android; elsewhere, and where the call
/// fails, a note on stderr).
fn pin(cpu: usize) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
            eprintln!("bench_sample: cannot pin a thread to CPU {cpu}: {e}");
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    eprintln!("bench_sample: threads not pinned to CPU {cpu} (Linux only)");
}

/// Writes every word of `mask` again (the same values), so that its lines are this
/// thread's, modified.
fn rewrite(mask: &mut [u32]) {
    for w in mask.iter_mut() {
        // SAFETY: `w` is a valid, aligned, exclusive reference.
        unsafe { std::ptr::write_volatile(w, *w) };
    }
}

/// SplitMix64: reproducible logits and masks without a dependency.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn median_us(args: &Args, mut call: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..args.repeats.max(1))
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..args.calls {
                call();
            }
            t0.elapsed().as_secs_f64() * 1e6 / args.calls as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let args = Args::parse();
    let mut s = 7u64;
    // Uniform in [-5, 5): no spread, the sampler's worst case (a model's few likely
    // tokens let the Gumbel draw skip most of the row).
    let logits: Vec<f32> = (0..args.vocab).map(|_| (next(&mut s) % 10_000) as f32 / 1_000.0 - 5.0).collect();
    let words = args.vocab.div_ceil(32);
    // The thread that rewrites masks for `--cross-thread`.
    let other = args.cross_thread.then(|| {
        let (to_helper, helper_in) = std::sync::mpsc::channel::<Trip>();
        let (helper_out, from_helper) = std::sync::mpsc::channel::<Trip>();
        // Each thread on a CPU of its own where the OS lets a program say so, so that the
        // helper's writes sit in another core's cache (not the one the step thread slept on).
        pin(0);
        std::thread::spawn(move || {
            pin(1);
            for (mut m, write) in helper_in {
                if write {
                    rewrite(&mut m);
                }
                if helper_out.send((m, write)).is_err() {
                    break;
                }
            }
        });
        (to_helper, from_helper)
    });
    let mut cross = Vec::new();
    println!("| mode | mask allows | whole row µs | under the mask µs | difference µs |");
    println!("|---|---|---|---|---|");
    let modes: [(&str, SamplingParams); 4] = [
        ("greedy", SamplingParams::default()),
        ("greedy, no log-probabilities", SamplingParams { logprobs: false, ..SamplingParams::default() }),
        ("temperature 1", SamplingParams { do_sample: true, temperature: 1.0, ..SamplingParams::default() }),
        (
            "temperature 1, top_p 0.9",
            SamplingParams {
                do_sample: true,
                temperature: 1.0,
                top_p: Some(0.9),
                ..SamplingParams::default()
            },
        ),
    ];
    for (name, params) in modes {
        if args.mode.as_deref().is_some_and(|m| !name.starts_with(m)) {
            continue;
        }
        for &density in &args.densities {
            let mut mask = vec![0u32; words];
            let mut allowed = 0;
            for t in 0..args.vocab {
                if (next(&mut s) % 1_000_000) as f64 / 1e6 < density {
                    mask[t / 32] |= 1 << (t % 32);
                    allowed += 1;
                }
            }
            let mut row = logits.clone();
            let mut whole = Sampler::new(params.clone());
            let mut masked = Sampler::new(params.clone());
            let a = median_us(&args, || {
                std::hint::black_box(whole.sample(&mut row).ok());
            });
            let b = median_us(&args, || {
                std::hint::black_box(masked.sample_masked(&mut row, &mask).ok());
            });
            println!(
                "| {name} | {allowed} ({:.1} %) | {a:.1} | {b:.1} | {:+.1} |",
                100.0 * allowed as f64 / args.vocab as f64,
                b - a
            );
            if let Some(other) = &other {
                let (here, m) = rewritten_us(&args, &mut masked, &mut row, mask, other, false);
                let (there, _) = rewritten_us(&args, &mut masked, &mut row, m, other, true);
                cross.push(format!(
                    "| {name} | {allowed} ({:.1} %) | {here:.2} | {there:.2} | {:+.2} |",
                    100.0 * allowed as f64 / args.vocab as f64,
                    there - here
                ));
            }
        }
    }
    if !cross.is_empty() {
        println!();
        println!("| mode | mask allows | mask written here µs | mask written by another thread µs | difference µs |");
        println!("|---|---|---|---|---|");
        for line in cross {
            println!("{line}");
        }
    }
}
