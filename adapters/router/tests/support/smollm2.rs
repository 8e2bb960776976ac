// Included by the router's tests that run SmolLM2-135M-Instruct.

/// SmolLM2-135M-Instruct's Q4_1 GGUF (`GRAMMASK_SMOLLM2`, else where
/// `adapters/mistralrs/scripts/fetch-smollm2.sh` puts it), if present; with
/// `GRAMMASK_REQUIRE_MODELS` set (`.ci/run`) its absence fails the test.
fn smollm2_path() -> Option<std::path::PathBuf> {
    let p = std::env::var_os("GRAMMASK_SMOLLM2").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("GRAMMASK_REQUIRE_MODELS").is_none(),
        "{} is missing: run adapters/mistralrs/scripts/fetch-smollm2.sh",
        p.display()
    );
    eprintln!("skipped: {} is missing (adapters/mistralrs/scripts/fetch-smollm2.sh fetches it)", p.display());
    None
}
