// The one rule for where tests find their data, `include!`d by each crate's test helpers
// (core's unit and integration tests, the mistral.rs adapter's tests, the conformance
// corpus), so that the order below cannot drift between them. `env!("CARGO_MANIFEST_DIR")`
// expands in the including crate.

/// The test data folder: `$GRAMMASK_TEST_DATA`, else `../shared/data` beside the checkout,
/// else `.test-data/` in it (what `scripts/fetch-test-data.sh` assembles). Without any of
/// them, the error says how to get the data: tests must fail, never skip.
pub fn test_data_dir() -> Result<std::path::PathBuf, String> {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // The checkout's root: the folder that holds the fetch script, whatever the crate's depth.
    let root = manifest.ancestors().find(|d| d.join("scripts/fetch-test-data.sh").is_file()).unwrap_or(manifest);
    find_test_data(std::env::var_os("GRAMMASK_TEST_DATA").map(std::path::PathBuf::from), root)
}

/// [`test_data_dir`]'s rule for a checkout at `root` and the value of `GRAMMASK_TEST_DATA`.
pub fn find_test_data(env: Option<std::path::PathBuf>, root: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let mut tried = Vec::new();
    if let Some(d) = env {
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
