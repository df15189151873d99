//! dlm_controld: the command line and configuration exactly as the C daemon's, plus three
//! options of this implementation: `--kernel-root DIR` (the kernel seam; default `/`),
//! `--cluster corosync|embedded` (default corosync) and `--metrics ADDR:PORT|off` (the
//! Prometheus endpoint; default 127.0.0.1:9465).

use std::process::ExitCode;

use dlm_controld::config::{CliAction, Config, DEFAULT_CONF, Options, parse_args};
use dlm_controld::daemon::{ClusterKind, DaemonArgs, run};
use dlm_controld::kernel::KernelRoot;

/// Removes this implementation's own options from the argument list.
fn own_options(
    args: &mut Vec<String>,
) -> Result<(KernelRoot, ClusterKind, Option<std::net::SocketAddr>), String> {
    let mut root = KernelRoot::new("/");
    let mut cluster = ClusterKind::Corosync;
    let mut metrics = Some(std::net::SocketAddr::from((
        [127, 0, 0, 1],
        DEFAULT_METRICS_PORT,
    )));
    let mut rest = Vec::new();
    let mut it = std::mem::take(args).into_iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k.to_owned(), Some(v.to_owned())),
            _ => (a.clone(), None),
        };
        match key.as_str() {
            "--kernel-root" | "--cluster" | "--metrics" => {
                let v = inline
                    .or_else(|| it.next())
                    .ok_or(format!("option {key} requires arg"))?;
                if key == "--metrics" {
                    metrics =
                        if v == "off" {
                            None
                        } else {
                            Some(v.parse().map_err(|_| {
                                format!("--metrics takes ADDRESS:PORT or off, not {v}")
                            })?)
                        };
                } else if key == "--kernel-root" {
                    root = KernelRoot::new(v);
                } else {
                    cluster = match v.as_str() {
                        "corosync" => ClusterKind::Corosync,
                        "embedded" => ClusterKind::Embedded,
                        _ => {
                            return Err(format!("--cluster must be corosync or embedded, not {v}"));
                        }
                    };
                }
            }
            _ => rest.push(a),
        }
    }
    *args = rest;
    Ok((root, cluster, metrics))
}

/// Port of the Prometheus endpoint unless `--metrics` says otherwise.
const DEFAULT_METRICS_PORT: u16 = 9465;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let (kernel_root, cluster, metrics) = match own_options(&mut args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let cli = match parse_args(&args) {
        Ok(CliAction::Help) => {
            print!("{}", Options::usage());
            println!(
                "  --kernel-root <dir>\n        root of the kernel interfaces (a fake kernel's directory in tests) [/]\n"
            );
            println!(
                "  --cluster corosync|embedded\n        group communication: corosync, or a one-node embedded group [corosync]\n"
            );
            println!(
                "  --metrics <address:port>|off\n        Prometheus endpoint (GET /metrics) [127.0.0.1:{DEFAULT_METRICS_PORT}]\n"
            );
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
    let conf_path = if kernel_root.is_real() {
        DEFAULT_CONF.into()
    } else {
        kernel_root.path("etc/dlm/dlm.conf")
    };
    let conf_text = std::fs::read_to_string(&conf_path).ok();
    let config = match Config::load(&cli, conf_text.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    for w in &config.file.warnings {
        eprintln!("{} line {}: {}", conf_path.display(), w.line, w.why);
    }
    match run(DaemonArgs {
        kernel_root,
        cluster,
        config,
        conf_text,
        conf_path: Some(conf_path),
        metrics,
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dlm_controld: {e}");
            ExitCode::from(1)
        }
    }
}
