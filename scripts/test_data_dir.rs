// The one rule for where tests find their data, `include!`d by each crate's test helpers
// (core's unit and integration tests, the mistral.rs adapter's tests, the conformance
// corpus), so that the order below cannot drift between them. `env!("CARGO_MANIFEST_DIR")`
// expands in the including crate.

/// The test data folder: `$GRAMMASK_TEST_DATA`, else `../shared/data` beside the checkout,
/// else `.test-data/` in it (what `scripts/fetch-test-data.sh` assembles). Without any of
/// them, the error says how to get the data: tests must fail, never skip.
pub fn test_data_dir() -> Result<std::path::PathBuf, String> {
    use std::path::{Path, PathBuf};
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The checkout's root: the folder that holds the fetch script, whatever the crate's depth.
    let root = manifest.ancestors().find(|d| d.join("scripts/fetch-test-data.sh").is_file()).unwrap_or(manifest);
    let mut tried = Vec::new();
    if let Some(d) = std::env::var_os("GRAMMASK_TEST_DATA") {
        let d = PathBuf::from(d);
        if d.is_dir() {
            return Ok(d);
        }
        tried.push(format!("$GRAMMASK_TEST_DATA ({})", d.display()));
    }
    for d in [root.join("../shared/data"), root.join(".test-data")] {
        if d.is_dir() {
            return Ok(d);
        }
        tried.push(d.display().to_string());
    }
    Err(format!(
        "no test data (looked in {}): run scripts/fetch-test-data.sh, or set GRAMMASK_TEST_DATA",
        tried.join(", ")
    ))
}
