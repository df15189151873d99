//! Parsing one option value, the same way from the command line, dlm.conf and set_config.

use super::options::{Opt, OptType, Value};

/// Why a value does not fit its option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not a number where one is needed (4.2.0: "requires digit number").
    #[error("option {name} requires digit number, got {value:?}")]
    NotNumber {
        /// Option.
        name: &'static str,
        /// What was given.
        value: String,
    },
    /// A number out of the option's range.
    #[error("option {name} value {value} out of range")]
    Range {
        /// Option.
        name: &'static str,
        /// What was given.
        value: String,
    },
    /// `protocol` other than tcp, sctp, detect, 0, 1, 2.
    #[error("option protocol must be tcp, sctp or detect, got {0:?}")]
    Protocol(String),
    /// An option this daemon refuses.
    #[error("{0}")]
    Refused(&'static str),
}

/// C `strtoul(s, NULL, 0)` accepting the whole string: decimal, `0x` hex, leading-0 octal.
fn parse_uint(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// Parses `value` for option `o`.
pub(crate) fn parse(o: Opt, value: &str) -> Result<Value, ValueError> {
    let spec = o.spec();
    let bad = || ValueError::NotNumber {
        name: spec.name,
        value: value.to_owned(),
    };
    let v = match spec.ty {
        OptType::Str => {
            let p = value.to_ascii_lowercase();
            return match p.as_str() {
                "tcp" | "0" | "sctp" | "1" | "detect" | "2" => Ok(Value::Str(p)),
                _ => Err(ValueError::Protocol(value.to_owned())),
            };
        }
        OptType::Flag | OptType::Bool => {
            let n: i64 = value.parse().map_err(|_| bad())?;
            i64::from(n != 0)
        }
        OptType::Int => {
            let n: i64 = value.parse().map_err(|_| bad())?;
            i32::try_from(n).map_err(|_| ValueError::Range {
                name: spec.name,
                value: value.to_owned(),
            })?;
            n
        }
        OptType::Uint => {
            let n = parse_uint(value).ok_or_else(bad)?;
            u32::try_from(n)
                .map(i64::from)
                .map_err(|_| ValueError::Range {
                    name: spec.name,
                    value: value.to_owned(),
                })?
        }
    };
    if o == Opt::PlockOwnership && v != 0 {
        return Err(ValueError::Refused(
            "plock_ownership=1 is not supported by this dlm_controld: it breaks the reply \
             order kernels >= 6.5 rely on; run every node with plock_ownership=0",
        ));
    }
    Ok(Value::Num(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse(Opt::Port, "0x5248"), Ok(Value::Num(21064)));
        assert_eq!(parse(Opt::Mark, "010"), Ok(Value::Num(8)));
        assert_eq!(parse(Opt::PostJoinDelay, "-1"), Ok(Value::Num(-1)));
        assert_eq!(parse(Opt::EnableFencing, "5"), Ok(Value::Num(1)));
        assert_eq!(parse(Opt::Protocol, "SCTP"), Ok(Value::Str("sctp".into())));
        assert!(matches!(
            parse(Opt::PostJoinDelay, "ten"),
            Err(ValueError::NotNumber { .. })
        ));
        assert!(matches!(
            parse(Opt::Port, "-1"),
            Err(ValueError::NotNumber { .. })
        ));
        assert!(matches!(
            parse(Opt::Port, "4294967296"),
            Err(ValueError::Range { .. })
        ));
        assert!(matches!(
            parse(Opt::Protocol, "udp"),
            Err(ValueError::Protocol(_))
        ));
        assert!(matches!(
            parse(Opt::PlockOwnership, "1"),
            Err(ValueError::Refused(_))
        ));
        assert_eq!(parse(Opt::PlockOwnership, "0"), Ok(Value::Num(0)));
    }
}
