//! Options and `/etc/dlm/dlm.conf`, as dlm_controld 4.2.0 reads them: command line over
//! file over default; `reload_config` re-reads the file's reloadable options; `set_config`
//! changes settable ones at run time and wins over the file until restored.

mod cli;
mod file;
mod options;
mod value;

pub use cli::{CliAction, CliError, parse_args};
pub use file::{
    CLIENTS_BUDGET_US_DEFAULT, ConfError, ConfFile, ConfWarning, FenceMethod, LockspaceConf,
    NATIVE_SYNC_MS_DEFAULT, PLOCK_LOCKS_MAX_DEFAULT, PLOCK_SPIN_US_DEFAULT, parse_conf,
};
pub use options::{Opt, OptSpec, OptType, Options, Source, TABLE, Value};
pub use value::ValueError;

/// The default path of the file.
pub const DEFAULT_CONF: &str = "/etc/dlm/dlm.conf";

/// One change made by `set_config`/`reload_config`, for the log
/// (`config dynamic <key> = <v> previous use <old>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Option.
    pub opt: Opt,
    /// Before.
    pub old: Value,
    /// After.
    pub new: Value,
}

/// Options plus the parsed file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// Current option values.
    pub options: Options,
    /// The file's sections.
    pub file: ConfFile,
}

fn value_of(o: &Options, opt: Opt) -> Value {
    if opt == Opt::Protocol {
        Value::Str(o.protocol().to_owned())
    } else {
        Value::Num(o.num(opt))
    }
}

impl Config {
    /// Builds the configuration from the command line settings and the file's text
    /// (`None`: no file, which is allowed).
    pub fn load(cli: &[(Opt, Value)], file_text: Option<&str>) -> Result<Self, ConfError> {
        let file = match file_text {
            Some(t) => parse_conf(t)?,
            None => ConfFile::default(),
        };
        let mut options = Options::default();
        for (_, o, v) in &file.options {
            options.set(*o, v.clone(), Source::File);
        }
        for (o, v) in cli {
            options.set(*o, v.clone(), Source::Cli);
        }
        Ok(Self { options, file })
    }

    /// `dlm_tool reload_config`: re-reads the file; reloadable options take the file's
    /// value (or the default if the file no longer sets them) unless the command line or
    /// `set_config` set them. Lockspace, node and fence sections are replaced.
    pub fn reload(&mut self, file_text: Option<&str>) -> Result<Vec<Change>, ConfError> {
        let file = match file_text {
            Some(t) => parse_conf(t)?,
            None => ConfFile::default(),
        };
        let mut changes = Vec::new();
        for &o in Opt::ALL {
            if !o.spec().reload || matches!(self.options.source(o), Source::Cli | Source::SetConfig)
            {
                continue;
            }
            let old = value_of(&self.options, o);
            match file.options.iter().rev().find(|(_, fo, _)| *fo == o) {
                Some((_, _, v)) => self.options.set(o, v.clone(), Source::File),
                None => self.options.reset(o),
            }
            let new = value_of(&self.options, o);
            if new != old {
                changes.push(Change { opt: o, old, new });
            }
        }
        self.file = file;
        Ok(changes)
    }

    /// `dlm_tool set_config "key=val key=val"`: settable keys change; `key=restore` goes back
    /// to the file/command line/default value; `restore_all` restores every settable key.
    /// Other keys are ignored, as C does; each ignored word is returned for the log.
    pub fn set_config(
        &mut self,
        text: &str,
        file_text: Option<&str>,
    ) -> (Vec<Change>, Vec<String>) {
        let mut changes = Vec::new();
        let mut ignored = Vec::new();
        let baseline = Self::load(&self.cli_settings(), file_text).unwrap_or_default();
        for word in text.split_whitespace() {
            let restore_one = |cfg: &mut Self, o: Opt, changes: &mut Vec<Change>| {
                let old = value_of(&cfg.options, o);
                let src = baseline.options.source(o);
                cfg.options.set(o, value_of(&baseline.options, o), src);
                let new = value_of(&cfg.options, o);
                if new != old {
                    changes.push(Change { opt: o, old, new });
                }
            };
            if word == "restore_all" {
                for &o in Opt::ALL.iter().filter(|o| o.spec().settable) {
                    restore_one(self, o, &mut changes);
                }
                continue;
            }
            let Some((key, val)) = word.split_once('=') else {
                ignored.push(word.to_owned());
                continue;
            };
            let Some(o) = Opt::by_name(key).filter(|o| o.spec().settable) else {
                ignored.push(word.to_owned());
                continue;
            };
            if val == "restore" {
                restore_one(self, o, &mut changes);
                continue;
            }
            match value::parse(o, val) {
                Ok(v) => {
                    let old = value_of(&self.options, o);
                    self.options.set(o, v.clone(), Source::SetConfig);
                    changes.push(Change {
                        opt: o,
                        old,
                        new: v,
                    });
                }
                Err(_) => ignored.push(word.to_owned()),
            }
        }
        (changes, ignored)
    }

    fn cli_settings(&self) -> Vec<(Opt, Value)> {
        Opt::ALL
            .iter()
            .filter(|o| self.options.source(**o) == Source::Cli)
            .map(|o| (*o, value_of(&self.options, *o)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_reload_and_set_config() {
        let file = "post_join_delay=9\nlog_debug=1\nplock_rate_limit=5\n";
        let cli = [(Opt::PlockRateLimit, Value::Num(7))];
        let mut c = Config::load(&cli, Some(file)).expect("loads");
        assert_eq!(c.options.num(Opt::PostJoinDelay), 9);
        assert_eq!(c.options.source(Opt::PostJoinDelay), Source::File);
        assert_eq!(
            c.options.num(Opt::PlockRateLimit),
            7,
            "command line wins over the file"
        );
        assert_eq!(c.options.num(Opt::DropResourcesTime), 10000);

        let (ch, ign) = c.set_config(
            "log_debug=0 post_join_delay=5 enable_fencing=0 bogus=3 ",
            Some(file),
        );
        assert_eq!(ch.len(), 2);
        assert_eq!(ign, vec!["enable_fencing=0", "bogus=3"]);
        assert_eq!(c.options.source(Opt::LogDebug), Source::SetConfig);
        assert!(!c.options.on(Opt::LogDebug));

        // reload: set_config wins over the file; the file's new value applies elsewhere
        let ch = c
            .reload(Some("post_join_delay=3\nlog_debug=1\n"))
            .expect("reloads");
        assert_eq!(c.options.num(Opt::PostJoinDelay), 5);
        assert!(!c.options.on(Opt::LogDebug));
        assert_eq!(c.options.num(Opt::PlockRateLimit), 7);
        assert!(ch.is_empty(), "{ch:?}");

        let (ch, _) = c.set_config("post_join_delay=restore", Some("post_join_delay=3\n"));
        assert_eq!(ch[0].new, Value::Num(3));
        assert_eq!(c.options.source(Opt::PostJoinDelay), Source::File);
        let _ = c.set_config("restore_all", None);
        assert!(!c.options.on(Opt::LogDebug));
        assert_eq!(c.options.source(Opt::LogDebug), Source::Default);
    }

    #[test]
    fn dump_config_lines() {
        let c = Config::load(
            &[(Opt::DaemonDebug, Value::Num(1))],
            Some("log_debug=1\npost_join_delay=2\n"),
        )
        .expect("loads");
        let d = c.options.dump();
        let lines: Vec<&str> = d.lines().collect();
        assert_eq!(lines[0], "daemon_debug=1 (cli option)");
        assert_eq!(lines[1], "foreground=0");
        assert_eq!(lines[2], "log_debug=1 (dlm.conf)");
        assert_eq!(lines[3], "protocol=detect");
        assert_eq!(lines[4], "port=21064");
        assert!(d.contains("post_join_delay=2 (dlm.conf)\n"));
        assert!(d.ends_with("enable_helper=1\nhelp=-1\nversion=-1\n"));
        assert_eq!(lines.len(), TABLE.len());
    }
}
