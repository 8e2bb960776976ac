//! `format` values as ECMA-262 regexes, enforced like a `pattern`.
//!
//! | format | what the regex enforces |
//! |---|---|
//! | `date` | RFC 3339 `full-date`, days per month, Feb 29 only in leap years |
//! | `time` | RFC 3339 `full-time`; second 60 only as `23:59:60` in UTC |
//! | `date-time` | `date` `T` `time` (either case of `T`/`Z`) |
//! | `duration` | ISO 8601 / RFC 3339 appendix A durations (`P1Y2M`, `PT5S`, `P3W`) |
//! | `email` | `local@domain`: up to three dot-atoms of RFC 5322 `atext` (64 characters at most) or a quoted string (RFC 5321 `qtext` and quoted pairs); a hostname domain or an address literal (`[127.0.0.1]`, `[IPv6:::1]`) |
//! | `hostname` | 1–4 RFC 1123 labels of 1–63 letters, digits, hyphens, no hyphen at the ends |
//! | `ipv4` | dotted quad, 0–255, no leading zeros |
//! | `ipv6` | RFC 4291 text forms, including `::` compression and an IPv4 tail |
//! | `uuid` | 8-4-4-4-12 hex digits |
//! | `uri` | `scheme:` then URI characters and `%XX` escapes |
//! | `uri-reference` | like `uri`, scheme optional |
//! | `json-pointer` | RFC 6901 |
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

const TIME: &str = r"(?:(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:[zZ]|[+-](?:[01]\d|2[0-3]):[0-5]\d)|23:59:60(?:\.\d+)?(?:[zZ]|[+-]00:00))";
const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const IDN_LABEL: &str = r"[A-Za-z0-9\u00A0-\uD7FF\uF900-\uFDCF\uFDF0-\uFFEF\u{10000}-\u{EFFFD}](?:[A-Za-z0-9\u00A0-\uD7FF\uF900-\uFDCF\uFDF0-\uFFEF\u{10000}-\u{EFFFD}-]{0,61}[A-Za-z0-9\u00A0-\uD7FF\uF900-\uFDCF\uFDF0-\uFFEF\u{10000}-\u{EFFFD}])?";
const OCTET: &str = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)";
/// RFC 3986 `pchar`.
const PCHAR: &str = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})";
/// `pchar` without `:` (first segment of a relative path).
const PCHAR_NC: &str = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|%[0-9A-Fa-f]{2})";

/// RFC 3986 `URI` (`relative: false`) or `URI-reference` (`relative: true`).
fn uri(relative: bool) -> String {
    let auth = r"//(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2})*@)?(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*(?::\d*)?";
    let tail = format!("(?:\\?(?:{PCHAR}|[/?])*)?(?:#(?:{PCHAR}|[/?])*)?");
    let abs = format!("[A-Za-z][A-Za-z0-9+.-]*:(?:{auth}(?:/{PCHAR}*)*|/|/?{PCHAR}+(?:/{PCHAR}*)*)?{tail}");
    if !relative {
        return abs;
    }
    let rel = format!("(?:{auth}(?:/{PCHAR}*)*|/|/{PCHAR}+(?:/{PCHAR}*)*|{PCHAR_NC}+(?:/{PCHAR}*)*)?{tail}");
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

/// The anchored regex for a supported `format`, or `None`.
pub fn format_regex(name: &str) -> Option<String> {
    let body = match name {
        "date" => date(),
        "time" => TIME.to_string(),
        "date-time" => format!("{}[tT]{TIME}", date()),
        "duration" => {
            let d = r"(?:\d+Y(?:\d+M)?(?:\d+D)?|\d+M(?:\d+D)?|\d+D)";
            let t = r"T(?:\d+H(?:\d+M)?(?:\d+S)?|\d+M(?:\d+S)?|\d+S)";
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
                "(?:{a}{{1,64}}|{a}{{1,31}}\\.{a}{{1,32}}|{a}{{1,20}}\\.{a}{{1,20}}\\.{a}{{1,20}}|{quoted})@(?:{LABEL}(?:\\.{LABEL}){{0,3}}|{literal})"
            )
        }
        "hostname" => format!("{LABEL}(?:\\.{LABEL}){{0,3}}"),
        "ipv4" => format!("{OCTET}(?:\\.{OCTET}){{3}}"),
        "ipv6" => ipv6(),
        "uuid" => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".to_string(),
        "uri" => uri(false),
        "uri-reference" => uri(true),
        // RFC 3987: a URI whose unreserved characters also include `ucschar` (BMP part).
        "iri" | "iri-reference" => uri(name == "iri-reference").replace(
            r"A-Za-z0-9\-._~",
            r"A-Za-z0-9\-._~\u00A0-\uD7FF\uF900-\uFDCF\uFDF0-\uFFEF\u{10000}-\u{EFFFD}",
        ),
        "json-pointer" => r"(?:/(?:[^~/]|~[01])*)*".to_string(),
        "relative-json-pointer" => r"(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)".to_string(),
        // Internationalized forms: labels and atoms may also hold non-ASCII letters
        // (the BMP `ucschar` ranges); the IDNA contextual rules are not checked.
        "idn-hostname" => format!("{IDN_LABEL}(?:\\.{IDN_LABEL}){{0,3}}"),
        "idn-email" => {
            // RFC 6531: any non-ASCII character in atoms; or a quoted local part.
            let a = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\u0080-\uD7FF\uE000-\u{10FFFF}-]";
            let quoted = r#""(?:[^"\\]|\\.){0,62}""#;
            format!("(?:{a}{{1,64}}(?:\\.{a}{{1,64}}){{0,2}}|{quoted})@{IDN_LABEL}(?:\\.{IDN_LABEL}){{0,3}}")
        }
        // RFC 6570 level 4: literals, percent-escapes and `{op? var(:n|*)?, …}`.
        "uri-template" => {
            let varchar = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})";
            let var = format!("{varchar}(?:\\.?{varchar})*(?::[1-9][0-9]{{0,3}}|\\*)?");
            format!("(?:[^\\x00-\\x20\"'%<>\\\\^`{{|}}]|%[0-9A-Fa-f]{{2}}|\\{{[+#./;?&=,!@|]?{var}(?:,{var})*\\}})*")
        }
        _ => return None,
    };
    Some(format!("^(?:{body})$"))
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
