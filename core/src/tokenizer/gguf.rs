//! The tokenizer embedded in a GGUF model file (llama.cpp's format).
//!
//! A GGUF file starts with key/value metadata; the vocabulary lives under
//! `tokenizer.ggml.*`: the model kind (`gpt2` byte-level BPE or `llama` SentencePiece), every
//! token's string, each token's type (normal, unknown, control, user-defined, unused, byte)
//! and the BOS/EOS ids. Only the metadata is read, never the tensors, so a 90 MB model costs a
//! few megabytes of reading.
//!
//! The reader trusts nothing in the file: every count and length is checked against the bytes
//! that remain before anything is allocated, so a truncated or hostile file is a typed error
//! ([`TokenizerError::Gguf`]) with the byte offset of the fault, never a panic or a huge allocation.

use super::TokenizerError;
use super::VocabKind;

type Result<T, E = TokenizerError> = std::result::Result<T, E>;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// GGUF token types (`tokenizer.ggml.token_type`), as llama.cpp numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufTokenType {
    /// Ordinary text.
    Normal,
    /// The unknown token.
    Unknown,
    /// Control tokens (BOS, EOS, chat-template markers): never produced by a grammar.
    Control,
    /// User-defined tokens: literal text, not encoded.
    UserDefined,
    /// Reserved, never used.
    Unused,
    /// A raw byte, written `<0xHH>`.
    Byte,
}

impl GgufTokenType {
    /// llama.cpp's codes; anything else (0, "undefined", included) is treated as a control
    /// token: never produced by a grammar, which is the safe reading of a token we cannot
    /// place.
    fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Normal,
            2 => Self::Unknown,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Control,
        }
    }
}

/// The vocabulary and chat metadata of a GGUF file.
///
/// ```no_run
/// use grammask::tokenizer::GgufTokenizer;
/// let gguf = GgufTokenizer::read("SmolLM2-135M-Instruct.Q4_K_M.gguf")?;
/// println!("{} tokens, eos {:?}", gguf.tokens().len(), gguf.eos_token_id());
/// let info = gguf.to_tokenizer_info(&Default::default())?;
/// # Ok::<(), grammask::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    model: String,
    tokens: Vec<String>,
    types: Vec<GgufTokenType>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    chat_template: Option<String>,
    architecture: Option<String>,
}

impl GgufTokenizer {
    /// Reads the metadata of a GGUF file.
    pub fn read(path: impl AsRef<Path>) -> crate::Result<Self> {
        let path = path.as_ref();
        let io = |source| TokenizerError::Io { path: path.display().to_string(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut reader = Reader { inner: BufReader::with_capacity(1 << 16, file), offset: 0, len };
        Ok(Self::parse(&mut reader)?)
    }

    /// Reads GGUF metadata from bytes (the whole file or at least its metadata section).
    pub fn from_bytes(bytes: &[u8]) -> crate::Result<Self> {
        let mut reader = Reader { inner: std::io::Cursor::new(bytes), offset: 0, len: bytes.len() as u64 };
        Ok(Self::parse(&mut reader)?)
    }

    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// `general.architecture` (e.g. `llama`), if present.
    pub fn architecture(&self) -> Option<&str> {
        self.architecture.as_deref()
    }

    /// Token strings, as stored (encoded per [`Self::vocab_kind`]).
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Each token's type.
    pub fn token_types(&self) -> &[GgufTokenType] {
        &self.types
    }

    /// `tokenizer.ggml.bos_token_id`.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos
    }

    /// `tokenizer.ggml.eos_token_id`.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos
    }

    /// `tokenizer.ggml.eot_token_id` and `eom_token_id` (end of turn / message), if present.
    pub fn turn_end_token_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.eot.into_iter().chain(self.eom)
    }

    /// `tokenizer.chat_template`, if present.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The id of a token string, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokens.iter().position(|t| t == token).and_then(|i| u32::try_from(i).ok())
    }

    /// How token strings encode bytes.
    pub fn vocab_kind(&self) -> crate::Result<VocabKind> {
        match self.model.as_str() {
            "gpt2" => Ok(VocabKind::ByteLevel),
            "llama" => Ok(VocabKind::ByteFallback),
            other => Err(crate::Error::Tokenizer(format!(
                "GGUF tokenizer model `{other}` is not supported (gpt2 and llama are)"
            ))),
        }
    }

    /// The [`TokenizerInfo`](super::TokenizerInfo): control, unknown and unused tokens are
    /// special (never allowed by a grammar); stop tokens default to the EOS id plus the
    /// end-of-turn ids, unless `options.stop_tokens` says otherwise.
    pub fn to_tokenizer_info(
        &self,
        options: &super::TokenizerOptions,
    ) -> crate::Result<super::TokenizerInfo> {
        let kind = options.kind.map_or_else(|| self.vocab_kind(), Ok)?;
        let mut bytes = Vec::with_capacity(self.tokens.len());
        let mut special = Vec::with_capacity(self.tokens.len());
        for (i, t) in self.tokens.iter().enumerate() {
            let ty = self.types.get(i).copied().unwrap_or(GgufTokenType::Normal);
            let (b, s) = match ty {
                GgufTokenType::Normal | GgufTokenType::Byte => (kind.decode(t), false),
                GgufTokenType::UserDefined => (t.as_bytes().to_vec(), false),
                GgufTokenType::Control | GgufTokenType::Unknown | GgufTokenType::Unused => {
                    (t.as_bytes().to_vec(), true)
                }
            };
            bytes.push(b);
            special.push(s);
        }
        let mut stops: Vec<u32> = self.eos.into_iter().chain(self.turn_end_token_ids()).collect();
        stops.retain(|&s| (s as usize) < self.tokens.len());
        Ok(super::TokenizerInfo::build(bytes, special, stops, kind, options)?)
    }

    fn parse<R: Read + Seek>(r: &mut Reader<R>) -> Result<Self> {
        let magic = r.bytes_fixed::<4>()?;
        if &magic != b"GGUF" {
            return Err(r.fault(0, "not a GGUF file (the first four bytes are not `GGUF`)"));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(r.fault(4, format!("GGUF version {version} is not supported (2 and 3 are)")));
        }
        let _tensors = r.u64()?;
        let kv_count = r.u64()?;
        // Each entry takes at least 8 (key length) + 4 (type) + 1 bytes.
        r.check_count(kv_count, 13, "metadata entries")?;
        let mut out = GgufTokenizer {
            model: String::new(),
            tokens: Vec::new(),
            types: Vec::new(),
            bos: None,
            eos: None,
            eot: None,
            eom: None,
            chat_template: None,
            architecture: None,
        };
        let mut have_model = false;
        let mut have_tokens = false;
        for _ in 0..kv_count {
            let key = r.string()?;
            let ty = r.u32()?;
            match key.as_str() {
                "tokenizer.ggml.model" => {
                    out.model = r.expect_string(ty, &key)?;
                    have_model = true;
                }
                "general.architecture" => out.architecture = Some(r.expect_string(ty, &key)?),
                "tokenizer.chat_template" => out.chat_template = Some(r.expect_string(ty, &key)?),
                "tokenizer.ggml.tokens" => {
                    out.tokens = r.string_array(ty, &key)?;
                    have_tokens = true;
                }
                "tokenizer.ggml.token_type" => {
                    out.types = r.int_array(ty, &key)?.into_iter().map(GgufTokenType::from_code).collect();
                }
                "tokenizer.ggml.bos_token_id" => out.bos = Some(r.expect_id(ty, &key)?),
                "tokenizer.ggml.eos_token_id" => out.eos = Some(r.expect_id(ty, &key)?),
                "tokenizer.ggml.eot_token_id" => out.eot = Some(r.expect_id(ty, &key)?),
                "tokenizer.ggml.eom_token_id" => out.eom = Some(r.expect_id(ty, &key)?),
                _ => r.skip_value(ty)?,
            }
        }
        if !have_model || !have_tokens {
            return Err(r.fault(
                r.offset,
                "the metadata has no tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens)",
            ));
        }
        if !out.types.is_empty() && out.types.len() != out.tokens.len() {
            return Err(r.fault(
                r.offset,
                format!("{} token types for {} tokens", out.types.len(), out.tokens.len()),
            ));
        }
        for (what, id) in [("bos", out.bos), ("eos", out.eos), ("eot", out.eot), ("eom", out.eom)] {
            if let Some(id) = id.filter(|&id| id as usize >= out.tokens.len()) {
                return Err(r.fault(
                    r.offset,
                    format!("{what} token id {id} is outside the {} tokens", out.tokens.len()),
                ));
            }
        }
        Ok(out)
    }
}

// GGUF value types.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

fn scalar_size(ty: u32) -> Option<u64> {
    Some(match ty {
        T_U8 | T_I8 | T_BOOL => 1,
        T_U16 | T_I16 => 2,
        T_U32 | T_I32 | T_F32 => 4,
        T_U64 | T_I64 | T_F64 => 8,
        _ => return None,
    })
}

/// A bounds-checked little-endian reader that knows its offset and the file's length.
struct Reader<R> {
    inner: R,
    offset: u64,
    len: u64,
}

impl<R: Read + Seek> Reader<R> {
    fn fault(&self, offset: u64, what: impl Into<String>) -> TokenizerError {
        TokenizerError::Gguf { offset, what: what.into() }
    }

    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.offset)
    }

    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<()> {
        if count.saturating_mul(min_size) > self.remaining() {
            return Err(self.fault(
                self.offset,
                format!("{count} {what} cannot fit in the {} bytes left", self.remaining()),
            ));
        }
        Ok(())
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let at = self.offset;
        if buf.len() as u64 > self.remaining() {
            return Err(self.fault(at, "unexpected end of file"));
        }
        self.inner.read_exact(buf).map_err(|e| self.fault(at, format!("read failed: {e}")))?;
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn bytes_fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.read_exact(&mut b)?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes_fixed()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes_fixed()?))
    }

    fn skip(&mut self, n: u64) -> Result<()> {
        let at = self.offset;
        if n > self.remaining() {
            return Err(self.fault(at, "unexpected end of file"));
        }
        // Small skips (most of them: one per merge string) read through the buffer; a seek
        // would discard it every time.
        if n <= 1 << 16 {
            let copied = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink())
                .map_err(|e| self.fault(at, format!("read failed: {e}")))?;
            if copied != n {
                return Err(self.fault(at, "unexpected end of file"));
            }
        } else {
            let n_i64 = i64::try_from(n).map_err(|_| self.fault(at, "length overflows"))?;
            self.inner
                .seek(SeekFrom::Current(n_i64))
                .map_err(|e| self.fault(at, format!("seek failed: {e}")))?;
        }
        self.offset += n;
        Ok(())
    }

    fn string(&mut self) -> Result<String> {
        let at = self.offset;
        let n = self.u64()?;
        if n > self.remaining() {
            return Err(self.fault(at, format!("a string of {n} bytes runs past the end of the file")));
        }
        let mut buf = vec![0u8; n as usize];
        self.read_exact(&mut buf)?;
        String::from_utf8(buf).map_err(|e| self.fault(at, format!("a string is not UTF-8: {e}")))
    }

    /// A scalar integer of any integer type, as i64.
    fn int(&mut self, ty: u32) -> Result<Option<i64>> {
        Ok(Some(match ty {
            T_U8 => self.bytes_fixed::<1>()?[0] as i64,
            T_I8 => self.bytes_fixed::<1>()?[0] as i8 as i64,
            T_U16 => u16::from_le_bytes(self.bytes_fixed()?) as i64,
            T_I16 => i16::from_le_bytes(self.bytes_fixed()?) as i64,
            T_U32 => self.u32()? as i64,
            T_I32 => i32::from_le_bytes(self.bytes_fixed()?) as i64,
            T_U64 => i64::try_from(self.u64()?).unwrap_or(i64::MAX),
            T_I64 => i64::from_le_bytes(self.bytes_fixed()?),
            _ => return Ok(None),
        }))
    }

    fn expect_string(&mut self, ty: u32, key: &str) -> Result<String> {
        if ty != T_STRING {
            return Err(self.fault(self.offset, format!("`{key}` has value type {ty}, not a string")));
        }
        self.string()
    }

    fn expect_id(&mut self, ty: u32, key: &str) -> Result<u32> {
        let at = self.offset;
        match self.int(ty)? {
            Some(v) => {
                u32::try_from(v).map_err(|_| self.fault(at, format!("`{key}` = {v} is not a token id")))
            }
            None => Err(self.fault(at, format!("`{key}` has value type {ty}, not an integer"))),
        }
    }

    fn array_header(&mut self, ty: u32, key: &str) -> Result<(u32, u64)> {
        if ty != T_ARRAY {
            return Err(self.fault(self.offset, format!("`{key}` has value type {ty}, not an array")));
        }
        let elem = self.u32()?;
        let count = self.u64()?;
        Ok((elem, count))
    }

    fn string_array(&mut self, ty: u32, key: &str) -> Result<Vec<String>> {
        let at = self.offset;
        let (elem, count) = self.array_header(ty, key)?;
        if elem != T_STRING {
            return Err(self.fault(at, format!("`{key}` is an array of type {elem}, not of strings")));
        }
        self.check_count(count, 8, "strings")?;
        let mut out = Vec::with_capacity(count as usize);
        for _ in 0..count {
            out.push(self.string()?);
        }
        Ok(out)
    }

    fn int_array(&mut self, ty: u32, key: &str) -> Result<Vec<i64>> {
        let at = self.offset;
        let (elem, count) = self.array_header(ty, key)?;
        let size = scalar_size(elem)
            .filter(|_| !matches!(elem, T_F32 | T_F64 | T_BOOL))
            .ok_or_else(|| self.fault(at, format!("`{key}` is an array of type {elem}, not of integers")))?;
        self.check_count(count, size, "integers")?;
        let mut out = Vec::with_capacity(count as usize);
        for _ in 0..count {
            out.push(self.int(elem)?.unwrap_or(0));
        }
        Ok(out)
    }

    fn skip_value(&mut self, ty: u32) -> Result<()> {
        let at = self.offset;
        if let Some(size) = scalar_size(ty) {
            return self.skip(size);
        }
        match ty {
            T_STRING => {
                let n = self.u64()?;
                self.skip(n)
            }
            T_ARRAY => {
                let elem = self.u32()?;
                let count = self.u64()?;
                if let Some(size) = scalar_size(elem) {
                    let total =
                        count.checked_mul(size).ok_or_else(|| self.fault(at, "array length overflows"))?;
                    return self.skip(total);
                }
                match elem {
                    T_STRING => {
                        self.check_count(count, 8, "strings")?;
                        for _ in 0..count {
                            let n = self.u64()?;
                            self.skip(n)?;
                        }
                        Ok(())
                    }
                    // Nested arrays are legal GGUF but never used for metadata we skip past;
                    // refusing them keeps the skip loop flat (no recursion a file could abuse).
                    other => Err(self.fault(at, format!("array of value type {other} cannot be skipped"))),
                }
            }
            other => Err(self.fault(at, format!("unknown value type {other}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF writer for tests: just the metadata section.
    pub(crate) fn write_gguf(kvs: &[(&str, Value)]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend((kvs.len() as u64).to_le_bytes());
        for (k, v) in kvs {
            put_str(&mut out, k);
            v.write(&mut out);
        }
        out
    }

    pub(crate) enum Value {
        Str(&'static str),
        U32(u32),
        Strs(Vec<&'static str>),
        I32s(Vec<i32>),
        F32s(Vec<f32>),
    }

    fn put_str(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    impl Value {
        fn write(&self, out: &mut Vec<u8>) {
            match self {
                Value::Str(s) => {
                    out.extend(T_STRING.to_le_bytes());
                    put_str(out, s);
                }
                Value::U32(v) => {
                    out.extend(T_U32.to_le_bytes());
                    out.extend(v.to_le_bytes());
                }
                Value::Strs(v) => {
                    out.extend(T_ARRAY.to_le_bytes());
                    out.extend(T_STRING.to_le_bytes());
                    out.extend((v.len() as u64).to_le_bytes());
                    v.iter().for_each(|s| put_str(out, s));
                }
                Value::I32s(v) => {
                    out.extend(T_ARRAY.to_le_bytes());
                    out.extend(T_I32.to_le_bytes());
                    out.extend((v.len() as u64).to_le_bytes());
                    v.iter().for_each(|x| out.extend(x.to_le_bytes()));
                }
                Value::F32s(v) => {
                    out.extend(T_ARRAY.to_le_bytes());
                    out.extend(T_F32.to_le_bytes());
                    out.extend((v.len() as u64).to_le_bytes());
                    v.iter().for_each(|x| out.extend(x.to_le_bytes()));
                }
            }
        }
    }

    fn sample() -> Vec<u8> {
        use Value::*;
        write_gguf(&[
            ("general.architecture", Str("llama")),
            ("tokenizer.ggml.model", Str("llama")),
            ("tokenizer.ggml.scores", F32s(vec![0.0; 6])),
            ("tokenizer.ggml.tokens", Strs(vec!["<unk>", "<s>", "</s>", "<0x0A>", "▁hi", "<|user|>"])),
            ("tokenizer.ggml.token_type", I32s(vec![2, 3, 3, 6, 1, 4])),
            ("tokenizer.ggml.bos_token_id", U32(1)),
            ("tokenizer.ggml.eos_token_id", U32(2)),
            ("tokenizer.chat_template", Str("{{ messages }}")),
        ])
    }

    #[test]
    fn reads_vocabulary_types_and_ids() {
        let g = GgufTokenizer::from_bytes(&sample()).unwrap();
        assert_eq!(g.model(), "llama");
        assert_eq!(g.architecture(), Some("llama"));
        assert_eq!(g.tokens().len(), 6);
        assert_eq!(g.bos_token_id(), Some(1));
        assert_eq!(g.eos_token_id(), Some(2));
        assert_eq!(g.chat_template(), Some("{{ messages }}"));
        let info = g.to_tokenizer_info(&Default::default()).unwrap();
        assert_eq!(info.token_bytes(3), b"\n");
        assert_eq!(info.token_bytes(4), b" hi");
        assert_eq!(info.token_bytes(5), b"<|user|>");
        assert!(info.is_special(0) && info.is_special(1) && info.is_special(2));
        assert!(!info.is_special(4) && !info.is_special(5));
        assert_eq!(info.stop_tokens(), &[2]);
    }

    #[test]
    fn every_truncation_is_a_typed_error() {
        let bytes = sample();
        for n in 0..bytes.len() {
            match GgufTokenizer::from_bytes(&bytes[..n]) {
                Err(crate::Error::Gguf { offset, .. }) => assert!(offset <= n as u64),
                other => panic!("prefix of {n} bytes: {other:?}"),
            }
        }
    }

    #[test]
    fn huge_counts_fail_before_allocating() {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(3u32.to_le_bytes());
        bytes.extend(0u64.to_le_bytes());
        bytes.extend(u64::MAX.to_le_bytes());
        let err = GgufTokenizer::from_bytes(&bytes).unwrap_err();
        assert!(err.to_string().contains("metadata entries"), "{err}");
        let mut bytes = sample();
        // The tokens array's count sits after its key, type and element type.
        let at = bytes.windows(21).position(|w| w == b"tokenizer.ggml.tokens").unwrap() + 21 + 8;
        bytes[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        let err = GgufTokenizer::from_bytes(&bytes).unwrap_err();
        assert!(err.to_string().contains("cannot fit"), "{err}");
    }

    #[test]
    fn out_of_range_ids_and_bad_magic_are_errors() {
        use Value::*;
        let bytes = write_gguf(&[
            ("tokenizer.ggml.model", Str("gpt2")),
            ("tokenizer.ggml.tokens", Strs(vec!["a", "b"])),
            ("tokenizer.ggml.eos_token_id", U32(7)),
        ]);
        let err = GgufTokenizer::from_bytes(&bytes).unwrap_err();
        assert!(err.to_string().contains("eos token id 7"), "{err}");
        assert!(GgufTokenizer::from_bytes(b"GGML\0\0\0\0").is_err());
        let bytes =
            write_gguf(&[("tokenizer.ggml.model", Str("bert")), ("tokenizer.ggml.tokens", Strs(vec!["a"]))]);
        let g = GgufTokenizer::from_bytes(&bytes).unwrap();
        assert!(g.to_tokenizer_info(&Default::default()).is_err());
    }
}
