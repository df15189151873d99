//! The option table of dlm_controld 4.2.0 (`set_opt_defaults`), its values and where each
//! value came from.

use std::fmt::Write as _;

/// How an option's value is written and parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptType {
    /// 0|1, value optional on the command line (`-D` = 1).
    Flag,
    /// 0|1 (any integer: non-zero is 1).
    Bool,
    /// Signed decimal.
    Int,
    /// Unsigned, C `strtoul` base 0 (decimal, 0x hex, 0 octal).
    Uint,
    /// A word.
    Str,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct OptSpec {
    /// `--name` and the dlm.conf key.
    pub name: &'static str,
    /// `-x`, if any.
    pub letter: Option<char>,
    /// Value type.
    pub ty: OptType,
    /// Default (numbers; `protocol` has its own string default).
    pub default: i64,
    /// Re-read by `reload_config` (4.2.0's "(*)" options).
    pub reload: bool,
    /// Accepted by `set_config`.
    pub settable: bool,
    /// Usage text; empty = hidden from `--help`.
    pub desc: &'static str,
}

macro_rules! opts {
    ($( $id:ident $name:literal $letter:expr, $ty:ident, $def:expr, $reload:literal, $set:literal, $desc:literal; )*) => {
        /// An option of the table, by position.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[allow(missing_docs)]
        pub enum Opt { $($id),* }

        /// The table, in 4.2.0's order (`--help`, `dump_config`).
        pub const TABLE: &[OptSpec] = &[
            $(OptSpec { name: $name, letter: $letter, ty: OptType::$ty, default: $def,
                reload: $reload, settable: $set, desc: $desc }),*
        ];

        impl Opt {
            /// Every option, in table order.
            pub const ALL: &[Opt] = &[$(Opt::$id),*];
        }
    };
}

opts! {
    DaemonDebug "daemon_debug" Some('D'), Flag, 0, true, true, "log to stderr and stay in the foreground";
    Foreground "foreground" None, Flag, 0, false, false, "stay in the foreground";
    LogDebug "log_debug" Some('K'), Flag, 0, true, true, "turn on the kernel dlm's debug messages";
    Protocol "protocol" Some('r'), Str, 0, false, false, "kernel lowcomms protocol: tcp, sctp or detect";
    Port "port" Some('R'), Uint, 21064, false, false, "kernel lowcomms port";
    DebugLogfile "debug_logfile" Some('L'), Flag, 0, true, true, "write debug lines to the log file";
    BindAll "bind_all" None, Int, 0, false, false, "";
    Mark "mark" None, Uint, 0, false, false, "SO_MARK of the dlm's sockets, unless a node line sets one";
    EnableFscontrol "enable_fscontrol" None, Bool, 0, false, false, "";
    EnablePlock "enable_plock" Some('p'), Bool, 1, false, false, "cluster POSIX lock support";
    PlockDebug "plock_debug" Some('P'), Flag, 0, true, true, "plock debugging";
    PlockRateLimit "plock_rate_limit" Some('l'), Int, 0, true, true, "most plock operations per second (0: no limit)";
    PlockOwnership "plock_ownership" Some('o'), Bool, 0, false, false, "plock ownership mode (not supported: must be 0)";
    DropResourcesTime "drop_resources_time" Some('t'), Int, 10000, true, true, "plock ownership: how often to drop unused resources (ms)";
    DropResourcesCount "drop_resources_count" Some('c'), Int, 10, true, true, "plock ownership: resources dropped each time";
    DropResourcesAge "drop_resources_age" Some('a'), Int, 10000, true, true, "plock ownership: unused time before a resource is dropped (ms)";
    PostJoinDelay "post_join_delay" Some('j'), Int, 30, true, true, "seconds to wait before fencing after the cluster forms";
    EnableFencing "enable_fencing" Some('f'), Bool, 1, false, false, "fence failed nodes";
    EnableConcurrentFencing "enable_concurrent_fencing" None, Bool, 0, false, false, "run several fence agents at once";
    EnableStartupFencing "enable_startup_fencing" Some('s'), Bool, 1, false, false, "fence nodes not seen at startup";
    RepeatFailedFencing "repeat_failed_fencing" None, Bool, 1, true, true, "try the fence devices again after all failed";
    EnableQuorumFencing "enable_quorum_fencing" Some('q'), Bool, 1, true, true, "fence only with quorum";
    EnableQuorumLockspace "enable_quorum_lockspace" None, Bool, 1, true, true, "change lockspaces only with quorum";
    EnableHelper "enable_helper" None, Bool, 1, false, false, "helper process that runs commands for dlm_tool run";
    Help "help" Some('h'), Flag, -1, false, false, "print this help and exit";
    Version "version" Some('V'), Flag, -1, false, false, "print the version and exit";
}

impl Opt {
    /// Its row.
    pub fn spec(self) -> &'static OptSpec {
        &TABLE[self as usize]
    }

    /// By `--name` / dlm.conf key.
    pub fn by_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|o| o.spec().name == name)
    }

    /// By `-x`.
    pub fn by_letter(c: char) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|o| o.spec().letter == Some(c))
    }
}

/// Where a value came from (shown by `dump_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Source {
    /// The built-in default.
    #[default]
    Default,
    /// The command line (always wins over the file).
    Cli,
    /// `/etc/dlm/dlm.conf`.
    File,
    /// `dlm_tool set_config` (wins over a reload of the file).
    SetConfig,
}

/// One value: a number for every option but `protocol`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Numeric options.
    Num(i64),
    /// `protocol`.
    Str(String),
}

/// The daemon's options with their sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    values: Vec<(Value, Source)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            values: Opt::ALL
                .iter()
                .map(|o| {
                    let v = if *o == Opt::Protocol {
                        Value::Str("detect".into())
                    } else {
                        Value::Num(o.spec().default)
                    };
                    (v, Source::Default)
                })
                .collect(),
        }
    }
}

impl Options {
    /// A numeric option's value (0 for `protocol`).
    pub fn num(&self, o: Opt) -> i64 {
        match &self.values[o as usize].0 {
            Value::Num(n) => *n,
            Value::Str(_) => 0,
        }
    }

    /// A boolean or flag option.
    pub fn on(&self, o: Opt) -> bool {
        self.num(o) != 0
    }

    /// The `protocol` option.
    pub fn protocol(&self) -> &str {
        match &self.values[Opt::Protocol as usize].0 {
            Value::Str(s) => s,
            Value::Num(_) => "detect",
        }
    }

    /// Where an option's value came from.
    pub fn source(&self, o: Opt) -> Source {
        self.values[o as usize].1
    }

    /// Sets a value.
    pub fn set(&mut self, o: Opt, v: Value, src: Source) {
        self.values[o as usize] = (v, src);
    }

    /// Back to the default.
    pub fn reset(&mut self, o: Opt) {
        self.values[o as usize] = Self::default().values[o as usize].clone();
    }

    /// `dlm_tool dump_config` text: `name=value[ (source)]` per option in table order.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        for &o in Opt::ALL {
            let spec = o.spec();
            let _ = match &self.values[o as usize].0 {
                Value::Str(v) => write!(s, "{}={v}", spec.name),
                Value::Num(n) => write!(s, "{}={n}", spec.name),
            };
            s.push_str(match self.source(o) {
                Source::Default => "",
                Source::Cli => " (cli option)",
                Source::File => " (dlm.conf)",
                Source::SetConfig => " (set_config)",
            });
            s.push('\n');
        }
        s
    }

    /// `--help` text.
    pub fn usage() -> String {
        let mut s = String::from(
            "Usage:\n\ndlm_controld [options]\n\nOption [arg]\nDescription [default]\n\n",
        );
        let d = Self::default();
        for &o in Opt::ALL {
            let spec = o.spec();
            if spec.desc.is_empty() {
                continue;
            }
            let _ = write!(s, "  --{}", spec.name);
            if let Some(c) = spec.letter {
                let _ = write!(s, " | -{c}");
            }
            let arg = match spec.ty {
                _ if matches!(o, Opt::Help | Opt::Version) => "",
                OptType::Flag | OptType::Bool => " 0|1",
                OptType::Int => " <int>",
                OptType::Uint => " <arg>",
                OptType::Str => " <str>",
            };
            s.push_str(arg);
            s.push('\n');
            let _ = write!(s, "        {}", spec.desc);
            if !matches!(o, Opt::Help | Opt::Version) {
                let _ = match &d.values[o as usize].0 {
                    Value::Str(v) => write!(s, " [{v}]"),
                    Value::Num(n) => write!(s, " [{n}]"),
                };
            }
            s.push_str("\n\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/options.md names every option of the table (and `--help` the visible ones).
    #[test]
    fn every_option_is_documented() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/options.md"))
                .expect("docs/options.md");
        let help = Options::usage();
        for o in TABLE {
            assert!(
                doc.contains(&format!("`--{}`", o.name)),
                "docs/options.md lacks {}",
                o.name
            );
            if !o.desc.is_empty() {
                assert!(
                    help.contains(&format!("--{}", o.name)),
                    "--help lacks {}",
                    o.name
                );
            }
        }
    }
}
