//! dlm_controld: the command line and configuration exactly as the C daemon's, plus four
//! options of this implementation: `--kernel-root DIR` (the kernel seam; default `/`),
//! `--cluster corosync|embedded` (default corosync), `--metrics ADDR:PORT|off` (the
//! Prometheus endpoint; default 127.0.0.1:9465; dlm.conf `metrics=`) and
//! `--log-format c|json` (the log file and stderr; default c; dlm.conf `log_format=`).

use std::process::ExitCode;

use dlm_controld::config::{CliAction, Config, Options, parse_args};
use dlm_controld::daemon::{ClusterKind, DaemonArgs, run};

/// This implementation's own options.
#[derive(Debug)]
struct Own {
    root: std::path::PathBuf,
    cluster: ClusterKind,
    /// `--metrics`, unparsed (dlm.conf's `metrics=` when absent).
    metrics: Option<String>,
    /// `--log-format` (dlm.conf's `log_format=` when absent).
    log_format: Option<String>,
    /// `--syslog on|off` (default: on for the real kernel root).
    syslog: Option<bool>,
}

/// Removes this implementation's own options from the argument list.
fn own_options(args: &mut Vec<String>) -> Result<Own, String> {
    let mut own = Own {
        root: "/".into(),
        cluster: ClusterKind::Corosync,
        metrics: None,
        log_format: None,
        syslog: None,
    };
    let mut rest = Vec::new();
    let mut it = std::mem::take(args).into_iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k.to_owned(), Some(v.to_owned())),
            _ => (a.clone(), None),
        };
        match key.as_str() {
            "--kernel-root" | "--cluster" | "--metrics" | "--log-format" | "--syslog" => {
                let v = inline
                    .or_else(|| it.next())
                    .ok_or(format!("option {key} requires arg"))?;
                match key.as_str() {
                    "--metrics" => own.metrics = Some(v),
                    "--log-format" => own.log_format = Some(v),
                    "--syslog" => {
                        own.syslog = Some(match v.as_str() {
                            "on" => true,
                            "off" => false,
                            _ => return Err(format!("--syslog must be on or off, not {v}")),
                        });
                    }
                    "--kernel-root" => own.root = v.into(),
                    _ => {
                        own.cluster = match v.as_str() {
                            "corosync" => ClusterKind::Corosync,
                            "embedded" => ClusterKind::Embedded,
                            _ => {
                                return Err(format!(
                                    "--cluster must be corosync or embedded, not {v}"
                                ));
                            }
                        };
                    }
                }
            }
            _ => rest.push(a),
        }
    }
    *args = rest;
    Ok(own)
}

/// `ADDRESS:PORT` or `off`.
fn parse_metrics(v: Option<&str>) -> Result<Option<std::net::SocketAddr>, String> {
    match v {
        None => Ok(Some(std::net::SocketAddr::from((
            [127, 0, 0, 1],
            DEFAULT_METRICS_PORT,
        )))),
        Some("off") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| format!("metrics takes ADDRESS:PORT or off, not {v}")),
    }
}

/// `c` or `json`: whether the log file and stderr get JSON lines.
fn parse_log_format(v: Option<&str>) -> Result<bool, String> {
    match v {
        None | Some("c") => Ok(false),
        Some("json") => Ok(true),
        Some(v) => Err(format!("log format must be c or json, not {v}")),
    }
}

/// Port of the Prometheus endpoint unless `--metrics` says otherwise.
const DEFAULT_METRICS_PORT: u16 = 9465;

fn main() -> ExitCode {
    match daemon_args() {
        Ok(Some(args)) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("dlm_controld: {e}");
                ExitCode::from(1)
            }
        },
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

/// The daemon's arguments from its command line and dlm.conf (`None`: help or version
/// printed, nothing to run).
fn daemon_args() -> Result<Option<DaemonArgs>, String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let own = own_options(&mut args).map_err(|e| e.to_string())?;
    let cli = match parse_args(&args).map_err(|e| e.to_string())? {
        CliAction::Help => {
            print_usage();
            return Ok(None);
        }
        CliAction::Version => {
            println!("dlm_controld {} (Rust)", env!("CARGO_PKG_VERSION"));
            return Ok(None);
        }
        CliAction::Run(cli) => cli,
    };
    let kernel = dlm_controld::kernel::open(&own.root);
    let conf_path = kernel.conf_file();
    let conf_text = std::fs::read_to_string(&conf_path).ok();
    let config = Config::load(&cli, conf_text.as_deref()).map_err(|e| e.to_string())?;
    for w in &config.file.warnings {
        eprintln!("{} line {}: {}", conf_path.display(), w.line, w.why);
    }
    let metrics = parse_metrics(own.metrics.as_deref().or(config.file.metrics.as_deref()))
        .map_err(|e| e.to_string())?;
    let log_json = parse_log_format(
        own.log_format
            .as_deref()
            .or(config.file.log_format.as_deref()),
    )
    .map_err(|e| e.to_string())?;
    Ok(Some(DaemonArgs {
        syslog: own.syslog.unwrap_or(kernel.syslog_by_default()),
        kernel,
        cluster: own.cluster,
        config,
        conf_text,
        conf_path: Some(conf_path),
        metrics,
        log_json,
    }))
}

/// `-h`: C's options, then ours.
fn print_usage() {
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
    println!(
        "  --log-format c|json\n        lines of the log file and stderr: C's text or JSON objects [c]\n"
    );
    println!(
        "  --syslog on|off\n        lines to syslog (LOCAL4) [on with the real kernel root]\n"
    );
}
