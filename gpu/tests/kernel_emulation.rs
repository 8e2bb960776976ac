//! Runs the CUDA kernel source on the host: `tests/emu/harness.cpp` compiles
//! `src/kernel/bitmask.cu` as C++ against a small shim of CUDA's builtins (one
//! thread per lane, barriers for the warp shuffles) and executes exactly the launch
//! [`plan_launch`] chooses. Results are compared bit for bit with the CPU path.
//!
//! This checks the kernel's indexing, tails, vector widths, alignment, fast paths
//! and out-of-range index handling on machines without a GPU. It does not replace
//! `tests/gpu_props.rs` (real device, `--ignored`). Skipped, with a message, when
//! no C++20 compiler (`c++`/`g++`/`clang++`, or `$CXX`) is found.
//!
//! Besides the results, every launch checks the kernel's memory-access rules on the
//! log of logits loads and stores the shim records (see [`expected_vectors`]): a
//! vector whose elements are all allowed is neither loaded nor stored; an
//! all-disallowed vector is stored once at full width and never loaded; a mixed
//! vector is loaded once and stored once, both at full width (never as per-element
//! stores); only a mixed vector straddling the end of the vocabulary is written
//! element by element, and nothing past the vocabulary is touched.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use grammask_gpu::plan::{plan_launch, LaunchPlan};
use grammask_gpu::{apply_token_bitmask_inplace_cpu, DType, LogitsLayout, MaskLayout};
use proptest::prelude::*;

fn harness() -> Option<&'static Path> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emu");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("grammask_bitmask_emu");
        let candidates: Vec<String> = std::env::var("CXX")
            .ok()
            .into_iter()
            .chain(["c++", "g++", "clang++"].map(String::from))
            .collect();
        for cxx in candidates {
            let status = Command::new(&cxx)
                .args([
                    "-std=c++20",
                    "-O1",
                    "-pthread",
                    "-fno-strict-aliasing",
                    "-Wall",
                    "-Wextra",
                    "-Wno-unknown-pragmas",
                    "-o",
                ])
                .arg(&out)
                .arg(dir.join("harness.cpp"))
                .status();
            match status {
                Ok(s) if s.success() => return Some(out),
                Ok(s) => panic!("{cxx} failed to compile the kernel emulation ({s})"),
                Err(_) => continue,
            }
        }
        // A test that cannot check must not pass: without a compiler it fails.
        panic!("kernel_emulation: no C++ compiler found (set CXX, or install g++): the kernel cannot be emulated")
    })
    .as_deref()
}

/// Result of one emulated launch: logits bits, the index-error flag, the launch
/// plan (`None`: nothing launched) and the logits accesses the kernel made.
struct Emulated {
    bits: Vec<u32>,
    flag: u32,
    plan: Option<LaunchPlan>,
    accesses: Vec<Access>,
}

/// One logits access recorded by the shim: byte offset from the first logit,
/// width in bytes, load or store. Ordered so that sorted logs compare as multisets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Access {
    offset: i64,
    bytes: u32,
    store: bool,
}

/// What the kernel must do with one vector of a masked row.
#[derive(Debug, Clone, PartialEq, Eq)]
enum VectorKind {
    /// Every element allowed: not touched.
    Skip,
    /// Every element disallowed: one full-width store, no load.
    Fill,
    /// Some allowed, inside the vocabulary: one full-width load and store.
    Mixed,
    /// Mixed and straddling the end of the vocabulary: one element-wide store per
    /// disallowed element (their offsets), no load.
    Tail(Vec<i64>),
}

#[derive(Debug, Clone)]
struct Vector {
    /// Byte offset of the vector's first element from the first logit.
    offset: i64,
    /// Width in bytes.
    bytes: u32,
    /// Element size in bytes.
    elem: u32,
    kind: VectorKind,
}

/// Emulates the launch the CUDA path would make for `case`, with the logits
/// `offset` elements past a 16-byte boundary, on a device with `sm_count` SMs.
/// `raw_indices` overrides the case's indices (to pass out-of-range entries the
/// host would reject).
fn emulate(case: &Case, offset: usize, sm_count: u32, raw_indices: Option<&[i32]>) -> Option<Emulated> {
    let bin = harness()?;
    let elem = case.dtype.size();
    let indices = raw_indices.or(case.indices.as_deref());
    let rows = indices.map_or(case.layout.batch, <[i32]>::len);
    let addr = 0x10_0000u64 + (offset * elem) as u64;
    let Some(plan) = plan_launch(elem, addr, &case.layout, rows, sm_count).expect("plan") else {
        // Nothing to launch: the logits stay as they are.
        return Some(Emulated { bits: case.bits.clone(), flag: 0, plan: None, accesses: Vec::new() });
    };
    let header: [i64; 16] = [
        plan.kernel as i64,
        elem as i64,
        i64::from(plan.grid.0),
        i64::from(plan.grid.1),
        i64::from(plan.block.0),
        case.layout.batch as i64,
        case.layout.vocab as i64,
        case.layout.row_stride as i64,
        case.mask_layout.words as i64,
        case.mask_layout.rows as i64,
        i64::from(plan.chunks_per_row),
        i64::from(case.dtype.neg_inf_bits()),
        case.len as i64,
        offset as i64,
        case.mask.len() as i64,
        indices.map_or(-1, |i| i.len() as i64),
    ];
    let mut input: Vec<u8> = header.iter().flat_map(|v| v.to_le_bytes()).collect();
    for &b in &case.bits {
        if elem == 4 {
            input.extend_from_slice(&b.to_le_bytes());
        } else {
            input.extend_from_slice(&(b as u16).to_le_bytes());
        }
    }
    for &w in &case.mask {
        input.extend_from_slice(&w.to_le_bytes());
    }
    for &i in indices.unwrap_or(&[]) {
        input.extend_from_slice(&i.to_le_bytes());
    }
    let dir = tempdir();
    let (inp, outp) = (dir.join("in.bin"), dir.join("out.bin"));
    std::fs::write(&inp, &input).unwrap();
    let output = Command::new(bin).arg(&inp).arg(&outp).output().unwrap();
    assert!(
        output.status.success(),
        "emulated kernel failed: {}\nplan {plan:?}\ncase {:?} {:?} {:?}",
        String::from_utf8_lossy(&output.stderr),
        case.dtype,
        case.layout,
        case.mask_layout
    );
    let out = std::fs::read(&outp).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let data_len = case.len * elem;
    assert!(out.len() >= data_len + 12, "short emulation output ({} bytes)", out.len());
    let (data, rest) = out.split_at(data_len);
    let (flag, rest) = rest.split_at(4);
    let (count, log) = rest.split_at(8);
    let count = u64::from_le_bytes(count.try_into().unwrap()) as usize;
    assert_eq!(log.len(), count * 16, "access log length");
    let bits = if elem == 4 {
        data.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    } else {
        data.chunks_exact(2).map(|c| u32::from(u16::from_le_bytes([c[0], c[1]]))).collect()
    };
    let accesses = log
        .chunks_exact(16)
        .map(|c| {
            let kind = i32::from_le_bytes(c[12..16].try_into().unwrap());
            assert!(kind == 0 || kind == 1, "access kind {kind}");
            Access {
                offset: i64::from_le_bytes(c[..8].try_into().unwrap()),
                bytes: u32::from_le_bytes(c[8..12].try_into().unwrap()),
                store: kind == 1,
            }
        })
        .collect();
    Some(Emulated {
        bits,
        flag: u32::from_le_bytes([flag[0], flag[1], flag[2], flag[3]]),
        plan: Some(plan),
        accesses,
    })
}

/// The rows a launch masks, in order and with repeats: the case's indices (only
/// the valid ones: the kernel skips the others) or every row.
fn masked_rows(case: &Case, indices: Option<&[i32]>) -> Vec<usize> {
    match indices {
        None => (0..case.layout.batch).collect(),
        Some(idx) => idx
            .iter()
            .filter_map(|&i| usize::try_from(i).ok())
            .filter(|&r| r < case.layout.batch && r < case.mask_layout.rows)
            .collect(),
    }
}

/// The model of the kernel's memory accesses: every vector of every masked row
/// (vectors of `vec` elements from the start of the row, as the launch plan aligns
/// them) with what the kernel must do to it. A token is allowed when its mask bit
/// is set; tokens past the mask are disallowed; elements past the vocabulary count
/// as allowed (the kernel must never touch them).
fn expected_vectors(case: &Case, rows: &[usize], vec: usize) -> Vec<Vector> {
    let elem = case.dtype.size();
    let LogitsLayout { vocab, row_stride, .. } = case.layout;
    let words = case.mask_layout.words;
    let mut out = Vec::new();
    for &r in rows {
        let allowed =
            |t: usize| t >= vocab || (t / 32 < words && (case.mask[r * words + t / 32] >> (t % 32)) & 1 == 1);
        for start in (0..vocab).step_by(vec) {
            let n_allowed = (start..start + vec).filter(|&t| allowed(t)).count();
            let offset = ((r * row_stride + start) * elem) as i64;
            let kind = if n_allowed == vec {
                VectorKind::Skip
            } else if n_allowed == 0 {
                VectorKind::Fill
            } else if start + vec <= vocab {
                VectorKind::Mixed
            } else {
                VectorKind::Tail(
                    (start..start + vec)
                        .filter(|&t| !allowed(t))
                        .map(|t| ((r * row_stride + t) * elem) as i64)
                        .collect(),
                )
            };
            out.push(Vector { offset, bytes: (vec * elem) as u32, elem: elem as u32, kind });
        }
    }
    out
}

/// The accesses the vectors call for, sorted.
fn accesses_of(vectors: &[Vector]) -> Vec<Access> {
    let mut out = Vec::new();
    for v in vectors {
        let (offset, bytes) = (v.offset, v.bytes);
        match &v.kind {
            VectorKind::Skip => {}
            VectorKind::Fill => out.push(Access { offset, bytes, store: true }),
            VectorKind::Mixed => {
                out.push(Access { offset, bytes, store: false });
                out.push(Access { offset, bytes, store: true });
            }
            VectorKind::Tail(elems) => {
                out.extend(elems.iter().map(|&offset| Access { offset, bytes: v.elem, store: true }))
            }
        }
    }
    out.sort_unstable();
    out
}

/// Compares the recorded accesses with the model, as multisets; on a mismatch,
/// names the first access that is missing or extra and the vector it falls in.
fn compare_accesses(
    got: &[Access],
    vectors: &[Vector],
    layout: &LogitsLayout,
    elem: usize,
) -> Result<(), String> {
    let want = accesses_of(vectors);
    let mut got = got.to_vec();
    got.sort_unstable();
    if got == want {
        return Ok(());
    }
    let describe = |a: &Access| {
        let e = a.offset.div_euclid(elem as i64);
        let stride = layout.row_stride.max(1) as i64;
        let (row, col) = (e.div_euclid(stride), e.rem_euclid(stride));
        let vector = vectors
            .iter()
            .find(|v| v.offset <= a.offset && a.offset < v.offset + i64::from(v.bytes))
            .map_or_else(
                || "outside every masked vector".to_string(),
                |v| format!("{:?} vector at {}", v.kind, v.offset),
            );
        format!(
            "{}-byte {} at byte {} (row {row}, col {col}; {vector})",
            a.bytes,
            if a.store { "store" } else { "load" },
            a.offset
        )
    };
    // Walk both sorted lists to the first difference.
    let (mut i, mut j) = (0, 0);
    while i < got.len() && j < want.len() && got[i] == want[j] {
        i += 1;
        j += 1;
    }
    let detail = match (got.get(i), want.get(j)) {
        (Some(g), Some(w)) if g < w => format!("unexpected {}", describe(g)),
        (Some(_), Some(w)) | (None, Some(w)) => format!("missing {}", describe(w)),
        (Some(g), None) => format!("unexpected {}", describe(g)),
        (None, None) => unreachable!("equal lists were handled above"),
    };
    Err(format!("{} accesses recorded, {} expected; {detail}", got.len(), want.len()))
}

fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "emu-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cpu(case: &Case) -> Vec<u32> {
    let idx = case.indices.as_deref();
    match case.dtype {
        DType::F32 => {
            let mut v = to_f32(&case.bits);
            apply_token_bitmask_inplace_cpu(&mut v, case.layout, &case.mask, case.mask_layout, idx).unwrap();
            from_f32(&v)
        }
        DType::F16 => {
            let mut v = to_f16(&case.bits);
            apply_token_bitmask_inplace_cpu(&mut v, case.layout, &case.mask, case.mask_layout, idx).unwrap();
            from_f16(&v)
        }
        DType::BF16 => {
            let mut v = to_bf16(&case.bits);
            apply_token_bitmask_inplace_cpu(&mut v, case.layout, &case.mask, case.mask_layout, idx).unwrap();
            from_bf16(&v)
        }
    }
}

/// How many vectors of each kind a launch met (for coverage assertions).
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    skip: usize,
    fill: usize,
    mixed: usize,
    tail: usize,
}

fn check(case: &Case, offset: usize, sm: u32) -> Result<Option<(usize, Coverage)>, TestCaseError> {
    let Some(emu) = emulate(case, offset, sm, None) else {
        return Ok(None);
    };
    let want = cpu(case);
    prop_assert_eq!(emu.flag, 0);
    let context = || {
        format!(
            "dtype {} layout {:?} mask {:?} indices {:?} offset {offset} sm {sm} plan {:?}",
            case.dtype, case.layout, case.mask_layout, case.indices, emu.plan
        )
    };
    if let Some(d) = first_diff(&emu.bits, &want, &case.layout) {
        return Err(TestCaseError::fail(format!("kernel vs CPU: {d}; {}", context())));
    }
    let Some(plan) = emu.plan else {
        prop_assert!(emu.accesses.is_empty());
        return Ok(None);
    };
    let rows = masked_rows(case, case.indices.as_deref());
    let vectors = expected_vectors(case, &rows, plan.vec);
    compare_accesses(&emu.accesses, &vectors, &case.layout, case.dtype.size())
        .map_err(|e| TestCaseError::fail(format!("memory accesses: {e}; {}", context())))?;
    let mut cov = Coverage::default();
    for v in &vectors {
        match v.kind {
            VectorKind::Skip => cov.skip += 1,
            VectorKind::Fill => cov.fill += 1,
            VectorKind::Mixed => cov.mixed += 1,
            VectorKind::Tail(_) => cov.tail += 1,
        }
    }
    Ok(Some((plan.vec, cov)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn kernel_matches_cpu(case in case_strategy(5, 2100), offset in 0usize..8, sm in prop_oneof![Just(1u32), Just(8), Just(132)]) {
        check(&case, offset, sm)?;
    }
}

#[test]
fn kernel_edge_shapes() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for &(batch, vocab, pad) in
            &[(1, 1, 0), (1, 31, 1), (2, 33, 3), (2, 1023, 1), (1, 1024, 0), (2, 1057, 5)]
        {
            for (i, dw) in [-2i64, 0, 2].into_iter().enumerate() {
                for use_idx in [false, true] {
                    let case = make_case(dtype, batch, vocab, pad, i == 1, dw, 1, use_idx, i as u64 + 7);
                    for offset in [0, 1, 2, 4] {
                        check(&case, offset, 132).unwrap();
                    }
                }
            }
        }
    }
}

#[test]
fn kernel_many_warps_per_block() {
    // Large batch on a "small" device: 8 warps per block, several blocks per row.
    let case = make_case(DType::BF16, 40, 5000, 0, false, 0, 0, false, 99);
    let plan = plan_launch(2, 0, &case.layout, 40, 1).unwrap().unwrap();
    assert_eq!(plan.block.0, 256);
    check(&case, 0, 1).unwrap();
    let case = make_case(DType::F32, 40, 5000, 4, true, -1, 2, true, 98);
    check(&case, 0, 1).unwrap();
}

#[test]
fn kernel_skips_and_flags_out_of_range_device_indices() {
    let case = make_case(DType::F32, 3, 100, 0, false, 0, 0, false, 5);
    // Rows 2 and 0 are valid, 3 and -1 are not.
    let raw = [2, 3, -1, 0];
    let Some(emu) = emulate(&case, 0, 132, Some(&raw)) else {
        return;
    };
    assert_eq!(emu.flag, 1);
    let mut valid = case.clone();
    valid.indices = Some(vec![2, 0]);
    assert_eq!(first_diff(&emu.bits, &cpu(&valid), &case.layout), None);
    // The skipped entries touch no logits: the accesses are those of rows 2 and 0.
    let vec = emu.plan.expect("a launch").vec;
    let vectors = expected_vectors(&case, &masked_rows(&case, Some(&raw)), vec);
    compare_accesses(&emu.accesses, &vectors, &case.layout, 4).unwrap();
    // A mask with fewer rows than the logits: row 2 is out of range for it.
    let mut short = case.clone();
    short.mask_layout = MaskLayout::new(2, case.mask_layout.words);
    short.mask.truncate(2 * case.mask_layout.words);
    let emu = emulate(&short, 0, 132, Some(&[2, 1])).unwrap();
    assert_eq!(emu.flag, 1);
    let mut valid = short.clone();
    valid.indices = Some(vec![1]);
    assert_eq!(first_diff(&emu.bits, &cpu(&valid), &case.layout), None);
}

/// Element patterns that put every kind of vector in a row, whatever the vector
/// width: words of all ones (skipped vectors and, for row 0's first chunk, the
/// warp's all-ones fast path), zeros (filled vectors), alternating bits (mixed at
/// every width from 2 elements), nibbles and bytes (skipped and filled at 4
/// elements, mixed at 8), and random words.
fn store_path_mask(rows: usize, words: usize, seed: u64) -> Vec<u32> {
    let mut rng = common::Rng::new(seed);
    let mut mask = Vec::with_capacity(rows * words);
    for r in 0..rows {
        for w in 0..words {
            mask.push(if r == 0 && w < 32 {
                u32::MAX
            } else {
                match (w + r) % 6 {
                    0 => u32::MAX,
                    1 => 0,
                    2 => 0x5555_5555,
                    3 => 0x0f0f_00ff,
                    4 => 0xff00_f0f0,
                    _ => rng.next() as u32,
                }
            });
        }
    }
    mask
}

/// NaNs with payloads (quiet and signalling, both signs), infinities and zeros
/// spread over the logits: allowed elements of mixed vectors must keep these bits
/// exactly, which a float select or conversion would not.
fn sprinkle_special_bits(case: &mut Case) {
    let specials: &[u32] = if case.dtype == DType::F32 {
        &[0x7fc0_1234, 0xffa0_0001, 0x7f80_0001, 0x8000_0000, 0x7f80_0000, 0xff80_0000]
    } else if case.dtype == DType::F16 {
        &[0x7e01, 0xfd55, 0x7c01, 0x8000, 0x7c00, 0xfc00]
    } else {
        &[0x7fc1, 0xffa5, 0x7f81, 0x8000, 0x7f80, 0xff80]
    };
    for (i, b) in case.bits.iter_mut().enumerate().filter(|(i, _)| i % 5 == 0) {
        *b = specials[(i / 5) % specials.len()];
    }
}

/// The store paths for every dtype and every alignment the plan can pick: the
/// logits start 0..8 elements past a 16-byte boundary and rows have even and odd
/// strides, so every vector width (16, 8, 4 and 2 bytes) is used, and each launch
/// with vectors of 2 elements or more must meet skipped, filled and mixed vectors
/// (and, with a vocabulary that is not a multiple of the width, a straddling tail).
/// The accesses of every launch are checked against the model.
#[test]
fn kernel_store_paths_every_dtype_and_alignment() {
    if harness().is_none() {
        return;
    }
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let mut widths_seen = std::collections::BTreeSet::new();
        let mut tails_seen = 0;
        for (batch, vocab, pad) in [(3, 3000, 0), (3, 2085, 1), (2, 2085, 3), (2, 1029, 6), (1, 2077, 0)] {
            for use_idx in [false, true] {
                let mut case = make_case(dtype, batch, vocab, pad, false, 0, 1, use_idx, vocab as u64);
                case.mask = store_path_mask(case.mask_layout.rows, case.mask_layout.words, batch as u64);
                if use_idx {
                    // Every row, one of them twice (duplicates are allowed and
                    // idempotent: the second pass writes the same bits).
                    let mut idx: Vec<i32> = (0..batch as i32).rev().collect();
                    idx.push(0);
                    case.indices = Some(idx);
                }
                sprinkle_special_bits(&mut case);
                for offset in 0..8 {
                    let (vec, cov) =
                        check(&case, offset, 132).unwrap_or_else(|e| panic!("{e}")).expect("a launch");
                    widths_seen.insert(vec * dtype.size());
                    if vec > 1 {
                        assert!(
                            cov.skip > 0 && cov.fill > 0 && cov.mixed > 0,
                            "{dtype} vocab {vocab} pad {pad} offset {offset} vec {vec}: {cov:?}"
                        );
                    }
                    tails_seen += cov.tail;
                }
            }
        }
        let all: std::collections::BTreeSet<usize> =
            if dtype == DType::F32 { [4, 8, 16].into() } else { [2, 4, 8, 16].into() };
        assert_eq!(widths_seen, all, "{dtype}: vector widths used");
        assert!(tails_seen > 0, "{dtype}: no straddling tail vector met");
    }
}

/// The access check itself: it must reject a mixed vector written element by
/// element (what the kernel did before whole-vector stores), a load of an
/// all-disallowed vector, any access to an all-allowed vector, a second store, and
/// a store past the vocabulary.
#[test]
fn access_check_rejects_narrow_and_extra_accesses() {
    let mut case = make_case(DType::BF16, 2, 1061, 3, false, 0, 0, false, 3);
    case.mask = store_path_mask(2, case.mask_layout.words, 3);
    let vectors = expected_vectors(&case, &[0, 1], 8);
    let good = accesses_of(&vectors);
    let check = |log: &[Access]| compare_accesses(log, &vectors, &case.layout, 2);
    assert_eq!(check(&good), Ok(()));
    let find =
        |want: fn(&VectorKind) -> bool| vectors.iter().find(|v| want(&v.kind)).expect("vector kind present");

    // A mixed vector stored as one narrow store per disallowed element.
    let mixed = find(|k| *k == VectorKind::Mixed);
    let mut narrow: Vec<Access> =
        good.iter().copied().filter(|a| !(a.store && a.offset == mixed.offset)).collect();
    narrow.extend((0..8).map(|j| Access { offset: mixed.offset + 2 * j, bytes: 2, store: true }));
    assert!(check(&narrow).unwrap_err().contains("unexpected 2-byte store"));
    // The old scheme exactly: no load of the mixed vector either.
    let no_load: Vec<Access> =
        narrow.iter().copied().filter(|a| a.store || a.offset != mixed.offset).collect();
    assert!(check(&no_load).is_err());

    // An all-disallowed vector read before it is written.
    let fill = find(|k| *k == VectorKind::Fill);
    let mut loaded = good.clone();
    loaded.push(Access { offset: fill.offset, bytes: 16, store: false });
    assert!(check(&loaded).unwrap_err().contains("unexpected 16-byte load"));

    // An all-allowed vector loaded, or stored.
    let skip = find(|k| *k == VectorKind::Skip);
    for store in [false, true] {
        let mut touched = good.clone();
        touched.push(Access { offset: skip.offset, bytes: 16, store });
        assert!(check(&touched).unwrap_err().contains("Skip vector"));
    }

    // A mixed vector stored twice, and its store missing.
    let mut twice = good.clone();
    twice.push(Access { offset: mixed.offset, bytes: 16, store: true });
    assert!(check(&twice).is_err());
    let missing: Vec<Access> =
        good.iter().copied().filter(|a| !(a.store && a.offset == mixed.offset)).collect();
    assert!(check(&missing).unwrap_err().contains("missing 16-byte store"));

    // The straddling tail written as a whole vector (past the vocabulary).
    let tail = find(|k| matches!(k, VectorKind::Tail(_)));
    let mut whole: Vec<Access> =
        good.iter().copied().filter(|a| !(a.offset >= tail.offset && a.offset < tail.offset + 16)).collect();
    whole.push(Access { offset: tail.offset, bytes: 16, store: false });
    whole.push(Access { offset: tail.offset, bytes: 16, store: true });
    assert!(check(&whole).is_err());
}
