//! Runs the CUDA kernel source on the host: `tests/emu/harness.cpp` compiles
//! `src/kernel/bitmask.cu` as C++ against a small shim of CUDA's builtins (one
//! thread per lane, barriers for the warp shuffles) and executes exactly the launch
//! [`plan_launch`] chooses. Results are compared bit for bit with the CPU path.
//!
//! This checks the kernel's indexing, tails, vector widths, alignment, fast paths
//! and out-of-range index handling on machines without a GPU. It does not replace
//! `tests/gpu_props.rs` (real device, `--ignored`). Skipped, with a message, when
//! no C++20 compiler (`c++`/`g++`/`clang++`, or `$CXX`) is found.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use grammask_gpu::plan::plan_launch;
use grammask_gpu::{apply_token_bitmask_inplace_cpu, DType, MaskLayout};
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
        eprintln!("kernel_emulation: no C++ compiler found, skipping");
        None
    })
    .as_deref()
}

/// Result of one emulated launch: logits bits and the index-error flag.
struct Emulated {
    bits: Vec<u32>,
    flag: u32,
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
        return Some(Emulated { bits: case.bits.clone(), flag: 0 });
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
    let (data, flag) = out.split_at(out.len() - 4);
    let bits = if elem == 4 {
        data.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    } else {
        data.chunks_exact(2).map(|c| u32::from(u16::from_le_bytes([c[0], c[1]]))).collect()
    };
    Some(Emulated { bits, flag: u32::from_le_bytes([flag[0], flag[1], flag[2], flag[3]]) })
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

fn check(case: &Case, offset: usize, sm: u32) -> Result<(), TestCaseError> {
    let Some(emu) = emulate(case, offset, sm, None) else {
        return Ok(());
    };
    let want = cpu(case);
    prop_assert_eq!(emu.flag, 0);
    if let Some(d) = first_diff(&emu.bits, &want, &case.layout) {
        return Err(TestCaseError::fail(format!(
            "kernel vs CPU: {d}; dtype {} layout {:?} mask {:?} indices {:?} offset {offset} sm {sm}",
            case.dtype, case.layout, case.mask_layout, case.indices
        )));
    }
    Ok(())
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
