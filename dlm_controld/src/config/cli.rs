//! The command line, parsed as dlm_controld 4.2.0 parses it (`read_arg_cli`):
//! `--name`, `--name=val`, `--name val`, `-x`, `-xval`, `-x val`, `-x=val`, bundled flags
//! (`-DKP`), flags with an optional `0|1`, and `help`/`version` as the first argument.
//! A hand-written parser because clap cannot accept this syntax, and drop-in means every
//! unit file and script that starts the C daemon must start this one unchanged.

use super::options::{Opt, OptType, Value};
use super::value::{ValueError, parse};

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliAction {
    /// Run the daemon with these settings (in command-line order).
    Run(Vec<(Opt, Value)>),
    /// Print the usage and exit 0.
    Help,
    /// Print the version and exit 0.
    Version,
}

/// A command line the daemon refuses (exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    /// `--bogus` / `-Z`.
    #[error("unknown option {0}")]
    Unknown(String),
    /// A word that is not an option.
    #[error("unknown option arg {0}")]
    Stray(String),
    /// An option that needs a value got none (or one starting with `-`).
    #[error("option {0} requires arg")]
    NeedsArg(String),
    /// A value that does not fit.
    #[error(transparent)]
    Value(#[from] ValueError),
}

fn takes_optional(o: Opt) -> bool {
    matches!(o.spec().ty, OptType::Flag | OptType::Bool)
}

/// Parses the arguments after the program name.
pub fn parse_args<S: AsRef<str>>(args: &[S]) -> Result<CliAction, CliError> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    match args.first().copied() {
        Some("help" | "--help" | "-h") => return Ok(CliAction::Help),
        Some("version" | "--version" | "-V") => return Ok(CliAction::Version),
        _ => {}
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i];
        i += 1;
        let next_value = |i: &mut usize, o: Opt, shown: &str| -> Result<Option<String>, CliError> {
            let next = args.get(*i).copied();
            if takes_optional(o) {
                // flags and bools take an optional 0|1 (4.2.0)
                if let Some(n) = next.filter(|n| *n == "0" || *n == "1") {
                    *i += 1;
                    return Ok(Some(n.to_owned()));
                }
                return Ok(None);
            }
            match next {
                Some(n) if !n.is_empty() && !n.starts_with('-') => {
                    *i += 1;
                    Ok(Some(n.to_owned()))
                }
                _ => Err(CliError::NeedsArg(shown.to_owned())),
            }
        };
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            let o = Opt::by_name(name).ok_or_else(|| CliError::Unknown(arg.to_owned()))?;
            if matches!(o, Opt::Help) {
                return Ok(CliAction::Help);
            }
            if matches!(o, Opt::Version) {
                return Ok(CliAction::Version);
            }
            let value = match inline {
                Some(v) if v.is_empty() => return Err(CliError::NeedsArg(arg.to_owned())),
                Some(v) => Some(v),
                None => next_value(&mut i, o, arg)?,
            };
            out.push((o, value_or_one(o, value)?));
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.char_indices().peekable();
            while let Some((pos, c)) = chars.next() {
                let o = Opt::by_letter(c).ok_or_else(|| CliError::Unknown(format!("-{c}")))?;
                if matches!(o, Opt::Help) {
                    return Ok(CliAction::Help);
                }
                if matches!(o, Opt::Version) {
                    return Ok(CliAction::Version);
                }
                let rest = &short[pos + c.len_utf8()..];
                if takes_optional(o) && chars.peek().is_some_and(|(_, n)| n.is_ascii_alphabetic()) {
                    // bundled flags: -DKP
                    out.push((o, Value::Num(1)));
                    continue;
                }
                let value = if let Some(v) = rest.strip_prefix('=') {
                    Some(v.to_owned())
                } else if !rest.is_empty() {
                    Some(rest.to_owned())
                } else {
                    next_value(&mut i, o, &format!("-{c}"))?
                };
                out.push((o, value_or_one(o, value)?));
                break;
            }
        } else {
            return Err(CliError::Stray(arg.to_owned()));
        }
    }
    Ok(CliAction::Run(out))
}

fn value_or_one(o: Opt, v: Option<String>) -> Result<Value, CliError> {
    match v {
        Some(v) => Ok(parse(o, &v)?),
        None if takes_optional(o) => Ok(Value::Num(1)),
        None => Err(CliError::NeedsArg(o.spec().name.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Vec<(Opt, Value)> {
        match parse_args(args) {
            Ok(CliAction::Run(v)) => v,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn forms() {
        use Value::Num;
        assert_eq!(run(&["--foreground"]), vec![(Opt::Foreground, Num(1))]);
        assert_eq!(run(&["-D", "0"]), vec![(Opt::DaemonDebug, Num(0))]);
        assert_eq!(
            run(&["-DKP"]),
            vec![
                (Opt::DaemonDebug, Num(1)),
                (Opt::LogDebug, Num(1)),
                (Opt::PlockDebug, Num(1))
            ]
        );
        assert_eq!(run(&["-j5"]), vec![(Opt::PostJoinDelay, Num(5))]);
        assert_eq!(run(&["-j", "5"]), vec![(Opt::PostJoinDelay, Num(5))]);
        assert_eq!(run(&["-j=5"]), vec![(Opt::PostJoinDelay, Num(5))]);
        assert_eq!(
            run(&["--post_join_delay=7"]),
            vec![(Opt::PostJoinDelay, Num(7))]
        );
        assert_eq!(
            run(&["--post_join_delay", "7"]),
            vec![(Opt::PostJoinDelay, Num(7))]
        );
        assert_eq!(
            run(&["--protocol", "sctp", "-f", "0"]),
            vec![
                (Opt::Protocol, Value::Str("sctp".into())),
                (Opt::EnableFencing, Num(0))
            ]
        );
        assert_eq!(
            run(&["--enable_fencing"]),
            vec![(Opt::EnableFencing, Num(1))]
        );
        assert_eq!(parse_args(&["--help"]), Ok(CliAction::Help));
        assert_eq!(parse_args(&["version"]), Ok(CliAction::Version));
        assert_eq!(parse_args(&["-f", "0", "-V"]), Ok(CliAction::Version));
    }

    #[test]
    fn errors() {
        assert_eq!(
            parse_args(&["--bogus"]),
            Err(CliError::Unknown("--bogus".into()))
        );
        assert_eq!(parse_args(&["-Z"]), Err(CliError::Unknown("-Z".into())));
        assert_eq!(parse_args(&["word"]), Err(CliError::Stray("word".into())));
        assert_eq!(parse_args(&["-j"]), Err(CliError::NeedsArg("-j".into())));
        assert_eq!(
            parse_args(&["-j", "-D"]),
            Err(CliError::NeedsArg("-j".into()))
        );
        assert!(matches!(
            parse_args(&["-j", "x"]),
            Err(CliError::Value(ValueError::NotNumber { .. }))
        ));
        assert!(matches!(
            parse_args(&["-o", "1"]),
            Err(CliError::Value(ValueError::Refused(_)))
        ));
    }
}
