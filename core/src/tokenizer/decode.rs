//! Decoding token strings to the bytes they stand for.

/// How a tokenizer writes token bytes as strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VocabKind {
    /// GPT-2 byte-level BPE (Llama-3, Qwen): each byte is mapped to a printable character.
    ByteLevel,
    /// SentencePiece style (Llama-2): `▁` stands for a space and `<0xHH>` tokens for raw bytes.
    ByteFallback,
    /// Token strings are the text itself.
    Raw,
}

impl VocabKind {
    /// Detects the kind from a serialized `decoder` section of `tokenizer.json`.
    pub fn from_decoder_json(decoder: &serde_json::Value) -> VocabKind {
        let ty = decoder.get("type").and_then(|t| t.as_str()).unwrap_or("");
        match ty {
            "ByteLevel" => VocabKind::ByteLevel,
            "ByteFallback" | "Metaspace" => VocabKind::ByteFallback,
            "Sequence" => {
                let parts = decoder.get("decoders").and_then(|d| d.as_array());
                let kinds = parts.into_iter().flatten().map(VocabKind::from_decoder_json);
                let kinds: Vec<_> = kinds.collect();
                if kinds.contains(&VocabKind::ByteLevel) {
                    VocabKind::ByteLevel
                } else if kinds.contains(&VocabKind::ByteFallback)
                    || parts.into_iter().flatten().any(|p| {
                        p.get("pattern").and_then(|x| x.get("String")).and_then(|s| s.as_str())
                            == Some("\u{2581}")
                    })
                {
                    VocabKind::ByteFallback
                } else {
                    VocabKind::Raw
                }
            }
            _ => VocabKind::Raw,
        }
    }

    /// The bytes a token string stands for.
    ///
    /// ```
    /// use grammask::VocabKind;
    /// assert_eq!(VocabKind::ByteLevel.decode("Ġhello"), b" hello");
    /// assert_eq!(VocabKind::ByteFallback.decode("▁hi"), b" hi");
    /// assert_eq!(VocabKind::ByteFallback.decode("<0x0A>"), b"\n");
    /// ```
    pub fn decode(self, token: &str) -> Vec<u8> {
        match self {
            VocabKind::Raw => token.as_bytes().to_vec(),
            VocabKind::ByteFallback => {
                if let Some(b) = parse_byte_token(token) {
                    return vec![b];
                }
                token.replace('\u{2581}', " ").into_bytes()
            }
            VocabKind::ByteLevel => {
                let mut out = Vec::with_capacity(token.len());
                for c in token.chars() {
                    match unicode_to_byte(c) {
                        Some(b) => out.push(b),
                        // Not a byte-level token after all (e.g. a plain-text added token).
                        None => return token.as_bytes().to_vec(),
                    }
                }
                out
            }
        }
    }
}

/// `<0xHH>` → `HH`.
fn parse_byte_token(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Inverse of GPT-2's `bytes_to_unicode`: printable Latin-1 bytes map to themselves, the
/// other 68 bytes to U+0100.. in order. Table-driven: this runs for every character of
/// every token at load time.
fn unicode_to_byte(c: char) -> Option<u8> {
    const fn printable(b: u32) -> bool {
        (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
    }
    /// `TABLE[cp]` for code points below 0x144: the byte plus one, or 0 for none.
    const TABLE: [u16; 0x144] = {
        let mut t = [0u16; 0x144];
        let mut b = 0u32;
        let mut extra = 0u32;
        while b < 256 {
            if printable(b) {
                t[b as usize] = b as u16 + 1;
            } else {
                t[(0x100 + extra) as usize] = b as u16 + 1;
                extra += 1;
            }
            b += 1;
        }
        t
    };
    match TABLE.get(c as usize) {
        Some(&v) if v > 0 => Some((v - 1) as u8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_map_is_a_bijection() {
        let mut seen = [false; 256];
        for cp in 0x21..0x200u32 {
            if let Some(b) = unicode_to_byte(char::from_u32(cp).unwrap()) {
                assert!(!seen[b as usize], "byte {b} mapped twice");
                seen[b as usize] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(unicode_to_byte('Ġ'), Some(b' '));
        assert_eq!(unicode_to_byte('Ċ'), Some(b'\n'));
    }
}
