//! The engines under test: the reference decode loop, the router over HTTP, mistral.rs in
//! process; and [`broken`] engines that misbehave on purpose (the suite's own tests).

pub mod broken;
pub mod mistralrs;
pub mod reference;
pub mod router;

use grammask_router::server::LoadedTokenizer;

/// The tokenizer every built-in engine runs on: Qwen3's, embedded in the router (so the
/// suite needs no download), whose chat template selects the `qwen_3` tool preset.
pub fn tokenizer() -> Result<LoadedTokenizer, String> {
    LoadedTokenizer::embedded()
}

/// Tokens to push up on random models so that their documents end: those holding a byte
/// that closes a string, object or array, and the stop tokens.
pub fn closers(tok: &LoadedTokenizer) -> Vec<u32> {
    let info = &tok.info;
    (0..info.tokenizer_size() as u32)
        .filter(|&id| {
            info.stop_tokens().contains(&id)
                || (!info.is_special(id) && info.token_bytes(id).iter().any(|c| b"\"}]".contains(c)))
        })
        .collect()
}

/// The tags of the corpus's tool-calling presets (`qwen_3`, `hermes`).
const TAGS: [&str; 4] = ["<think>", "</think>", "<tool_call>", "</tool_call>"];

/// The tokens that are whole tags of the corpus's tool-calling presets (`<tool_call>`,
/// `</think>`: one token each in Qwen3's vocabulary), pushed up harder so that reasoning
/// blocks and calls open and close.
pub fn tags(tok: &LoadedTokenizer) -> Vec<u32> {
    let info = &tok.info;
    (0..info.tokenizer_size() as u32)
        .filter(|&id| TAGS.iter().any(|t| info.token_bytes(id) == t.as_bytes()))
        .collect()
}

/// How much the closers are pushed up: past the base logits (±4), below the spikes (8+).
pub const CLOSER_BIAS: f32 = 6.0;
/// How much the tags are pushed up: past the spikes (up to 11.75) and the closers.
pub const TAG_BIAS: f32 = 14.0;

/// The simulated model of `seed` over `tok`, with the closers and tags pushed up.
pub fn simulated(
    tok: &LoadedTokenizer,
    seed: u64,
    forward: std::time::Duration,
) -> grammask_router::model::SimulatedModel {
    use grammask_router::model::{ForwardTime, SimulatedModel};
    SimulatedModel::new(tok.info.vocab_size(), seed, ForwardTime::Sleep(forward))
        .with_boost(closers(tok), CLOSER_BIAS)
        .with_boost(tags(tok), TAG_BIAS)
}

/// The special tokens' texts: an output's text must hold none of them.
pub fn special_texts(info: &grammask::TokenizerInfo) -> Vec<String> {
    (0..info.tokenizer_size() as u32)
        .filter(|&id| info.is_special(id))
        .map(|id| String::from_utf8_lossy(info.token_bytes(id)).into_owned())
        .filter(|t| t.len() > 1)
        .collect()
}
