//! Shared by the adapter's tests: tiny random-weight Llama models written on the fly, the
//! MaskBench corpus, and a recorder of the contexts mistral.rs hands processors.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

include!("../../../../scripts/test_data_dir.rs");

/// The test data (see `scripts/test_data_dir.rs`); panics with the way to get it.
pub fn data_dir() -> PathBuf {
    test_data_dir().unwrap_or_else(|e| panic!("{e}"))
}

#[allow(unused_imports)]
pub use grammask_mistralrs::tiny::{Recorder, TinyLlama};

/// Writes a tiny random Llama with the tokenizer files of
/// `../shared/data/tokenizers/<tokenizer>` into `dir`, and returns `dir`.
pub fn write_tiny_llama(dir: &Path, tokenizer: &str, m: &TinyLlama) -> PathBuf {
    let src = data_dir().join("tokenizers").join(tokenizer);
    let json = std::fs::read(src.join("tokenizer.json")).unwrap();
    let config = std::fs::read(src.join("tokenizer_config.json")).unwrap();
    grammask_mistralrs::tiny::write_tiny_llama(dir, &json, &config, m).unwrap()
}

/// A scratch directory under the target folder, unique to this test run.
pub fn scratch(name: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let d = base.join(format!("grammask-mistralrs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// MaskBench files of the dev splits, every `step`-th one of each split, sorted by name.
pub fn maskbench_sample(step: usize) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for split in ["Github_easy", "Github_medium", "Glaiveai2K", "Kubernetes"] {
        let dir = data_dir().join("jsonschemabench/dev").join(split);
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.iter().step_by(step) {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            out.push((name, v["schema"].clone()));
        }
    }
    out
}
