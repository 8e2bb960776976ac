// Included by the router's tests that drive the official Python clients.

/// The pinned clients' python (`adapters/router/scripts/client-venv.sh`), if installed;
/// with `GRAMMASK_REQUIRE_CLIENTS` set (`.ci/run`) its absence fails the test.
fn clients_python() -> Option<std::path::PathBuf> {
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-clients/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var_os("GRAMMASK_REQUIRE_CLIENTS").is_none(),
        "{} is missing: run adapters/router/scripts/client-venv.sh",
        python.display()
    );
    eprintln!("skipped: the official clients are not installed (adapters/router/scripts/client-venv.sh)");
    None
}

/// Runs `tests/clients/<script>` with `python` against the router at `base` (off the
/// async workers); its standard output, once it exited successfully.
async fn run_client_script(python: std::path::PathBuf, script: &str, base: String) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients").join(script);
    let out = tokio::task::spawn_blocking(move || std::process::Command::new(python).arg(script).arg(base).output())
        .await
        .expect("the client task")
        .expect("python runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout.into_owned()
}
