//! How the CUDA kernel is launched for a given shape: which variant (element width
//! and vector width) and what grid. Pure arithmetic, compiled with or without the
//! `cuda` feature, so the launch geometry is unit-tested everywhere and the kernel
//! emulation test (`tests/kernel_emulation.rs`) runs the exact plan the device
//! would get.

use crate::error::{BitmaskError, Result};
use crate::{ApplyError, LogitsLayout};

/// Entry points of `kernel/bitmask.cu`, indexed by [`LaunchPlan::kernel`].
pub const KERNEL_NAMES: [&str; 7] = [
    "grammask_bitmask_b32_v4",
    "grammask_bitmask_b32_v2",
    "grammask_bitmask_b32_v1",
    "grammask_bitmask_b16_v8",
    "grammask_bitmask_b16_v4",
    "grammask_bitmask_b16_v2",
    "grammask_bitmask_b16_v1",
];

/// Logits handled by one warp: 32 mask words.
pub const LOGITS_PER_WARP: usize = 1024;

/// Upper bound on warps per block (the kernel is compiled with
/// `__launch_bounds__(256)`).
pub const MAX_WARPS_PER_BLOCK: u32 = 8;

/// A kernel launch: variant and geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchPlan {
    /// Index into [`KERNEL_NAMES`].
    pub kernel: usize,
    /// Elements per vector store.
    pub vec: usize,
    /// Grid: `(rows, blocks per row, 1)`.
    pub grid: (u32, u32, u32),
    /// Block: `(32 * warps, 1, 1)`.
    pub block: (u32, u32, u32),
    /// Warps (1024-logit chunks) per row.
    pub chunks_per_row: i32,
}

/// Plans a launch masking `rows` rows of `layout` whose buffer starts at device
/// address `logits_addr`, on a device with `sm_count` multiprocessors. `None` when
/// there is nothing to do (no rows or an empty vocabulary).
///
/// The vector width is the largest (up to 16 bytes) that both the buffer address
/// and the row stride are aligned to, so every vector store is aligned. Warps per
/// block shrink from 8 towards 1 until the grid has at least two blocks per
/// multiprocessor, so small batches still spread over the whole device.
pub fn plan_launch(
    elem_size: usize,
    logits_addr: u64,
    layout: &LogitsLayout,
    rows: usize,
    sm_count: u32,
) -> Result<Option<LaunchPlan>> {
    if rows == 0 || layout.vocab == 0 {
        return Ok(None);
    }
    let variants: &[(usize, usize)] = match elem_size {
        4 => &[(4, 0), (2, 1), (1, 2)],
        2 => &[(8, 3), (4, 4), (2, 5), (1, 6)],
        _ => return Err(ApplyError::UnsupportedDType(format!("{elem_size}-byte elements")).into()),
    };
    if logits_addr % elem_size as u64 != 0 {
        return Err(BitmaskError::Misaligned { what: "logits", addr: logits_addr, align: elem_size });
    }
    let stride_bytes = (layout.row_stride as u128) * elem_size as u128;
    let (vec, kernel) = variants
        .iter()
        .copied()
        .find(|&(vec, _)| {
            let bytes = (vec * elem_size) as u128;
            u128::from(logits_addr) % bytes == 0 && (layout.batch <= 1 || stride_bytes % bytes == 0)
        })
        .unwrap_or((1, variants[variants.len() - 1].1));

    let chunks_per_row = layout.vocab.div_ceil(LOGITS_PER_WARP);
    let chunks_i32 = i32::try_from(chunks_per_row).map_err(|_| ApplyError::TooLarge {
        what: "vocab",
        value: layout.vocab as u128,
        limit: i32::MAX as u128,
    })?;
    let grid_x = u32::try_from(rows).ok().filter(|&r| r <= i32::MAX as u32).ok_or(ApplyError::TooLarge {
        what: "rows to mask",
        value: rows as u128,
        limit: i32::MAX as u128,
    })?;

    let total_warps = rows as u128 * chunks_per_row as u128;
    let target_blocks = 2 * u128::from(sm_count.max(1));
    let mut warps = MAX_WARPS_PER_BLOCK;
    while warps > 1 && total_warps / u128::from(warps) < target_blocks {
        warps /= 2;
    }
    // Never more warps per block than the row has chunks.
    let chunk_pow2 = u32::try_from(chunks_per_row.next_power_of_two()).unwrap_or(u32::MAX);
    warps = warps.min(chunk_pow2).max(1);

    let blocks_per_row = chunks_per_row.div_ceil(warps as usize);
    let grid_y = u32::try_from(blocks_per_row).ok().filter(|&b| b <= 65_535).ok_or(ApplyError::TooLarge {
        what: "vocab",
        value: layout.vocab as u128,
        limit: 65_535u128 * LOGITS_PER_WARP as u128,
    })?;
    Ok(Some(LaunchPlan {
        kernel,
        vec,
        grid: (grid_x, grid_y, 1),
        block: (32 * warps, 1, 1),
        chunks_per_row: chunks_i32,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_widest_aligned_vector() {
        let l = LogitsLayout::contiguous(4, 128_256);
        let p = plan_launch(4, 0x1000, &l, 4, 132).unwrap().unwrap();
        assert_eq!((p.vec, KERNEL_NAMES[p.kernel]), (4, "grammask_bitmask_b32_v4"));
        // Stride of 3 f32 = 12 bytes: only 4-byte stores stay aligned.
        let l = LogitsLayout::strided(4, 3, 3);
        let p = plan_launch(4, 0x1000, &l, 4, 132).unwrap().unwrap();
        assert_eq!(p.vec, 1);
        // A single row ignores the stride.
        let l = LogitsLayout::strided(1, 3, 3);
        assert_eq!(plan_launch(4, 0x1000, &l, 1, 132).unwrap().unwrap().vec, 4);
        // bf16 with an 8-byte aligned base.
        let l = LogitsLayout::contiguous(2, 1024);
        let p = plan_launch(2, 0x1008, &l, 2, 132).unwrap().unwrap();
        assert_eq!((p.vec, KERNEL_NAMES[p.kernel]), (4, "grammask_bitmask_b16_v4"));
    }

    #[test]
    fn geometry() {
        let l = LogitsLayout::contiguous(1, 128_256);
        let p = plan_launch(4, 0, &l, 1, 132).unwrap().unwrap();
        assert_eq!(p.chunks_per_row, 126);
        assert_eq!(p.block.0, 32);
        assert_eq!(p.grid, (1, 126, 1));
        let l = LogitsLayout::contiguous(4096, 128_256);
        let p = plan_launch(4, 0, &l, 4096, 132).unwrap().unwrap();
        assert_eq!(p.block.0, 256);
        assert_eq!(p.grid, (4096, 16, 1));
        let l = LogitsLayout::contiguous(64, 100);
        let p = plan_launch(2, 0, &l, 64, 132).unwrap().unwrap();
        assert_eq!((p.block.0, p.grid), (32, (64, 1, 1)));
        assert!(plan_launch(4, 0, &l, 0, 132).unwrap().is_none());
        assert!(matches!(plan_launch(4, 2, &l, 1, 132), Err(BitmaskError::Misaligned { .. })));
    }
}
