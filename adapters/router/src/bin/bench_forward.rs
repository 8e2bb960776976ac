//! The GGUF forward's cost by shape: a decode step at batch 1 / 8 / 32 (the shapes in
//! turn, a block of steps each per round, with each round's ratio to the first shape), a
//! batch-1 row verifying a draft tree of 4 / 8 / 16 / 32 nodes, against the forward the router used
//! before (candle-transformers' quantized Llama, rows one after another), with the weights
//! as the file has them (Q4_1 / Q8_0 products) and dequantized to `f32`. Medians and p90
//! over `--repeats` steps after a warm-up.
//!
//! ```text
//! cargo run --release -p grammask-router --bin bench_forward -- --gguf .models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
//! ```

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use clap::Parser;
use grammask::matcher::DraftTree;
use grammask_router::model::{ForwardRow, GgufModel, Model, WeightFormat};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
struct Args {
    /// The GGUF model.
    #[arg(long)]
    gguf: std::path::PathBuf,
    /// Timed steps per shape (decode: rounded up to whole rounds of three).
    #[arg(long, default_value_t = 15)]
    repeats: usize,
    /// Prompt tokens per sequence (prefilled before timing).
    #[arg(long, default_value_t = 64)]
    prompt: usize,
    /// Also time the forward with weights dequantized to f32.
    #[arg(long)]
    f32: bool,
    /// Leave out candle-transformers' forward.
    #[arg(long)]
    no_candle: bool,
    /// The decode batches to time (the first is the ratios' base; `--batches 1` for the
    /// draft trees alone).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    batches: Vec<usize>,
    /// Leave out the draft trees.
    #[arg(long)]
    no_trees: bool,
}

fn stats(mut t: Vec<Duration>) -> (f64, f64) {
    t.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(t[t.len() / 2]), ms(t[(t.len() * 9 / 10).min(t.len() - 1)]))
}

fn prompt(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 200 + (i * 97 + seed * 31) % 20_000).collect()
}

fn ours(a: &Args, format: WeightFormat) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let mut m = GgufModel::load_as(&a.gguf, format)?;
    println!(
        "{format:?}: loaded in {:.1} s, weights {:.1} MB",
        t0.elapsed().as_secs_f64(),
        m.weight_bytes() as f64 / 1e6
    );
    // Every shape's sequences prefilled first, then the shapes stepped in turn, a block of
    // steps each per round (two untimed, so that a block starts with the shape's own data
    // in the caches, then three timed): a shape's steps and the base's see the same machine
    // (a neighbour's burst on this shared VM moves both), and each round's ratio of the
    // blocks' medians is kept.
    const WARM: usize = 2;
    const TIMED: usize = 3;
    let shapes: Vec<Vec<u64>> = a
        .batches
        .iter()
        .enumerate()
        .map(|(s, &b)| (0..b as u64).map(|i| (s as u64 + 1) * 1000 + i).collect())
        .collect();
    for ids in &shapes {
        let prompts: Vec<Vec<u32>> = ids.iter().map(|&i| prompt(a.prompt, i as u32)).collect();
        let rows: Vec<ForwardRow<'_>> =
            ids.iter().zip(&prompts).map(|(&i, p)| ForwardRow::new(i, p)).collect();
        m.forward(&rows)?;
    }
    let mut times = vec![Vec::new(); shapes.len()];
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    let mut step = 0u32;
    for _ in 0..a.repeats.div_ceil(TIMED).max(1) {
        let mut medians = Vec::new();
        for (s, ids) in shapes.iter().enumerate() {
            let mut block = Vec::new();
            for k in 0..WARM + TIMED {
                step += 1;
                let toks: Vec<[u32; 1]> =
                    ids.iter().map(|&i| [(300 + i as u32 * 7 + step) % 20_000]).collect();
                let rows: Vec<ForwardRow<'_>> =
                    ids.iter().zip(&toks).map(|(&i, t)| ForwardRow::new(i, t)).collect();
                let t = Instant::now();
                m.forward(&rows)?;
                if k >= WARM {
                    block.push(t.elapsed());
                }
            }
            times[s].extend(&block);
            medians.push(stats(block).0);
        }
        for (s, r) in rounds.iter_mut().enumerate() {
            r.push(medians[s] / medians[0]);
        }
    }
    let mut base = None;
    for (s, &batch) in a.batches.iter().enumerate() {
        let ratios = &mut rounds[s];
        ratios.sort_by(f64::total_cmp);
        let (p50, p90) = stats(times[s].clone());
        base.get_or_insert(p50);
        println!(
            "{format:?}: decode batch {batch:>2}: p50 {p50:7.2} ms  p90 {p90:7.2} ms  ({:.2}× batch {}, median of the rounds' ratios)",
            ratios[ratios.len() / 2],
            a.batches[0]
        );
    }
    for ids in shapes {
        for i in ids {
            m.release(i);
        }
    }
    let p = prompt(a.prompt, 99);
    let trees: &[usize] = if a.no_trees { &[] } else { &[4, 8, 16, 32] };
    for &nodes in trees {
        m.release(7);
        m.forward(&[ForwardRow::new(7, &p)])?;
        // A chain of half the nodes and siblings for the rest.
        let mut tokens = vec![-1i64];
        let mut parents = vec![-1i64];
        for v in 1..=nodes {
            tokens.push(400 + v as i64);
            parents.push(if v <= nodes / 2 { v as i64 - 1 } else { (v - nodes / 2 - 1) as i64 });
        }
        let tree = DraftTree::from_parents(&tokens, &parents)?;
        let mut times = Vec::new();
        for k in 0..a.repeats + 2 {
            let t = Instant::now();
            m.forward(&[ForwardRow { draft: Some(&tree), ..ForwardRow::new(7, &[500 + k as u32]) }])?;
            if k >= 2 {
                times.push(t.elapsed());
            }
        }
        let (p50, p90) = stats(times);
        println!(
            "{format:?}: batch 1 + tree of {nodes:>2} nodes: p50 {p50:7.2} ms  p90 {p90:7.2} ms  ({:.2}× a decode step)",
            p50 / base.unwrap_or(p50)
        );
    }
    Ok(())
}

fn candle(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    use candle_transformers::models::quantized_llama::ModelWeights;
    let mut file = std::fs::File::open(&a.gguf)?;
    let content = gguf_file::Content::read(&mut file)?;
    let weights = ModelWeights::from_gguf(content, &mut file, &Device::Cpu)?;
    let mut base = None;
    for batch in [1usize, 8, 32] {
        // One model clone per sequence (shared weights, own cache), rows one by one: the
        // router's forward before its own.
        let mut seqs: Vec<ModelWeights> = (0..batch).map(|_| weights.clone()).collect();
        for (i, s) in seqs.iter_mut().enumerate() {
            let x = Tensor::new(prompt(a.prompt, i as u32).as_slice(), &Device::Cpu)?.unsqueeze(0)?;
            s.forward(&x, 0)?;
        }
        let mut times = Vec::new();
        for k in 0..a.repeats + 2 {
            let t = Instant::now();
            for (i, s) in seqs.iter_mut().enumerate() {
                let x =
                    Tensor::new(&[(300 + i as u32 * 7 + k as u32) % 20_000], &Device::Cpu)?.unsqueeze(0)?;
                s.forward(&x, a.prompt + k)?;
            }
            if k >= 2 {
                times.push(t.elapsed());
            }
        }
        let (p50, p90) = stats(times);
        let b1 = *base.get_or_insert(p50);
        println!(
            "candle: decode batch {batch:>2}: p50 {p50:7.2} ms  p90 {p90:7.2} ms  ({:.2}× batch 1)",
            p50 / b1
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    println!("{} threads", rayon::current_num_threads());
    if !a.no_candle {
        candle(&a)?;
    }
    ours(&a, WeightFormat::Quantized)?;
    if a.f32 {
        ours(&a, WeightFormat::F32)?;
    }
    Ok(())
}
