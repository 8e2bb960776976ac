//! The official Python clients against the router: Hugging Face's `text_generation` and the
//! `openai` package, pinned in the git-ignored `.venv-clients/`
//! (`adapters/router/scripts/client-venv.sh`), run by the router's contract script
//! (`adapters/router/tests/clients/contract.py`: every TGI client method, every OpenAI call
//! the router serves, field by field) against a router started here on a loopback port.
//! The report carries the verdict; the router's own tests run the same script in CI.

use crate::engines::router::{Api, RouterEngine, RouterSetup};
use grammask_router::server::LoadedTokenizer;
use std::path::PathBuf;
use std::time::Duration;

/// What the clients said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientsVerdict {
    /// Every check passed: the script's last line (`ok: N checks`).
    Passed(String),
    /// A check failed, or the script could not run: its output.
    Failed(String),
    /// The clients are not installed (nothing was checked).
    Skipped(String),
}

impl ClientsVerdict {
    /// One line for the report.
    pub fn line(&self) -> String {
        match self {
            ClientsVerdict::Passed(s) => format!("passed ({s})"),
            ClientsVerdict::Failed(s) => format!("**failed**: {s}"),
            ClientsVerdict::Skipped(s) => format!("skipped: {s}"),
        }
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the contract script with the pinned clients against a router on `tok` and the
/// simulated model (Hermes-style tool calls, as the router's test does: a random model
/// rarely closes Qwen 3's think block).
pub fn run_official_clients(tok: LoadedTokenizer) -> ClientsVerdict {
    let python = repo().join(".venv-clients/bin/python");
    if !python.exists() {
        return ClientsVerdict::Skipped(format!(
            "{} is missing (adapters/router/scripts/client-venv.sh installs the clients)",
            python.display()
        ));
    }
    let setup = RouterSetup {
        forward: Duration::ZERO,
        max_batch_size: 8,
        tool_call_format: Some(grammask::tool_calling::Family::Hermes),
        ..RouterSetup::default()
    };
    let router = match RouterEngine::start(tok, Api::Tgi, &setup) {
        Ok(r) => r,
        Err(e) => return ClientsVerdict::Failed(e.to_string()),
    };
    let script = repo().join("adapters/router/tests/clients/contract.py");
    let out = std::process::Command::new(&python).arg(script).arg(router.base()).output();
    match out {
        Err(e) => ClientsVerdict::Failed(format!("{}: {e}", python.display())),
        Ok(o) => {
            let stdout = String::from_utf8_lossy(&o.stdout);
            let last = stdout.lines().last().unwrap_or("").to_string();
            if o.status.success() && last.starts_with("ok: ") {
                ClientsVerdict::Passed(last)
            } else {
                ClientsVerdict::Failed(format!("{stdout}{}", String::from_utf8_lossy(&o.stderr)))
            }
        }
    }
}
