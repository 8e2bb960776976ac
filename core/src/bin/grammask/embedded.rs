//! The embedded default tokenizer: Qwen3's (Apache-2.0), gzip-compressed.

use flate2::read::GzDecoder;
use std::io::Read;

const TOKENIZER_GZ: &[u8] = include_bytes!("../../../assets/qwen3-tokenizer.json.gz");
const CONFIG: &[u8] = include_bytes!("../../../assets/qwen3-tokenizer_config.json");

/// `(tokenizer.json bytes, tokenizer_config.json bytes)`.
pub fn qwen3() -> Result<(Vec<u8>, &'static [u8]), String> {
    let mut json = Vec::new();
    GzDecoder::new(TOKENIZER_GZ).read_to_end(&mut json).map_err(|e| format!("embedded tokenizer: {e}"))?;
    Ok((json, CONFIG))
}
