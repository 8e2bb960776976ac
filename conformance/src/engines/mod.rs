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

/// The bytes that close what a random model writes: a string, an object, an array.
/// (`<`, for the XML-like tags of tool formats' arguments, was tried: it ends those
/// outputs but fills JSON strings with `<`, and more JSON outputs run into the limit.)
pub const CLOSING_BYTES: &[u8] = b"\"}]";

/// Tokens to push up on random models so that their documents end: those holding one of
/// [`CLOSING_BYTES`], and the stop tokens.
pub fn closers(tok: &LoadedTokenizer) -> Vec<u32> {
    let info = &tok.info;
    (0..info.tokenizer_size() as u32)
        .filter(|&id| {
            info.stop_tokens().contains(&id)
                || (!info.is_special(id) && info.token_bytes(id).iter().any(|c| CLOSING_BYTES.contains(c)))
        })
        .collect()
}

/// The ids of `info`'s vocabulary, special tokens left out, whose bytes `keep` takes.
fn ordinary_ids(info: &grammask::TokenizerInfo, keep: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    (0..info.tokenizer_size() as u32)
        .filter(|&id| !info.is_special(id) && keep(info.token_bytes(id)))
        .collect()
}

/// Tokens made of whitespace alone: sunk as an output grows. Where a grammar allows
/// whitespace or a marker (between a tool format's XML elements, between JSON members), a
/// random model picks whitespace most of the time — Qwen3's vocabulary holds hundreds of
/// runs of spaces, tabs and newlines against one or two `<` — and pushing closers up does
/// not help where no closer is allowed, so such outputs ran into the limit.
pub fn blank_ids(info: &grammask::TokenizerInfo) -> Vec<u32> {
    ordinary_ids(info, |b| !b.is_empty() && b.iter().all(u8::is_ascii_whitespace))
}

/// Tokens that start with `<`, neither one of the [`tags`] (which have their own push) nor
/// a closer: ramped up as closers are, so that free text and whitespace give way to a tool
/// format's next tag (`<|tool_call>`, `<｜DSML｜…`, `<parameter=…`), which a random model
/// otherwise spells out by chance alone. Only ramped, not boosted from the first token: a
/// `<` boosted from the start filled JSON strings (see [`CLOSING_BYTES`]); ramped, it stays
/// below the closers there. A token that also closes (`<>("`) is ramped as a closer
/// already: twice ramped, it outran the stop tokens and filled free text.
pub fn opener_ids(info: &grammask::TokenizerInfo) -> Vec<u32> {
    ordinary_ids(info, |b| {
        b.first() == Some(&b'<')
            && !b.iter().any(|c| CLOSING_BYTES.contains(c))
            && !TAGS.iter().any(|t| b == t.as_bytes())
    })
}

/// The tags of the corpus's tool-calling presets (`qwen_3`, `hermes`).
const TAGS: [&str; 4] = ["<think>", "</think>", "<tool_call>", "</tool_call>"];

/// The tokens that are whole tags of the corpus's tool-calling presets (`<tool_call>`,
/// `</think>`: one token each in Qwen3's vocabulary), pushed up harder so that reasoning
/// blocks and calls open and close.
pub fn tags(tok: &LoadedTokenizer) -> Vec<u32> {
    tag_ids(&tok.info)
}

/// [`tags`] of a vocabulary.
pub fn tag_ids(info: &grammask::TokenizerInfo) -> Vec<u32> {
    (0..info.tokenizer_size() as u32)
        .filter(|&id| TAGS.iter().any(|t| info.token_bytes(id) == t.as_bytes()))
        .collect()
}

/// How much the closers are pushed up: past the base logits (±4), below the spikes (8+).
pub const CLOSER_BIAS: f32 = 6.0;
/// How much the tags are pushed up: past the spikes (up to 11.75) and the closers.
pub const TAG_BIAS: f32 = 14.0;

/// Output tokens after which the closing ramp starts.
pub const RAMP_AFTER: u32 = 24;
/// The closers' ramp per output token past [`RAMP_AFTER`].
pub const CLOSER_RAMP: f32 = 0.25;
/// The stop tokens' ramp per output token past [`RAMP_AFTER`]: steeper than the closers'
/// (a few stop tokens against thousands of closers), so that free text ends too.
pub const STOP_RAMP: f32 = 0.5;
/// How much whitespace-only tokens are sunk per output token past [`RAMP_AFTER`].
pub const BLANK_RAMP: f32 = 0.25;

/// Whether a random model is pushed towards ending its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bias {
    /// Closers and tags pushed up, and the closers and stop tokens more as the output
    /// grows: nearly every output ends, so it is judged whole.
    #[default]
    Closing,
    /// The model as its seed makes it: long outputs run into `max_new_tokens` and are
    /// judged as prefixes.
    None,
}

/// The simulated model of `seed` over `tok`: with [`Bias::Closing`], the closers and tags
/// pushed up and the closing ramp on.
pub fn simulated(
    tok: &LoadedTokenizer,
    seed: u64,
    forward: std::time::Duration,
    bias: Bias,
) -> grammask_router::model::SimulatedModel {
    use grammask_router::model::{ForwardTime, SimulatedModel};
    let model = SimulatedModel::new(tok.info.vocab_size(), seed, ForwardTime::Sleep(forward));
    match bias {
        Bias::None => model,
        Bias::Closing => model
            .with_boost(closers(tok), CLOSER_BIAS)
            .with_boost(tags(tok), TAG_BIAS)
            .with_closing_ramp(closers(tok), RAMP_AFTER, CLOSER_RAMP)
            .with_closing_ramp(tok.info.stop_tokens().to_vec(), RAMP_AFTER, STOP_RAMP - CLOSER_RAMP)
            .with_closing_ramp(opener_ids(&tok.info), RAMP_AFTER, CLOSER_RAMP)
            .with_closing_ramp(blank_ids(&tok.info), RAMP_AFTER, -BLANK_RAMP),
    }
}

/// The special tokens' texts: an output's text must hold none of them.
pub fn special_texts(info: &grammask::TokenizerInfo) -> Vec<String> {
    (0..info.tokenizer_size() as u32)
        .filter(|&id| info.is_special(id))
        .map(|id| String::from_utf8_lossy(info.token_bytes(id)).into_owned())
        .filter(|t| t.len() > 1)
        .collect()
}
