//! Forced text through JSON escapes: a character that JSON lets stand for itself is
//! forced even where the grammar also takes its escape spellings.
//!
//! JSON strings accept every spelling of a character (`n`, `\u006e`, `\u006E`), so after
//! `{` in a schema with one required `name` the next byte is `n` *or* `\`, and forced
//! text would stop at every key and enumeration value. Yet the choice is not one of
//! meaning: every branch spells the same character. [`forced_char`] finds the character
//! the plain branch writes and checks, by walking the parser through the escape branch,
//! that every byte string it allows there spells that character; the character is then
//! forced, written plainly (as every JSON writer would).

use super::earley::Earley;
use crate::automata::{Automata, ByteSet};

/// The bytes the items of the parser's last set may read next.
pub(super) fn next_bytes(parser: &Earley, a: &Automata) -> ByteSet {
    let mut next = ByteSet::default();
    for it in parser.last_set() {
        if a.scans(it.state) {
            next.union(&a.out_bytes(it.state));
        }
    }
    next
}

/// When the parser may read `plain` or `\` next, and nothing else: the UTF-8 bytes of the
/// character `plain` starts, if that character is forced up to its spelling (its own
/// bytes each forced, and every escape the grammar allows here one of its spellings).
/// The parser is left as it was.
pub(super) fn forced_char(parser: &mut Earley, a: &Automata, plain: u8) -> Option<Vec<u8>> {
    // Characters whose escapes mean something else than the bare byte (the quote that
    // ends a string, the backslash, controls) never stand for themselves here.
    if plain == b'"' || plain == b'\\' || plain < 0x20 {
        return None;
    }
    let base = parser.depth();
    let len = match plain {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return None,
    };
    let mut bytes = vec![plain];
    let mut ok = parser.push(a, plain);
    while ok && bytes.len() < len {
        let next = next_bytes(parser, a);
        match (next.len(), (0..=255u8).find(|&b| next.contains(b))) {
            (1, Some(b)) => {
                bytes.push(b);
                ok = parser.push(a, b);
            }
            _ => ok = false,
        }
    }
    parser.truncate(base);
    let c = std::str::from_utf8(&bytes).ok().filter(|_| ok)?.chars().next()?;
    let escapes = parser.push(a, b'\\') && only_spells(parser, a, &Spellings::of(c), &mut Vec::new());
    parser.truncate(base);
    escapes.then_some(bytes)
}

/// Whether every continuation the parser allows after `\` and then `after` stays within
/// the escape spellings of `c` until one is complete.
fn only_spells(parser: &mut Earley, a: &Automata, c: &Spellings, after: &mut Vec<u8>) -> bool {
    let next = next_bytes(parser, a);
    for b in (0..=255u8).filter(|&b| next.contains(b)) {
        after.push(b);
        let ok = match c.spelling(after) {
            None => false,
            Some(true) => true,
            Some(false) => {
                let depth = parser.depth();
                let ok = !parser.push(a, b) || only_spells(parser, a, c, after);
                parser.truncate(depth);
                ok
            }
        };
        after.pop();
        if !ok {
            return false;
        }
    }
    true
}

/// The escape spellings of one character, after the `\`: its short escape, if any, and
/// `u` + 4 hex digits per UTF-16 unit (units joined by `\u`), lowercase here (either case
/// is read).
struct Spellings {
    short: Option<u8>,
    unicode: Vec<u8>,
}

impl Spellings {
    fn of(c: char) -> Spellings {
        let short = match c {
            '/' => Some(b'/'),
            '\u{8}' => Some(b'b'),
            '\u{c}' => Some(b'f'),
            '\n' => Some(b'n'),
            '\r' => Some(b'r'),
            '\t' => Some(b't'),
            _ => None,
        };
        let mut units = [0u16; 2];
        let mut unicode = Vec::new();
        for (i, u) in c.encode_utf16(&mut units).iter().enumerate() {
            if i > 0 {
                unicode.push(b'\\');
            }
            unicode.push(b'u');
            unicode.extend(format!("{u:04x}").bytes());
        }
        Spellings { short, unicode }
    }

    /// Whether `after` (the bytes after a `\`) begins one of these spellings: `None` if
    /// not, `Some(true)` once it is a whole one.
    fn spelling(&self, after: &[u8]) -> Option<bool> {
        if let (Some(s), [b]) = (self.short, after) {
            if *b == s {
                return Some(true);
            }
        }
        if after.len() > self.unicode.len() {
            return None;
        }
        // Hex digits in either case; `\u` exactly.
        let same = after
            .iter()
            .zip(&self.unicode)
            .all(|(x, y)| x == y || y.is_ascii_hexdigit() && x.to_ascii_lowercase() == *y);
        same.then_some(after.len() == self.unicode.len())
    }
}

#[cfg(test)]
mod tests {
    use super::Spellings;

    fn spelling(c: char, after: &[u8]) -> Option<bool> {
        Spellings::of(c).spelling(after)
    }

    #[test]
    fn spellings_are_recognised_by_prefix() {
        assert_eq!(spelling('n', b"u00"), Some(false));
        assert_eq!(spelling('n', b"u006E"), Some(true));
        assert_eq!(spelling('n', b"u006e"), Some(true));
        assert_eq!(spelling('n', b"u006f"), None);
        assert_eq!(spelling('n', b"n"), None, "`\\n` is a newline");
        assert_eq!(spelling('/', b"/"), Some(true));
        assert_eq!(spelling('😀', b"ud83d\\uDE00"), Some(true));
        assert_eq!(spelling('😀', b"ud83d\\"), Some(false));
        assert_eq!(spelling('😀', b"ud83d\""), None);
        assert_eq!(spelling('n', b"U006e"), None, "`\\U` is no escape");
    }
}
