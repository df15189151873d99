//! dlm_tool: not written yet. The binary exists so the workspace has its final shape;
//! it refuses to run rather than pretend to query a daemon.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("dlm_tool: this build has no commands yet; use the C dlm_tool");
    ExitCode::from(1)
}
