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
        }
    }
}
