//! Set algebra on character classes: sorted, non-overlapping, non-adjacent inclusive
//! ranges of Unicode scalar values (the form [`Expr::Class`](crate::grammar::Expr::Class)
//! requires). Surrogates (U+D800–U+DFFF) are never members: they have no UTF-8 encoding.

/// Sorts and merges ranges, dropping surrogates.
pub fn normalize_class(mut ranges: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    ranges.retain(|&(lo, hi)| lo <= hi);
    ranges.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        let hi = hi.min(0x10FFFF);
        if lo > hi {
            continue;
        }
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    let mut split = Vec::with_capacity(out.len());
    for (lo, hi) in out {
        if lo < 0xD800 {
            split.push((lo, hi.min(0xD7FF)));
        }
        if hi > 0xDFFF {
            split.push((lo.max(0xE000), hi));
        }
    }
    // Merge ranges that touch across the removed surrogate block (never happens) and
    // keep the invariant.
    split
}

/// The complement within the Unicode scalar values.
pub fn complement_class(ranges: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let ranges = normalize_class(ranges.to_vec());
    let mut out = Vec::new();
    let mut next = 0u32;
    for &(lo, hi) in &ranges {
        if lo > next {
            out.push((next, lo - 1));
        }
        next = hi + 1;
    }
    if next <= 0x10FFFF {
        out.push((next, 0x10FFFF));
    }
    normalize_class(out)
}

/// `a ∩ b`.
pub fn intersect_class(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo <= hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    normalize_class(out)
}

/// `a \ b`.
pub fn subtract_class(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    intersect_class(a, &complement_class(b))
}

/// Whether `c` is in the class.
pub fn class_contains(a: &[(u32, u32)], c: u32) -> bool {
    a.iter().any(|&(lo, hi)| lo <= c && c <= hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algebra() {
        let a = normalize_class(vec![(5, 10), (0, 3), (4, 4), (0xD000, 0xE100)]);
        assert_eq!(a, vec![(0, 10), (0xD000, 0xD7FF), (0xE000, 0xE100)]);
        assert_eq!(intersect_class(&a, &[(2, 6)]), vec![(2, 6)]);
        assert_eq!(subtract_class(&[(0, 10)], &[(3, 4)]), vec![(0, 2), (5, 10)]);
        assert_eq!(complement_class(&[]), vec![(0, 0xD7FF), (0xE000, 0x10FFFF)]);
    }
}
