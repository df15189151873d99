//! `/etc/dlm/dlm.conf`, parsed once into indexed sections (daemon-spec §6.3).
//!
//! The C daemon re-reads the file at every lockspace creation and scans it whole for each
//! node it fences; here one pass builds ordered maps, so loading costs O(n log n) and each
//! lookup O(log n). What C accepts, this accepts; where C silently ignores a line, this
//! ignores it too and reports a warning with the line number; where C would misbehave
//! later (a broken fence section fails every fencing of that node), this refuses to start
//! and names the line.

use std::collections::BTreeMap;

use super::options::{Opt, Value};
use super::value::{ValueError, parse};

/// A dlm.conf the daemon refuses, with the line at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dlm.conf line {line}: {why}: {text:?}")]
pub struct ConfError {
    /// 1-based line number.
    pub line: usize,
    /// The line.
    pub text: String,
    /// What is wrong.
    pub why: String,
}

/// A line the daemon ignores, as C does, but reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfWarning {
    /// 1-based line number.
    pub line: usize,
    /// What is ignored and why.
    pub why: String,
}

/// `lockspace <name> [nodir=1]` and its `master` lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockspaceConf {
    /// `nodir=1`.
    pub nodir: bool,
    /// Master nodes and their weights.
    pub masters: BTreeMap<u32, u32>,
}

impl LockspaceConf {
    /// The weight written to configfs `nodes/<id>/weight` (`get_weight`): 1 for everyone
    /// without masters; with masters, a master's weight and 0 for every other node.
    pub fn weight(&self, nodeid: u32) -> u32 {
        if self.masters.is_empty() {
            1
        } else {
            self.masters.get(&nodeid).copied().unwrap_or(0)
        }
    }
}

/// One fence device as a node uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceMethod {
    /// Device name (`fence_all` for the fence_all line).
    pub device: String,
    /// Agent program.
    pub agent: String,
    /// `key=val` arguments of the device line.
    pub device_args: Vec<String>,
    /// `key=val` arguments of the node's connect line, `node=` included, in line order
    /// (they reach the agent's stdin as written).
    pub connect_args: Vec<String>,
    /// Also unfence with it at startup.
    pub unfence: bool,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfFile {
    /// `key=val` option lines, in file order, with line numbers.
    pub options: Vec<(usize, Opt, Value)>,
    /// Lockspace sections by name.
    pub lockspaces: BTreeMap<String, LockspaceConf>,
    /// `node id=<id> mark=<m>` lines.
    pub node_marks: BTreeMap<u32, u32>,
    /// `fence_all` (every node uses it).
    pub fence_all: Option<FenceMethod>,
    /// Per node, its devices in file order (at most 4).
    pub fence: BTreeMap<u32, Vec<FenceMethod>>,
    /// Lines ignored.
    pub warnings: Vec<ConfWarning>,
    /// This build's own `metrics=<address:port>|off` (the command line's `--metrics` wins).
    pub metrics: Option<String>,
    /// This build's own `log_format=c|json` (the command line's `--log-format` wins).
    pub log_format: Option<String>,
    /// This build's own `plock_native=0|1` (docs/native-mode.md; on when absent).
    pub plock_native: Option<bool>,
    /// This build's own `plock_deadlock_detect=0|1` (off when absent): a blocking request
    /// that would close a cycle of waiting owners is answered -EDEADLK.
    pub plock_deadlock_detect: Option<bool>,
    /// This build's own `c_peers_apply_cancel=0|1` (off when absent): the C daemons this
    /// one shares lockspaces with apply plock CANCEL (dlm 4.3.0 and later).
    pub c_peers_apply_cancel: Option<bool>,
    /// This build's own `plock_native_sync_ms=<ms>`: how often a node's local decisions go
    /// to the other members' tables (docs/native-mode.md; 0: only when they must).
    pub plock_native_sync_ms: Option<u32>,
    /// This build's own `clients_cpu_budget_us=<µs>`: the clients thread's CPU budget per
    /// 10 ms under `SCHED_DEADLINE` (0: an ordinary thread).
    pub clients_cpu_budget_us: Option<u32>,
    /// This build's own `plock_locks_max=<n>`: the most granted locks this node's processes
    /// may hold in one lockspace before their new locks are refused -ENOLCK (0: no bound).
    pub plock_locks_max: Option<u32>,
    /// This build's own `plock_spin_us=<µs>`: the longest the plock device's reader keeps
    /// reading after the device empties, while requests keep coming back that quickly,
    /// before it sleeps (0: never).
    pub plock_spin_us: Option<u32>,
}

/// `clients_cpu_budget_us` when dlm.conf does not say: a tenth of one CPU.
pub const CLIENTS_BUDGET_US_DEFAULT: u32 = 1000;
/// The largest `clients_cpu_budget_us` accepted (half of one CPU).
const CLIENTS_BUDGET_US_MAX: u32 = 5000;
/// The smallest budget other than 0 (a query's work fits in it several times).
const CLIENTS_BUDGET_US_MIN: u32 = 100;

/// `plock_locks_max` when dlm.conf does not say: far above what a node's processes hold
/// in practice (each lock costs memory in every node's daemon: docs/BENCHMARKS.md,
/// `locks_load`).
pub const PLOCK_LOCKS_MAX_DEFAULT: u32 = 1_000_000;

/// `plock_spin_us` when dlm.conf does not say: the longest window the reader may learn
/// (a process's next request comes microseconds after its reply on hardware, hundreds
/// under emulation; `daemon/spin.rs`).
pub const PLOCK_SPIN_US_DEFAULT: u32 = 1000;
/// The longest `plock_spin_us` accepted (a millisecond).
const PLOCK_SPIN_US_MAX: u32 = 1000;

/// `plock_native_sync_ms` when dlm.conf does not say: ten seconds. The timer only keeps the
/// other nodes' gauges near the owner's (a dump asks every owner first), and each STATE
/// costs corosync CPU on every node (docs/BENCHMARKS.md, "Settings chosen by
/// measurement").
pub const NATIVE_SYNC_MS_DEFAULT: u32 = 10_000;
/// The longest `plock_native_sync_ms` accepted (an hour).
const NATIVE_SYNC_MS_MAX: u32 = 3_600_000;

impl ConfFile {
    /// The devices that fence `nodeid`, in order; empty = none configured (the daemon then
    /// uses `dlm_stonith`).
    pub fn fence_methods(&self, nodeid: u32) -> Vec<FenceMethod> {
        if let Some(all) = &self.fence_all {
            return vec![all.clone()];
        }
        self.fence.get(&nodeid).cloned().unwrap_or_default()
    }
}

enum Section {
    Lockspace(String),
    Device(String),
    FenceAll,
}

fn kv<'a>(word: &'a str, key: &str) -> Option<&'a str> {
    word.strip_prefix(key)?.strip_prefix('=')
}

/// One line of dlm.conf being read: its number, text and words.
struct Line<'a> {
    no: usize,
    raw: &'a str,
    words: Vec<&'a str>,
}

impl Line<'_> {
    fn err(&self, why: &str) -> ConfError {
        ConfError {
            line: self.no,
            text: self.raw.to_owned(),
            why: why.to_owned(),
        }
    }

    /// The value of the first word that starts with `key=`.
    fn find(&self, key: &str) -> Option<&str> {
        self.words.iter().find_map(|w| kv(w, key))
    }

    /// The value after the line's first '=' (its first word), for `key=value` lines.
    fn value(&self) -> Option<&str> {
        self.raw
            .split_once('=')
            .map(|(_, v)| v.split_whitespace().next().unwrap_or_default())
    }
}

/// What has been read so far (`read_config_file`, `fence_config_init`).
#[derive(Default)]
struct Reader {
    conf: ConfFile,
    /// Devices by name: agent, arguments, line.
    devices: BTreeMap<String, (String, Vec<String>, usize)>,
    section: Option<Section>,
}

/// Parses the text of a dlm.conf.
pub fn parse_conf(text: &str) -> Result<ConfFile, ConfError> {
    let mut r = Reader::default();
    for (idx, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() || raw.starts_with(' ') || raw.starts_with('\t') {
            r.section = None;
            continue;
        }
        if raw.starts_with('#') {
            continue;
        }
        let line = Line {
            no: idx + 1,
            raw,
            words: raw.split_whitespace().collect(),
        };
        r.line(&line)?;
    }
    Ok(r.conf)
}

impl Reader {
    fn warn(&mut self, l: &Line<'_>, why: String) {
        self.conf.warnings.push(ConfWarning { line: l.no, why });
    }

    fn line(&mut self, l: &Line<'_>) -> Result<(), ConfError> {
        // options: the key runs up to space, '=' or tab (set_opt_file)
        let key = l.raw.split([' ', '=', '\t']).next().unwrap_or_default();
        if let Some(o) = Opt::by_name(key) {
            let value = l.value().ok_or_else(|| l.err("option line without '='"))?;
            let v = match parse(o, value) {
                Ok(v) => v,
                Err(ValueError::Refused(why)) => return Err(l.err(why)),
                Err(e) => return Err(l.err(&e.to_string())),
            };
            self.conf.options.push((l.no, o, v));
            self.section = None;
            return Ok(());
        }
        if self.own_key(l, key)? {
            self.section = None;
            return Ok(());
        }
        let section = self.section.take();
        match (l.words[0], section) {
            ("lockspace", _) => self.lockspace(l)?,
            ("master", Some(Section::Lockspace(ls))) => self.master(l, ls)?,
            ("master", s) => {
                self.section = s;
                self.warn(l, "master line outside a lockspace section ignored".into());
            }
            ("node", s) => {
                self.section = s;
                self.node(l)?;
            }
            ("fence_all", _) => self.fence_all(l)?,
            ("unfence_all", Some(Section::FenceAll)) => {
                if let Some(f) = self.conf.fence_all.as_mut() {
                    f.unfence = true;
                }
                self.section = Some(Section::FenceAll);
            }
            ("device", _) => self.device(l)?,
            ("connect", Some(Section::Device(dev))) => self.connect(l, dev)?,
            ("unfence", Some(Section::Device(dev))) => self.unfence(l, dev)?,
            ("connect" | "unfence" | "unfence_all", _) => {
                return Err(l.err("fence line outside its device section"));
            }
            (_, Some(Section::Device(_))) => {
                return Err(l.err("unexpected line inside a device section"));
            }
            (_, s) => {
                self.section = s;
                if l.raw.contains('=') {
                    self.warn(l, format!("unknown option {key:?} ignored"));
                } else {
                    self.warn(l, "unrecognised line ignored".into());
                }
            }
        }
        Ok(())
    }

    /// This build's own keys (the C daemon warns about them and goes on); whether `key`
    /// was one.
    fn own_key(&mut self, l: &Line<'_>, key: &str) -> Result<bool, ConfError> {
        let Some(v) = l.raw.split_once('=').map(|(_, v)| v) else {
            return Ok(false);
        };
        let v = v.split_whitespace().next().unwrap_or_default();
        let flag = match key {
            "plock_native" => &mut self.conf.plock_native,
            "plock_deadlock_detect" => &mut self.conf.plock_deadlock_detect,
            "c_peers_apply_cancel" => &mut self.conf.c_peers_apply_cancel,
            "metrics" => {
                self.conf.metrics = Some(v.to_owned());
                return Ok(true);
            }
            "log_format" => {
                self.conf.log_format = Some(v.to_owned());
                return Ok(true);
            }
            "plock_native_sync_ms" => {
                let ms = v.parse::<u32>().ok().filter(|&ms| ms <= NATIVE_SYNC_MS_MAX);
                let msg = format!(
                    "{key} must be a number of milliseconds from 0 to {NATIVE_SYNC_MS_MAX}"
                );
                self.conf.plock_native_sync_ms = Some(ms.ok_or_else(|| l.err(&msg))?);
                return Ok(true);
            }
            "plock_spin_us" => {
                let us = v.parse::<u32>().ok().filter(|&us| us <= PLOCK_SPIN_US_MAX);
                let msg =
                    format!("{key} must be a number of microseconds from 0 to {PLOCK_SPIN_US_MAX}");
                self.conf.plock_spin_us = Some(us.ok_or_else(|| l.err(&msg))?);
                return Ok(true);
            }
            "plock_locks_max" => {
                let msg = format!("{key} must be a number from 0 (no bound) to {}", u32::MAX);
                self.conf.plock_locks_max = Some(v.parse::<u32>().map_err(|_| l.err(&msg))?);
                return Ok(true);
            }
            "clients_cpu_budget_us" => {
                let us = v.parse::<u32>().ok().filter(|&us| {
                    us == 0 || (CLIENTS_BUDGET_US_MIN..=CLIENTS_BUDGET_US_MAX).contains(&us)
                });
                let msg = format!(
                    "{key} must be 0 or a number of microseconds from {CLIENTS_BUDGET_US_MIN} to {CLIENTS_BUDGET_US_MAX}"
                );
                self.conf.clients_cpu_budget_us = Some(us.ok_or_else(|| l.err(&msg))?);
                return Ok(true);
            }
            _ => return Ok(false),
        };
        *flag = Some(match v {
            "0" => false,
            "1" => true,
            _ => return Err(l.err(&format!("{key} must be 0 or 1"))),
        });
        Ok(true)
    }

    fn lockspace(&mut self, l: &Line<'_>) -> Result<(), ConfError> {
        let name = l
            .words
            .get(1)
            .ok_or_else(|| l.err("lockspace line without a name"))?;
        let mut ls = LockspaceConf::default();
        for w in &l.words[2..] {
            match kv(w, "nodir") {
                Some(v) => {
                    ls.nodir = v
                        .parse::<i64>()
                        .map_err(|_| l.err("nodir is not a number"))?
                        != 0;
                }
                None => self.warn(l, format!("ignored {w:?} on the lockspace line")),
            }
        }
        self.conf.lockspaces.insert((*name).to_owned(), ls);
        self.section = Some(Section::Lockspace((*name).to_owned()));
        Ok(())
    }

    fn master(&mut self, l: &Line<'_>, ls: String) -> Result<(), ConfError> {
        let node = l.find("node").and_then(|v| v.parse::<u32>().ok());
        match (l.words.get(1), node) {
            (Some(name), Some(n)) if *name == ls && n != 0 => {
                let w = match l.find("weight") {
                    Some(w) => w.parse().map_err(|_| l.err("weight is not a number"))?,
                    None => 1,
                };
                if let Some(lsc) = self.conf.lockspaces.get_mut(&ls) {
                    if lsc.masters.len() >= 128 {
                        return Err(l.err("more than 128 master lines"));
                    }
                    lsc.masters.insert(n, w);
                }
                self.section = Some(Section::Lockspace(ls));
            }
            // C ends the master list here and consumes this line
            _ => self.warn(
                l,
                format!("ends the master list of lockspace {ls} and is ignored"),
            ),
        }
        Ok(())
    }

    fn node(&mut self, l: &Line<'_>) -> Result<(), ConfError> {
        let (Some(id), Some(mark), 3) = (
            l.words
                .get(1)
                .and_then(|w| kv(w, "id"))
                .and_then(|v| v.parse::<i64>().ok()),
            l.words.get(2).and_then(|w| kv(w, "mark")),
            l.words.len(),
        ) else {
            return Err(l.err("expected `node id=<id> mark=<mark>`"));
        };
        let mark = parse(Opt::Mark, mark).map_err(|e| l.err(&e.to_string()))?;
        match (u32::try_from(id), mark) {
            (Ok(id @ 1..=127), Value::Num(m)) => {
                self.conf
                    .node_marks
                    .insert(id, u32::try_from(m).unwrap_or(0));
            }
            _ => self.warn(l, format!("node id {id} outside 1..127 ignored")),
        }
        Ok(())
    }

    fn fence_all(&mut self, l: &Line<'_>) -> Result<(), ConfError> {
        if !self.devices.is_empty() {
            return Err(l.err("fence_all cannot be combined with device lines"));
        }
        let agent = l
            .words
            .get(1)
            .ok_or_else(|| l.err("fence_all without an agent"))?;
        self.conf.fence_all = Some(FenceMethod {
            device: "fence_all".into(),
            agent: (*agent).to_owned(),
            device_args: l.words[2..].iter().map(|s| (*s).to_owned()).collect(),
            connect_args: Vec::new(),
            unfence: false,
        });
        self.section = Some(Section::FenceAll);
        Ok(())
    }

    fn device(&mut self, l: &Line<'_>) -> Result<(), ConfError> {
        if self.conf.fence_all.is_some() {
            return Err(l.err("device lines cannot be combined with fence_all"));
        }
        let (Some(name), Some(agent)) = (l.words.get(1), l.words.get(2)) else {
            return Err(l.err("expected `device <name> <agent> [key=val ...]`"));
        };
        if self.devices.contains_key(*name) {
            return Err(l.err("device defined twice"));
        }
        let args = l.words[3..].iter().map(|s| (*s).to_owned()).collect();
        self.devices
            .insert((*name).to_owned(), ((*agent).to_owned(), args, l.no));
        self.section = Some(Section::Device((*name).to_owned()));
        Ok(())
    }

    fn connect(&mut self, l: &Line<'_>, dev: String) -> Result<(), ConfError> {
        if l.words.get(1) != Some(&dev.as_str()) {
            return Err(l.err("connect line for another device inside a device section"));
        }
        let node = l
            .find("node")
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| l.err("connect line without node=<id>"))?;
        let (agent, args, _) = self.devices[&dev].clone();
        let list = self.conf.fence.entry(node).or_default();
        if list.len() >= 4 {
            return Err(l.err("more than 4 fence devices for one node"));
        }
        list.push(FenceMethod {
            device: dev.clone(),
            agent,
            device_args: args,
            connect_args: l.words[2..].iter().map(|s| (*s).to_owned()).collect(),
            unfence: false,
        });
        self.section = Some(Section::Device(dev));
        Ok(())
    }

    fn unfence(&mut self, l: &Line<'_>, dev: String) -> Result<(), ConfError> {
        if l.words.get(1) != Some(&dev.as_str()) {
            return Err(l.err("unfence line for another device inside a device section"));
        }
        for list in self.conf.fence.values_mut() {
            for m in list.iter_mut().filter(|m| m.device == dev) {
                m.unfence = true;
            }
        }
        self.section = Some(Section::Device(dev));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "\
# from dlm.conf(5)
log_debug=1
post_join_delay=10   # trailing words are ignored
protocol=tcp

lockspace foo nodir=1
master foo node=1 weight=2
master foo node=2

lockspace bar
master baz node=3
enable_fencing=0

node id=3 mark=0x10

device foo fence_foo ipaddr=1.1.1.1 login=x password=y
connect foo node=1 port=1
connect foo node=2 port=2
unfence foo

device bar fence_bar ipaddr=2.2.2.2
connect bar node=1 port=5
";

    #[test]
    fn this_builds_own_plock_keys() {
        let c = parse_conf("c_peers_apply_cancel=1\n").expect("parses");
        assert_eq!(c.c_peers_apply_cancel, Some(true));
        assert_eq!(parse_conf("").expect("parses").c_peers_apply_cancel, None);
        let c = parse_conf("plock_native=0\nplock_deadlock_detect=1\n").expect("parses");
        assert_eq!(
            (c.plock_native, c.plock_deadlock_detect),
            (Some(false), Some(true))
        );
        let c = parse_conf("log_debug=1\n").expect("parses");
        assert_eq!((c.plock_native, c.plock_deadlock_detect), (None, None));
        let e = parse_conf("plock_deadlock_detect=yes\n").expect_err("refused");
        assert!(
            e.to_string()
                .contains("plock_deadlock_detect must be 0 or 1"),
            "{e}"
        );
        let c = parse_conf("plock_native_sync_ms=250\n").expect("parses");
        assert_eq!(c.plock_native_sync_ms, Some(250));
        assert_eq!(
            parse_conf("plock_native_sync_ms=0\n")
                .expect("parses")
                .plock_native_sync_ms,
            Some(0)
        );
        for bad in ["-1", "x", "3600001"] {
            let e = parse_conf(&format!("plock_native_sync_ms={bad}\n")).expect_err(bad);
            assert!(
                e.to_string()
                    .contains("plock_native_sync_ms must be a number"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_spin_is_0_or_up_to_a_millisecond() {
        assert_eq!(parse_conf("").expect("parses").plock_spin_us, None);
        for (text, us) in [("0", 0), ("50", 50), ("1000", 1000)] {
            let c = parse_conf(&format!("plock_spin_us={text}\n")).expect(text);
            assert_eq!(c.plock_spin_us, Some(us));
        }
        for bad in ["-1", "x", "1001", "5us"] {
            let e = parse_conf(&format!("plock_spin_us={bad}\n")).expect_err(bad);
            assert!(
                e.to_string()
                    .contains("plock_spin_us must be a number of microseconds from 0 to 1000"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_clients_budget_is_0_or_within_its_bounds() {
        assert_eq!(parse_conf("").expect("parses").clients_cpu_budget_us, None);
        for (v, want) in [("0", 0), ("100", 100), ("2500", 2500), ("5000", 5000)] {
            let c = parse_conf(&format!("clients_cpu_budget_us={v}\n")).expect(v);
            assert_eq!(c.clients_cpu_budget_us, Some(want));
        }
        for bad in ["99", "5001", "-1", "x", "1ms"] {
            let e = parse_conf(&format!("clients_cpu_budget_us={bad}\n")).expect_err(bad);
            assert!(
                e.to_string()
                    .contains("clients_cpu_budget_us must be 0 or a number of microseconds"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_locks_bound_is_a_count_or_0() {
        assert_eq!(parse_conf("").expect("parses").plock_locks_max, None);
        for (v, want) in [("0", 0), ("1", 1), ("4294967295", u32::MAX)] {
            let c = parse_conf(&format!("plock_locks_max={v}\n")).expect(v);
            assert_eq!(c.plock_locks_max, Some(want));
        }
        for bad in ["-1", "4294967296", "x", "1k"] {
            let e = parse_conf(&format!("plock_locks_max={bad}\n")).expect_err(bad);
            assert!(
                e.to_string().contains("plock_locks_max must be a number"),
                "{e}"
            );
        }
    }

    #[test]
    fn sections() {
        let c = parse_conf(EXAMPLE).expect("parses");
        let opts: Vec<(Opt, Value)> = c.options.iter().map(|(_, o, v)| (*o, v.clone())).collect();
        assert_eq!(
            opts,
            vec![
                (Opt::LogDebug, Value::Num(1)),
                (Opt::PostJoinDelay, Value::Num(10)),
                (Opt::Protocol, Value::Str("tcp".into())),
                (Opt::EnableFencing, Value::Num(0)),
            ]
        );
        let foo = &c.lockspaces["foo"];
        assert!(foo.nodir);
        assert_eq!((foo.weight(1), foo.weight(2), foo.weight(3)), (2, 1, 0));
        let bar = &c.lockspaces["bar"];
        assert_eq!((bar.weight(1), bar.weight(7)), (1, 1));
        assert!(c.warnings.iter().any(|w| w.line == 11), "{:?}", c.warnings);
        assert_eq!(c.node_marks.get(&3), Some(&16));
        let n1 = c.fence_methods(1);
        assert_eq!(n1.len(), 2);
        assert_eq!(
            (n1[0].device.as_str(), n1[0].agent.as_str()),
            ("foo", "fence_foo")
        );
        assert_eq!(n1[0].connect_args, vec!["node=1", "port=1"]);
        assert!(n1[0].unfence && !n1[1].unfence);
        assert_eq!(c.fence_methods(2).len(), 1);
        assert!(c.fence_methods(9).is_empty());
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_conf("log_debug=1\npost_join_delay=ten\n").expect_err("bad");
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("line 2"), "{e}");
        assert_eq!(parse_conf("node 3\n").map_err(|e| e.line), Err(1));
        assert_eq!(
            parse_conf("\n\nplock_ownership=1\n").map_err(|e| e.line),
            Err(3)
        );
        assert_eq!(
            parse_conf("device a fa\nconnect b node=1\n").map_err(|e| e.line),
            Err(2)
        );
        assert_eq!(parse_conf("connect a node=1\n").map_err(|e| e.line), Err(1));
        assert_eq!(
            parse_conf("device a fa\nconnect a port=1\n").map_err(|e| e.line),
            Err(2)
        );
        assert_eq!(
            parse_conf("device a fa\nbogus\n").map_err(|e| e.line),
            Err(2)
        );
        assert_eq!(
            parse_conf("fence_all fa\n\ndevice a fb\n").map_err(|e| e.line),
            Err(3)
        );
        let ok = parse_conf("bogus_key=1\nwhatever\n").expect("ignored lines");
        assert_eq!(ok.warnings.len(), 2);
    }

    #[test]
    fn fence_all_applies_to_every_node() {
        let c = parse_conf("fence_all fence_x a=1\nunfence_all\n").expect("parses");
        let m = c.fence_methods(42);
        assert_eq!(
            (m[0].device.as_str(), m[0].agent.as_str(), m[0].unfence),
            ("fence_all", "fence_x", true)
        );
    }
}
