//! For binaries whose global allocator is mimalloc (feature `mimalloc-options`): pages
//! mimalloc frees are reset (the kernel may take them back when it needs memory) instead
//! of decommitted (taken back at once).
//!
//! # Why
//! A grammar compile allocates and frees tens of megabytes (a long string's automaton,
//! its transition table); a server compiles one grammar after another. mimalloc hands
//! freed memory back to the kernel a second after it was freed (v3's `purge_delay`),
//! decommitting it (`MADV_DONTNEED`), so the next compile faults its pages in again and
//! the kernel zeroes each of them — 2 MB at a time where transparent huge pages back the
//! heap. Reset (`MADV_FREE`) leaves the pages where they are until the kernel is short of
//! memory: MaskBench's Github_medium split in one process, time to first mask p99
//! 10.0–10.9 → 8.3–8.5 ms, peak resident memory 278–289 → 315–322 MB (pages the kernel
//! may reclaim; docs/benchmarks/maskbench.md, 2026-12-07 14:21). A library cannot choose
//! its users' allocator: the binaries built here that compile grammars (the `grammask`
//! CLI, `grammask-router`, `bench_step`) call [`keep_freed_pages`] first thing, and an
//! engine with mimalloc as its allocator may do the same.

/// mimalloc's `mi_option_purge_decommits`, the option before `allow_large_os_pages` in
/// v3's `mi_option_t` (`libmimalloc-sys` names only some options). The test below checks
/// it against mimalloc's defaults.
const PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = libmimalloc_sys::mi_option_large_os_pages - 1;

/// The environment's names for the option (mimalloc reads them at start, in any case).
const NAMES: [&str; 2] = ["MIMALLOC_PURGE_DECOMMITS", "MIMALLOC_RESET_DECOMMITS"];

/// Makes mimalloc reset freed pages instead of decommitting them (see the module), unless
/// the environment chose ([`chosen_by_environment`]). Returns whether it changed the
/// setting. Call it first in `main`, in a binary whose global allocator is mimalloc.
///
/// ```
/// grammask::alloc::keep_freed_pages();
/// ```
pub fn keep_freed_pages() -> bool {
    if chosen_by_environment() {
        return false;
    }
    // SAFETY: sets one of mimalloc's options, which it reads on its next purge.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DECOMMITS, 0) };
    true
}

/// Whether the environment sets the option: `MIMALLOC_PURGE_DECOMMITS` or its older name
/// `MIMALLOC_RESET_DECOMMITS`, in any case (mimalloc compares the names without case).
///
/// ```
/// let _ = grammask::alloc::chosen_by_environment();
/// ```
pub fn chosen_by_environment() -> bool {
    std::env::vars_os()
        .any(|(k, _)| k.to_str().is_some_and(|k| NAMES.iter().any(|n| k.eq_ignore_ascii_case(n))))
}

#[cfg(test)]
mod tests {
    use libmimalloc_sys::{mi_option_get, mi_option_t, mi_option_use_numa_nodes};

    #[test]
    fn the_option_is_purge_decommits() {
        // v3's order: `arena_eager_commit` (default 2), `purge_decommits` (1),
        // `allow_large_os_pages` (named by the crate); `purge_delay` (1,000 ms) right before
        // `use_numa_nodes` (named). A reordered `mi_option_t` moves these defaults.
        let get = |o: mi_option_t| unsafe { mi_option_get(o) };
        let set = std::env::vars_os()
            .any(|(k, _)| k.to_str().is_some_and(|k| k.to_ascii_uppercase().starts_with("MIMALLOC_")));
        assert!(!set, "MIMALLOC_* variables set: mimalloc's defaults cannot be checked");
        assert_eq!(get(super::PURGE_DECOMMITS - 1), 2);
        assert_eq!(get(super::PURGE_DECOMMITS), 1);
        assert_eq!(get(mi_option_use_numa_nodes - 1), 1000);
    }
}
