//! dlm_controld: not written yet. The binary exists so the workspace has its final shape;
//! it refuses to run rather than pretend to be a daemon.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("dlm_controld: this build has no daemon yet; use the C dlm_controld");
    ExitCode::from(1)
}
