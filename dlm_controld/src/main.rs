//! dlm_controld: parses its command line and configuration exactly as the C daemon does;
//! the daemon itself is not written yet, so after checking them it refuses to run rather
//! than pretend to be one.

use std::process::ExitCode;

use dlm_controld::config::{CliAction, Config, DEFAULT_CONF, Options, parse_args};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = match parse_args(&args) {
        Ok(CliAction::Help) => {
            print!("{}", Options::usage());
            return ExitCode::SUCCESS;
        }
        Ok(CliAction::Version) => {
            println!("dlm_controld {} (Rust)", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(CliAction::Run(cli)) => cli,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let text = std::fs::read_to_string(DEFAULT_CONF).ok();
    match Config::load(&cli, text.as_deref()) {
        Ok(c) => {
            for w in &c.file.warnings {
                eprintln!("{DEFAULT_CONF} line {}: {}", w.line, w.why);
            }
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    }
    eprintln!("dlm_controld: this build has no daemon yet; use the C dlm_controld");
    ExitCode::from(1)
}
