//! `format` values as ECMA-262 regexes, enforced like a `pattern`.
//!
//! | format | what the regex enforces |
//! |---|---|
//! | `date` | RFC 3339 `full-date`, days per month, Feb 29 only in leap years |
//! | `time` | RFC 3339 `full-time`; second 60 only as `23:59:60` in UTC (`Z` or a zero offset) |
//! | `date-time` | `date` `T` `time` (either case of `T`/`Z`) |
//! | `duration` | RFC 3339 appendix A durations (`P1Y2M`, `PT5S`, `P3W`; a day after a year only with a month, a second after an hour only with a minute) |
//! | `email` | `local@domain`: up to three dot-atoms of RFC 5322 `atext` (64 characters at most) or a quoted string (RFC 5321 `qtext` and quoted pairs); a hostname domain or an address literal (`[127.0.0.1]`, `[IPv6:::1]`) |
//! | `hostname` | 1–4 RFC 1123 labels of 1–63 letters, digits, hyphens, no hyphen at the ends, the fourth at most 61 (never over 253 characters) |
//! | `idn-hostname` | the same shape over RFC 3987 `ucschar` less IDNA2008's `DISALLOWED` exceptions, separated by `.`, `。`, `．` or `｡` |
//! | `ipv4` | dotted quad, 0–255, no leading zeros |
//! | `ipv6` | RFC 4291 text forms, including `::` compression and an IPv4 tail |
//! | `uuid` | 8-4-4-4-12 hex digits |
//! | `uri` | RFC 3986: `scheme:`, an authority whose host may be an IP literal (`[::1]`, `[v1.x]`), URI characters and `%XX` escapes |
//! | `iri` | RFC 3987: `uri` with `ucschar`, and `iprivate` in the query |
//! | `uri-template` | RFC 6570 level 4 (literals as the suite reads them: `'` allowed, DEL not) |
//! | `uri-reference` | like `uri`, scheme optional |
//! | `json-pointer` | RFC 6901 |
//!
//! What a regex of workable size cannot say (Punycode, IDNA2008's contextual and Bidi
//! rules, leap seconds at local offsets) is listed by [`format_caveat`] and reported as
//! a [`SchemaWarning`](super::SchemaWarning) on every schema that uses the format.
//!
//! Other formats (and unknown ones) are annotations, as the specification allows:
//! the string is unconstrained and a [`SchemaWarning`](super::SchemaWarning) notes it.

fn leap_date() -> String {
    // Years divisible by 4 but not by 100, or divisible by 400.
    let yy4: Vec<String> = (4..100).step_by(4).map(|n| format!("{n:02}")).collect();
    let cc4: Vec<String> = (0..100).step_by(4).map(|n| format!("{n:02}")).collect();
    format!("(?:\\d\\d(?:{})|(?:{})00)-02-29", yy4.join("|"), cc4.join("|"))
}

fn date() -> String {
    format!(
        "(?:\\d{{4}}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))|{})",
        leap_date()
    )
}

/// RFC 3339 `full-time`. A leap second only as `23:59:60` in UTC (`Z` or a zero offset):
/// a local `15:59:60-08:00` is valid too, but telling it apart needs the local hour and
/// minute remembered until the offset is read (1,440 cases: measured 70 ms to a first
/// mask instead of under 1 ms), for seconds that are no longer inserted — see
/// [`format_caveat`].
const TIME: &str = r"(?:(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:[zZ]|[+-](?:[01]\d|2[0-3]):[0-5]\d)|23:59:60(?:\.\d+)?(?:[zZ]|[+-]00:00))";

/// A hostname label's characters: the first, the inner ones and the last.
struct LabelChars {
    first: String,
    inner: String,
    last: String,
}

impl LabelChars {
    fn ascii() -> LabelChars {
        LabelChars { first: "[A-Za-z0-9]".into(), inner: "[A-Za-z0-9-]".into(), last: "[A-Za-z0-9]".into() }
    }

    /// Internationalized labels: the non-ASCII characters of RFC 3987's `ucschar` (BMP
    /// and the supplementary planes) with letters, digits and hyphens, less IDNA2008's
    /// `DISALLOWED` exceptions (RFC 5892 §2.6: U+0640, U+07FA, U+302E, U+302F,
    /// U+3031–U+3035, U+303B) and the label separators (U+3002, U+FF0E, U+FF61). The rest
    /// of IDNA2008's derivation, its contextual rules, the Bidi rule and the rule that a
    /// label does not begin with a combining mark are not checked (the mark rule alone
    /// took a first mask from 1.5 to 6 ms: its class has hundreds of ranges): see
    /// [`format_caveat`].
    fn idn() -> LabelChars {
        let all = class(&format!(
            r"[[{UCSCHAR}]--[\u{{640}}\u{{7FA}}\u{{302E}}\u{{302F}}\u{{3031}}-\u{{3035}}\u{{303B}}\u{{3002}}\u{{FF0E}}\u{{FF61}}]]"
        ));
        LabelChars {
            first: format!("[A-Za-z0-9{all}]"),
            inner: format!("[A-Za-z0-9{all}-]"),
            last: format!("[A-Za-z0-9{all}]"),
        }
    }

    /// Labels of 1 to `max` characters (`2 <= max <= 63`). RFC 5891's reserved
    /// `--` in the third and fourth positions is not refused: telling it apart doubled
    /// the time to a first mask (1.0 to 2.1 ms for `hostname`), and the suite's case of
    /// it is an `xn--` A-label whose Punycode would have to be decoded anyway.
    fn label(&self, max: usize) -> String {
        let (f, m, l) = (&self.first, &self.inner, &self.last);
        format!("{f}(?:{m}{{0,{}}}{l})?", max - 2)
    }

    /// One to four labels joined by `sep`, the fourth at most 61 characters long, so
    /// that a name is never over 253 characters (RFC 1123 §2.1 with RFC 1034's limit)
    /// without counting its characters. The exact rule (four labels of 62 or 63
    /// characters told apart) was measured at 20 ms to a first mask (1 ms without);
    /// what this leaves out — five labels or more, a fourth label of 62 or 63
    /// characters — is said in [`format_caveat`].
    fn hostname(&self, sep: &str) -> String {
        let any = self.label(63);
        format!("{any}(?:{sep}{any}){{0,2}}(?:{sep}{})?", self.label(61))
    }
}

/// The ranges of a `regex-syntax` class (which has set difference, unlike ECMA-262) as
/// the inside of an ECMA-262 class.
fn class(rust_class: &str) -> String {
    let ranges = crate::regex::class_ranges(rust_class).unwrap_or_default();
    debug_assert!(!ranges.is_empty(), "class {rust_class} did not parse");
    ranges
        .iter()
        .map(|&(a, b)| if b > a { format!("\\u{{{a:X}}}-\\u{{{b:X}}}") } else { format!("\\u{{{a:X}}}") })
        .collect()
}

const OCTET: &str = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)";
/// RFC 3987 `ucschar` as class ranges.
const UCSCHAR: &str = r"\u00A0-\uD7FF\uF900-\uFDCF\uFDF0-\uFFEF\u{10000}-\u{1FFFD}\u{20000}-\u{2FFFD}\u{30000}-\u{3FFFD}\u{40000}-\u{4FFFD}\u{50000}-\u{5FFFD}\u{60000}-\u{6FFFD}\u{70000}-\u{7FFFD}\u{80000}-\u{8FFFD}\u{90000}-\u{9FFFD}\u{A0000}-\u{AFFFD}\u{B0000}-\u{BFFFD}\u{C0000}-\u{CFFFD}\u{D0000}-\u{DFFFD}\u{E1000}-\u{EFFFD}";
/// RFC 3987 `iprivate` (private-use characters, allowed in an IRI's query only).
const IPRIVATE: &str = r"\uE000-\uF8FF\u{F0000}-\u{FFFFD}\u{100000}-\u{10FFFD}";

/// RFC 3986 `URI` (`relative: false`) or `URI-reference` (`relative: true`); with
/// `iri`, RFC 3987's IRI: `ucschar` wherever `unreserved` is allowed and `iprivate` in
/// the query.
fn uri(relative: bool, iri: bool, ip_literals: bool) -> String {
    let unreserved = if iri { format!("A-Za-z0-9\\-._~{UCSCHAR}") } else { r"A-Za-z0-9\-._~".to_string() };
    let pchar = format!("(?:[{unreserved}!$&'()*+,;=:@]|%[0-9A-Fa-f]{{2}})");
    let pchar_nc = format!("(?:[{unreserved}!$&'()*+,;=@]|%[0-9A-Fa-f]{{2}})");
    // An IP literal host: an IPv6 address or RFC 3986's `IPvFuture` (`v` in either case,
    // ABNF strings being case-insensitive).
    let ip_literal = if ip_literals {
        format!("\\[(?:{}|[vV][0-9A-Fa-f]+\\.[A-Za-z0-9\\-._~!$&'()*+,;=:]+)\\]|", ipv6())
    } else {
        String::new()
    };
    let auth = format!(
        "//(?:(?:[{unreserved}!$&'()*+,;=:]|%[0-9A-Fa-f]{{2}})*@)?(?:{ip_literal}(?:[{unreserved}!$&'()*+,;=]|%[0-9A-Fa-f]{{2}})*)(?::\\d*)?"
    );
    let private = if iri { IPRIVATE } else { "" };
    let query = format!("(?:{pchar}|[/?{private}])*");
    let tail = format!("(?:\\?{query})?(?:#(?:{pchar}|[/?])*)?");
    let abs = format!("[A-Za-z][A-Za-z0-9+.-]*:(?:{auth}(?:/{pchar}*)*|/|/?{pchar}+(?:/{pchar}*)*)?{tail}");
    if !relative {
        return abs;
    }
    let rel = format!("(?:{auth}(?:/{pchar}*)*|/|/{pchar}+(?:/{pchar}*)*|{pchar_nc}+(?:/{pchar}*)*)?{tail}");
    format!("{abs}|{rel}")
}

fn ipv6() -> String {
    let h = "[0-9A-Fa-f]{1,4}";
    let v4 = format!("{OCTET}(?:\\.{OCTET}){{3}}");
    let ls32 = format!("(?:{h}:{h}|{v4})");
    let forms = [
        format!("(?:{h}:){{6}}{ls32}"),
        format!("::(?:{h}:){{5}}{ls32}"),
        format!("(?:{h})?::(?:{h}:){{4}}{ls32}"),
        format!("(?:(?:{h}:){{0,1}}{h})?::(?:{h}:){{3}}{ls32}"),
        format!("(?:(?:{h}:){{0,2}}{h})?::(?:{h}:){{2}}{ls32}"),
        format!("(?:(?:{h}:){{0,3}}{h})?::{h}:{ls32}"),
        format!("(?:(?:{h}:){{0,4}}{h})?::{ls32}"),
        format!("(?:(?:{h}:){{0,5}}{h})?::{h}"),
        format!("(?:(?:{h}:){{0,6}}{h})?::"),
    ];
    format!("(?:{})", forms.join("|"))
}

/// Whether `name` is a format defined by Draft 2020-12 (§7.3) or Draft-07. A defined
/// format without a [`format_regex`] is an unsupported keyword; any other name is an
/// annotation (unknown formats must not fail validation).
pub fn is_defined_format(name: &str) -> bool {
    matches!(
        name,
        "date-time"
            | "date"
            | "time"
            | "duration"
            | "email"
            | "idn-email"
            | "hostname"
            | "idn-hostname"
            | "ipv4"
            | "ipv6"
            | "uri"
            | "uri-reference"
            | "iri"
            | "iri-reference"
            | "uuid"
            | "uri-template"
            | "json-pointer"
            | "relative-json-pointer"
            | "regex"
    )
}

/// The anchored regex for a supported `format`, or `None`. Built once per process and
/// format: some are large (a `uri`'s IPv6 literals, the IDNA classes) and a schema may
/// name the same format many times (a tool list: a `date-time` in every tool).
pub fn format_regex(name: &str) -> Option<String> {
    // Unknown names are not kept: a schema chooses them.
    static BUILT: crate::memo::Memo<String, String> = crate::memo::Memo::new();
    is_defined_format(name)
        .then(|| BUILT.get_or(name, || build_format_regex(name).unwrap_or_default()))
        .filter(|re| !re.is_empty())
}

fn build_format_regex(name: &str) -> Option<String> {
    let body = match name {
        "date" => date(),
        "time" => TIME.to_string(),
        "date-time" => format!("{}[tT]{TIME}", date()),
        "duration" => {
            // RFC 3339 appendix A: a day only after a month when there is a year, a
            // second only after a minute when there is an hour.
            let d = r"(?:\d+Y(?:\d+M(?:\d+D)?)?|\d+M(?:\d+D)?|\d+D)";
            let t = r"T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)";
            format!("P(?:\\d+W|{d}(?:{t})?|{t})")
        }
        "email" => {
            // Local part at most 64 characters (RFC 5321), up to three dot-atoms, or a
            // quoted string; the domain a hostname or an address literal (RFC 5321
            // §4.1.3: `[127.0.0.1]`, `[IPv6:::1]`).
            let a = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
            let quoted = r#""(?:[\x20\x21\x23-\x5B\x5D-\x7E]|\\[\x20-\x7E]){0,62}""#;
            let literal = format!("\\[(?:{OCTET}(?:\\.{OCTET}){{3}}|IPv6:{})\\]", ipv6());
            format!(
                "(?:{a}{{1,64}}|{a}{{1,31}}\\.{a}{{1,32}}|{a}{{1,20}}\\.{a}{{1,20}}\\.{a}{{1,20}}|{quoted})@(?:{}|{literal})",
                LabelChars::ascii().hostname("\\.")
            )
        }
        "hostname" => LabelChars::ascii().hostname("\\."),
        "ipv4" => format!("{OCTET}(?:\\.{OCTET}){{3}}"),
        "ipv6" => ipv6(),
        "uuid" => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".to_string(),
        "uri" => uri(false, false, true),
        "uri-reference" => uri(true, false, true),
        "iri" => uri(false, true, true),
        "iri-reference" => uri(true, true, true),
        "json-pointer" => r"(?:/(?:[^~/]|~[01])*)*".to_string(),
        "relative-json-pointer" => r"(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)".to_string(),
        // Internationalized labels (`LabelChars::idn`), separated by any of the four
        // full stops IDNA2008 maps to `.`.
        "idn-hostname" => LabelChars::idn().hostname("[.\\u3002\\uFF0E\\uFF61]"),
        "idn-email" => {
            // RFC 6531: any non-ASCII character in atoms; or a quoted local part.
            let a = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\u0080-\uD7FF\uE000-\u{10FFFF}-]";
            let quoted = r#""(?:[^"\\]|\\.){0,62}""#;
            format!(
                "(?:{a}{{1,64}}(?:\\.{a}{{1,64}}){{0,2}}|{quoted})@(?:{})",
                LabelChars::idn().hostname("\\.")
            )
        }
        // RFC 6570 level 4: literals (its ASCII set, `ucschar` and `iprivate`; `'` too,
        // as the suite reads it), percent-escapes and `{op? var(:n|*)?, …}`.
        "uri-template" => {
            let varchar = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})";
            let var = format!("{varchar}(?:\\.?{varchar})*(?::[1-9][0-9]{{0,3}}|\\*)?");
            format!("(?:[!#$&'()*+,\\-./0-9:;=?@A-Z\\[\\]_a-z~{UCSCHAR}{IPRIVATE}]|%[0-9A-Fa-f]{{2}}|\\{{[+#./;?&=,!@|]?{var}(?:,{var})*\\}})*")
        }
        _ => return None,
    };
    Some(format!("^(?:{body})$"))
}

/// Whether `regex` is one of the `uri` family's regexes ([`format_regex`]), and which:
/// `(relative, iri)`.
fn uri_kind(regex: &str) -> Option<(bool, bool)> {
    [
        ("uri", false, false),
        ("uri-reference", true, false),
        ("iri", false, true),
        ("iri-reference", true, true),
    ]
    .into_iter()
    .find(|(name, ..)| format_regex(name).as_deref() == Some(regex))
    .map(|(_, relative, iri)| (relative, iri))
}

/// Whether [`narrower`] has a regex for this format regex.
pub fn has_narrower(regex: &str) -> bool {
    uri_kind(regex).is_some()
}

/// A narrower regex for a format's `regex` ([`format_regex`]) and what it leaves out, for
/// where the whole one is too large to intersect with the string's other keywords (a
/// `uri` under `maxLength: 255`: its IPv6 literals make the joint automaton of every
/// character count over the intersection limit). Sound: every string it takes is valid;
/// narrower: IP-literal hosts (`[::1]`) are not taken.
pub fn narrower(regex: &str) -> Option<(String, &'static str)> {
    let (relative, iri) = uri_kind(regex)?;
    Some((
        format!("^(?:{})$", uri(relative, iri, false)),
        "no IP-literal host (`[::1]`): its intersection with the other string keywords is over a quarter of the state limit",
    ))
}

/// What a supported format's regex does not check, for the schema's warnings: each of
/// these is a rule no regular language of workable size states (a Punycode decoding, the
/// contextual and Bidi rules of IDNA2008 across a label), or a length the automaton
/// bounds more tightly than the format does.
pub fn format_caveat(name: &str) -> Option<&'static str> {
    match name {
        "hostname" | "email" => Some(
            "a domain of 1 to 4 labels, the fourth at most 61 characters; an `xn--` A-label is checked as letters, digits and hyphens, its Punycode not decoded; `--` in a label's third and fourth positions (reserved by RFC 5891) is not refused",
        ),
        "idn-hostname" | "idn-email" => Some(
            "IDNA2008 labels by character class: the contextual rules (RFC 5892 appendix A), the Bidi rule (RFC 5893), a leading combining mark, `--` in a label's third and fourth positions and A-label decoding are not checked, and a label's 63 are counted in characters, not in its A-label's octets; 1 to 4 labels, the fourth at most 61 characters",
        ),
        "time" | "date-time" => Some("a leap second only as 23:59:60 UTC (with `Z` or a zero offset)"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse() {
        for f in [
            "date",
            "time",
            "date-time",
            "duration",
            "email",
            "hostname",
            "ipv4",
            "ipv6",
            "uuid",
            "uri",
            "uri-reference",
            "iri",
            "iri-reference",
            "json-pointer",
            "relative-json-pointer",
            "idn-hostname",
            "idn-email",
            "uri-template",
        ] {
            let re = format_regex(f).unwrap();
            crate::regex::regex_to_json_string_expr(&re, 0, None, &Default::default())
                .unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }
}
