//! dlm_tool: queries dlm_controld over its query socket and prints what the C `dlm_tool`
//! 4.2.0 prints, byte for byte, for `ls [-n] [name]`, `plocks <name>`, `status [-v]`, `dump`,
//! `dump_config` and `log_plock`. Differences, on purpose: `plocks` asks our daemon for the
//! whole table instead of the first MiB, and an unreachable daemon or a missing lockspace
//! is reported on stderr with exit status 1 instead of silent empty output.

mod client;
mod control;
mod debugfs;
mod json;
mod show;
mod status;
mod waits;

use std::io::Write;
use std::process::ExitCode;

use client::ClientError;
use dlm_proto::query::{Command, NodesKind, Request};

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Op {
    List {
        name: Option<String>,
        all: bool,
        json: bool,
        exit_code: bool,
    },
    Plocks {
        name: String,
        json: bool,
        /// `--waits`: who blocks whom (see `waits.rs`).
        waits: bool,
    },
    Status {
        verbose: bool,
        json: bool,
    },
    ReloadConfig,
    SetConfig(String),
    FenceAck(i32),
    /// deadlock_check: one request on the main socket, no reply.
    DeadlockCheck,
    /// lockdump / lockdebug of a lockspace, from the kernel's debugfs.
    Debugfs {
        name: String,
        dump: bool,
        mstcpy: bool,
        opts: debugfs::DebugOpts,
        root: std::path::PathBuf,
    },
    /// join / leave / joinleave through the kernel's dlm-control device.
    Join {
        name: String,
        join: bool,
        leave: bool,
        mode: u32,
        flags: u32,
        root: std::path::PathBuf,
    },
    /// run (start then check), run_start, run_check / run_cancel of `uuid`.
    Run {
        start: Option<Vec<u8>>,
        check: bool,
        uuid: Option<String>,
        cancel: bool,
        all: bool,
        wait_sec: u64,
    },
    Dump {
        command: Command,
        json: bool,
    },
    Help,
    Version,
}

const USAGE: &str = "\
Usage: dlm_tool [options] <command> [name]

Commands served by this build:
  ls [name]       lockspaces, their current and pending changes and members
  plocks <name>   posix locks held and waiting in a lockspace (whole table);
                  --waits: who blocks whom (each waiter, its blockers, the chain of
                  waiting owners, cycles across nodes), --json for either
  status          the daemon and its nodes (-v: every field); exit 1 when the
                  daemon cannot be reached
  dump            the daemon's debug buffer
  dump_config     every option with its value and where it came from
  log_plock       the plock debug buffer
  run <command>   run a command on every node (the daemon allows only `lvm lvchange
                  --refresh ...` and `lvm lvs ...`, as C): start it, then check it
                  (-n: on this node too; -i <sec>: check again every second until
                  done or <sec> passed)
  run_start <command>, run_check <uuid>, run_cancel <uuid>  the two halves, and
                  forgetting a run (need root)
  run_list        commands started by `dlm_tool run`
  reload_config   re-read dlm.conf (needs root)
  set_config k=v ...  change settable options at run time; k=restore, restore_all
                  (needs root)
  fence_ack <nodeid>  tell every daemon the node is fenced (after checking it is
                  down by hand); lockspaces waiting for it go on (needs root)

  join <name>     create (or join) a lockspace through the kernel, as libdlm does
                  (-m <mode> device permission, default 0600; -e 1 exclusive;
                  -f 1 a file system's lockspace)
  leave <name>    release it; joinleave <name> both

  deadlock_check <name>  asks the daemon for a deadlock check (compiled out of the
                  C daemon 4.x too: it only logs the request)

  lockdump <name> the kernel's locks of a lockspace (debugfs `<name>_locks`;
                  -M: master copies too)
  lockdebug <name>  the kernel's resources and locks (debugfs `<name>_all`,
                  `_toss`, `_waiters`; -v verbose, -w wide, -s summary)

Options:
  -n              with ls, also every node the lockspace has seen; with run, on
                  this node too
  -v              with status, every field; with lockdebug, verbose
  -m <mode>       with join, the device's permission (octal, default 0600)
  -e 0|1          with join, exclusive (NEWEXCL)
  -f 0|1          with join, a file system's lockspace (FS)
  -i <sec>        with run and run_check, check again every second until done
  -M              with lockdump, master copies too
  -s, -w          with lockdebug, a summary; wide lines
  --kernel-root <dir>  join, leave, lockdump, lockdebug: the kernel's files under <dir>
  --json, --exit-code  see docs/dlm_tool.md
  -h              this text
  -V              version
";

/// getopt("MhVnm:e:f:vwsi:") with GNU permutation, then the first known command word and
/// the word after it (`decode_arguments`).
/// The options of a command line (C's and this tool's own).
#[derive(Debug)]
struct Flags {
    all: bool,
    verbose: bool,
    json: bool,
    waits: bool,
    exit_code: bool,
    wait_sec: u64,
    mode: u32,
    excl: bool,
    fs: bool,
    root: std::path::PathBuf,
    mstcpy: bool,
    wide: bool,
    summarize: bool,
}

impl Default for Flags {
    fn default() -> Self {
        Self {
            all: false,
            verbose: false,
            json: false,
            waits: false,
            exit_code: false,
            wait_sec: 0,
            mode: 0o600,
            excl: false,
            fs: false,
            root: "/".into(),
            mstcpy: false,
            wide: false,
            summarize: false,
        }
    }
}

/// What the options leave: the words (command and its arguments), or `-h`/`-V`.
enum Words {
    Command(Vec<String>),
    Early(Op),
}

fn parse(args: &[String]) -> Result<Op, String> {
    let mut f = Flags::default();
    match read_flags(args, &mut f)? {
        Words::Early(op) => Ok(op),
        Words::Command(words) => command(f, &words),
    }
}

/// The options, as C's getopt and this tool's long options take them.
fn read_flags(args: &[String], f: &mut Flags) -> Result<Words, String> {
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        // this tool's own long options
        if a == "--json" {
            f.json = true;
            continue;
        }
        if a == "--waits" {
            f.waits = true;
            continue;
        }
        if a == "--exit-code" {
            f.exit_code = true;
            continue;
        }
        if a == "--kernel-root" {
            match it.next() {
                Some(d) => f.root = d.into(),
                None => return Err("--kernel-root needs a directory".to_owned()),
            }
            continue;
        }
        if a == "--" {
            words.extend(it.by_ref().cloned());
            break;
        }
        let Some(opts) = a.strip_prefix('-').filter(|o| !o.is_empty()) else {
            words.push(a.clone());
            continue;
        };
        for (i, c) in opts.char_indices() {
            match c {
                'n' => f.all = true,
                'v' => f.verbose = true,
                'M' => f.mstcpy = true,
                's' => f.summarize = true,
                'w' => f.wide = true,
                'h' => return Ok(Words::Early(Op::Help)),
                'V' => return Ok(Words::Early(Op::Version)),
                'm' | 'e' | 'f' | 'i' => {
                    // the argument is the rest of this word or the next word
                    let arg = if opts.len() == i + 1 {
                        match it.next() {
                            Some(a) => a.clone(),
                            None => return Err(format!("option -{c} requires an argument")),
                        }
                    } else {
                        opts[i + 1..].to_owned()
                    };
                    // atoi / sscanf("%o"): a bad number is 0
                    match c {
                        'i' => f.wait_sec = arg.parse().unwrap_or(0),
                        'm' => f.mode = u32::from_str_radix(&arg, 8).unwrap_or(0),
                        'e' => f.excl = arg.parse::<i32>().unwrap_or(0) != 0,
                        _ => f.fs = arg.parse::<i32>().unwrap_or(0) != 0,
                    }
                    break;
                }
                other => return Err(format!("unknown option -{other}")),
            }
        }
    }
    Ok(Words::Command(words))
}

const KNOWN: [&str; 20] = [
    "ls",
    "plocks",
    "status",
    "dump",
    "dump_config",
    "log_plock",
    "run_list",
    "reload_config",
    "set_config",
    "fence_ack",
    "run",
    "run_start",
    "run_check",
    "run_cancel",
    "join",
    "leave",
    "joinleave",
    "deadlock_check",
    "lockdump",
    "lockdebug",
];

/// Every word, each followed by a space, as C builds a run's command and 4.2.0 the text of
/// `set_config`.
fn spaced(words: &[String]) -> String {
    words.iter().map(|w| format!("{w} ")).collect()
}

/// `join`, `leave`, `joinleave`: the name checked, C's flags (`DLM_LSFL_NEWEXCL` 8,
/// `DLM_LSFL_FS` 4).
fn join_op(
    cmd: &str,
    name: Option<String>,
    mode: u32,
    excl: bool,
    fs: bool,
    root: std::path::PathBuf,
) -> Result<Op, String> {
    let name = name.ok_or_else(|| "lockspace name required".to_owned())?;
    if dlm_proto::LockspaceName::new(name.as_bytes()).is_err() {
        return Err(format!("bad lockspace name {name:?}"));
    }
    let flags = (if excl { 8 } else { 0 }) | (if fs { 4 } else { 0 });
    Ok(Op::Join {
        join: cmd != "leave",
        leave: cmd != "join",
        name,
        mode,
        flags,
        root,
    })
}

/// The command among the words, with its flags.
fn command(f: Flags, words: &[String]) -> Result<Op, String> {
    let Some(at) = words.iter().position(|w| KNOWN.contains(&w.as_str())) else {
        return Err("no command".to_owned());
    };
    let (cmd, rest) = (words[at].as_str(), &words[at + 1..]);
    let name = rest.first().cloned();
    let need_name = || "lockspace name required".to_owned();
    match cmd {
        "ls" => Ok(Op::List {
            name,
            all: f.all,
            json: f.json,
            exit_code: f.exit_code,
        }),
        "plocks" => name
            .map(|name| Op::Plocks {
                name,
                json: f.json,
                waits: f.waits,
            })
            .ok_or_else(need_name),
        "status" => Ok(Op::Status {
            verbose: f.verbose,
            json: f.json,
        }),
        "reload_config" => Ok(Op::ReloadConfig),
        "lockdump" | "lockdebug" => name
            .map(|name| Op::Debugfs {
                name,
                dump: cmd == "lockdump",
                mstcpy: f.mstcpy,
                opts: debugfs::DebugOpts {
                    verbose: f.verbose,
                    wide: f.wide,
                    summarize: f.summarize,
                },
                root: f.root.clone(),
            })
            .ok_or_else(need_name),
        "deadlock_check" => name.map(|_| Op::DeadlockCheck).ok_or_else(need_name),
        "join" | "leave" | "joinleave" => join_op(cmd, name, f.mode, f.excl, f.fs, f.root),
        "run" | "run_start" | "run_check" | "run_cancel" => run_op(cmd, rest, &f),
        "fence_ack" => name
            .as_deref()
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|&n| n > 0)
            .map(Op::FenceAck)
            .ok_or_else(|| "fence_ack needs a node id".to_owned()),
        "set_config" => set_config_op(rest),
        "dump" | "dump_config" | "log_plock" | "run_list" => Ok(Op::Dump {
            command: match cmd {
                "dump" => Command::DUMP_DEBUG,
                "dump_config" => Command::DUMP_CONFIG,
                "log_plock" => Command::DUMP_LOG_PLOCK,
                _ => Command::DUMP_RUN,
            },
            json: f.json,
        }),
        other => Err(format!("{other}: unknown command")),
    }
}

/// `run`, `run_start` (the command's words), `run_check`, `run_cancel` (a uuid).
fn run_op(cmd: &str, rest: &[String], f: &Flags) -> Result<Op, String> {
    let (start, uuid) = if cmd == "run" || cmd == "run_start" {
        let text = spaced(rest);
        if text.is_empty() {
            return Err("run needs a command".to_owned());
        }
        if text.len() >= dlm_proto::query::EXTRA_SIZE {
            return Err("command too long".to_owned());
        }
        (Some(text.into_bytes()), None)
    } else {
        let u = rest.first().cloned().ok_or("run uuid required")?;
        (None, Some(u))
    };
    Ok(Op::Run {
        check: cmd != "run_start",
        cancel: cmd == "run_cancel",
        start,
        uuid,
        all: f.all,
        wait_sec: f.wait_sec,
    })
}

/// `set_config key=value ...`: the text 4.2.0 sends, within one request's extra bytes.
fn set_config_op(rest: &[String]) -> Result<Op, String> {
    let text = spaced(rest);
    if text.is_empty() {
        Err("set_config needs key=value arguments".to_owned())
    } else if text.len() >= dlm_proto::query::EXTRA_SIZE {
        Err(format!(
            "set_config text too long (max {})",
            dlm_proto::query::EXTRA_SIZE - 1
        ))
    } else {
        Ok(Op::SetConfig(text))
    }
}

use dlm_proto::errno::{ENOENT, ENOSPC};

/// What `ls` found: the text or JSON to print and the `--exit-code` status.
struct Listing {
    out: String,
    code: u8,
}

/// `--exit-code` statuses of `ls`: the most urgent wait of any pending change.
const WAIT_FENCING: u8 = 3;
const WAIT_QUORUM: u8 = 4;
const WAIT_OTHER: u8 = 5;

fn wait_code(ls: &dlm_proto::query::DlmcLockspace) -> u8 {
    if ls.cg_next.seq == 0 {
        return 0;
    }
    match ls.cg_next.wait_word() {
        "fencing" => WAIT_FENCING,
        "quorum" => WAIT_QUORUM,
        _ => WAIT_OTHER,
    }
}

// do_list
fn list(name: Option<&str>, all: bool, as_json: bool) -> Result<Listing, ClientError> {
    let lss = match name {
        Some(n) => vec![client::lockspace_info(n.as_bytes())?],
        None => client::lockspaces()?,
    };
    let mut out = String::new();
    let mut items = Vec::new();
    let mut code = 0;
    if !lss.is_empty() {
        out.push_str("dlm lockspaces\n");
    }
    for ls in &lss {
        let wc = wait_code(ls);
        // fencing outranks quorum outranks the rest
        if code == 0 || (wc != 0 && wc < code) {
            code = wc;
        }
        let name = &ls.name;
        let members = client::lockspace_nodes(name, NodesKind::Members).ok();
        let next = if ls.cg_next.seq != 0 {
            client::lockspace_nodes(name, NodesKind::Next).ok()
        } else {
            None
        };
        let every = all.then(|| {
            client::lockspace_nodes(name, NodesKind::All).map_err(|e| match e {
                ClientError::Errno(n) => -n,
                _ => -1,
            })
        });
        if as_json {
            items.push(json::Lockspace::new(
                ls,
                members.as_deref(),
                next.as_deref(),
                every.as_ref().map(|r| r.as_deref().ok()),
            ));
        } else {
            show::lockspace(
                &mut out,
                ls,
                &show::Lists {
                    members: members.as_deref(),
                    next: next.as_deref(),
                    all: every.as_ref().map(|r| r.as_deref().map_err(|e| *e)),
                },
            );
        }
    }
    if as_json {
        out = json::lockspaces(&items);
    }
    Ok(Listing { out, code })
}

/// `do_join`: prints what C prints; on failure `dlm_new_lockspace <name> error <errno>`
/// on stderr and exit 255, as C's `exit(-1)`.
fn do_join(root: &std::path::Path, name: &str, mode: u32, flags: u32) -> ExitCode {
    let mut words = String::new();
    if flags != 0 {
        words.push_str("flags ");
        if flags & 8 != 0 {
            words.push_str("NEWEXCL ");
        }
        if flags & 4 != 0 {
            words.push_str("FS ");
        }
    }
    let _ =
        write_out(format!("Joining lockspace \"{name}\" permission {mode:o} {words}\n").as_bytes());
    let Ok(ls) = dlm_proto::LockspaceName::new(name.as_bytes()) else {
        return ExitCode::from(255);
    };
    // the device's mode is applied by udev on a real system; the request carries the name
    let rv = control::write_request(
        root,
        &dlm_proto::kernel::ControlRequest::Create { name: ls, flags },
    );
    match rv {
        Ok(minor) if minor >= 0 => write_out(b"done\n"),
        Ok(e) => {
            eprintln!("dlm_new_lockspace {name} error {}", -e);
            ExitCode::from(255)
        }
        Err(e) => {
            eprintln!(
                "dlm_new_lockspace {name} error {}: {e}",
                e.raw_os_error().unwrap_or(0)
            );
            ExitCode::from(255)
        }
    }
}

/// `do_leave`: the lockspace's minor from its device, then a forced release.
fn do_leave(root: &std::path::Path, name: &str) -> ExitCode {
    let _ = write_out(format!("Leaving lockspace \"{name}\"\n").as_bytes());
    let minor = match control::lockspace_minor(root, name) {
        Ok(m) => m,
        Err(e) => {
            eprintln!(
                "dlm_open_lockspace {name} error {}: {e}",
                e.raw_os_error().unwrap_or(0)
            );
            return ExitCode::from(255);
        }
    };
    // DLM_USER_LSFLG_FORCEFREE, as `dlm_release_lockspace(name, dh, 1)`
    let req = dlm_proto::kernel::ControlRequest::Remove { minor, flags: 2 };
    match control::write_request(root, &req) {
        Ok(rv) if rv >= 0 => write_out(b"done\n"),
        Ok(e) => {
            eprintln!("dlm_release_lockspace {name} error {}", -e);
            ExitCode::from(255)
        }
        Err(e) => {
            eprintln!("dlm_release_lockspace {name}: {e}");
            ExitCode::from(255)
        }
    }
}

/// `do_run`: start (printing `run_uuid: <uuid>`), then check (printing `check_status: `
/// and the status words), as C's tool prints them.
fn run(
    start: Option<&[u8]>,
    check: bool,
    uuid: Option<String>,
    cancel: bool,
    (all, wait_sec): (bool, u64),
) -> ExitCode {
    use dlm_proto::query::{RunCheckFlags, RunStartFlags, RunStatus};
    let mut out = String::new();
    let check_uuid = match (start, uuid) {
        (Some(cmd), _) => {
            let flags = if all {
                RunStartFlags::NODE_RECV
            } else {
                RunStartFlags::NODE_NONE
            };
            let u = match client::run_start(cmd, 0, flags) {
                Ok((_, u)) => u,
                Err(e) => {
                    let _ = write_out(b"run_uuid: \n");
                    return fail(&e);
                }
            };
            out.push_str(&format!("run_uuid: {u}\n"));
            if !check {
                return write_out(out.as_bytes());
            }
            u
        }
        (None, Some(u)) => u,
        (None, None) => return fail(&"run uuid required"),
    };
    let flags = if cancel {
        RunCheckFlags::CANCEL
    } else {
        RunCheckFlags::CLEAR
    };
    let status = match client::run_check(&check_uuid, wait_sec, flags) {
        Ok((_, st)) => st,
        Err(e) => {
            let _ = write_out(out.as_bytes());
            return fail(&e);
        }
    };
    out.push_str("check_status: ");
    for (bit, word) in [
        (RunStatus::WAITING, "waiting "),
        (RunStatus::DONE, "done "),
        (RunStatus::FAILED, "failed "),
    ] {
        if status & bit != 0 {
            out.push_str(word);
        }
    }
    out.push('\n');
    write_out(out.as_bytes())
}

fn write_out(bytes: &[u8]) -> ExitCode {
    let mut o = std::io::stdout().lock();
    if o.write_all(bytes).and_then(|()| o.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("dlm_tool: {e}");
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let op = match parse(&args) {
        Ok(op) => op,
        Err(e) => {
            eprintln!("dlm_tool: {e}");
            eprint!("{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    execute(op)
}

/// Carries out one command line's operation; the exit code says how it went.
fn execute(op: Op) -> ExitCode {
    match op {
        Op::Help => write_out(USAGE.as_bytes()),
        Op::Version => write_out(
            format!(
                "dlm_tool {} (Rust dlm_controld project)\n",
                env!("CARGO_PKG_VERSION")
            )
            .as_bytes(),
        ),
        Op::List {
            name,
            all,
            json,
            exit_code,
        } => ls(name.as_deref(), all, json, exit_code),
        Op::Plocks { name, json, waits } => plocks(&name, json, waits),
        Op::Status { verbose, json } => status(verbose, json),
        Op::ReloadConfig => match client::send_main(&Request::ReloadConfig) {
            Ok(()) => write_out(b"reload_config done\n"),
            Err(e) => {
                let _ = write_out(b"reload_config failed\n");
                fail(&e)
            }
        },
        Op::Join {
            name,
            join,
            leave,
            mode,
            flags,
            root,
        } => {
            if join {
                let code = do_join(&root, &name, mode, flags);
                if code != ExitCode::SUCCESS || !leave {
                    return code;
                }
            }
            do_leave(&root, &name)
        }
        Op::Run {
            start,
            check,
            uuid,
            cancel,
            all,
            wait_sec,
        } => run(start.as_deref(), check, uuid, cancel, (all, wait_sec)),
        Op::Debugfs {
            name,
            dump,
            mstcpy,
            opts,
            root,
        } => debug_files(&root, &name, dump, mstcpy, opts),
        Op::DeadlockCheck => match client::send_main(&Request::DeadlockCheck) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        },
        // as C: nothing printed, no reply awaited
        Op::FenceAck(nodeid) => match client::send_main(&Request::FenceAck { nodeid }) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        },
        Op::SetConfig(text) => match client::send_main(&Request::SetConfig {
            text: text.into_bytes(),
        }) {
            Ok(()) => write_out(b"set_config done\n"),
            Err(e) => {
                let _ = write_out(b"set_config failed\n");
                fail(&e)
            }
        },
        Op::Dump { command, json } => dump(command, json),
    }
}

/// `dlm_tool ls [-n] [--json] [--exit-code] [name]`.
fn ls(name: Option<&str>, all: bool, json: bool, exit_code: bool) -> ExitCode {
    match list(name, all, json) {
        Ok(l) => {
            let c = write_out(l.out.as_bytes());
            if exit_code && l.code != 0 {
                ExitCode::from(l.code)
            } else {
                c
            }
        }
        Err(ClientError::Errno(ENOENT)) => {
            fail(&format!("no lockspace {}", name.unwrap_or_default()))
        }
        Err(e) => fail(&e),
    }
}

/// `dlm_tool plocks [--json|--waits] <ls>`.
fn plocks(name: &str, json: bool, waits: bool) -> ExitCode {
    match client::dump_plocks(name.as_bytes(), json || waits) {
        Ok((_, d)) if d == -ENOENT => fail(&format!("no lockspace {name}")),
        Ok((text, d)) => {
            let code = if waits {
                write_out(waits::show(name, &String::from_utf8_lossy(&text), json).as_bytes())
            } else if json {
                write_out(json::plocks(name, &String::from_utf8_lossy(&text)).as_bytes())
            } else {
                write_out(&text)
            };
            if d == -ENOSPC {
                eprintln!(
                    "dlm_tool: the daemon cut the dump short (a C dlm_controld caps it at 1 MiB)"
                );
            }
            code
        }
        Err(e) => fail(&e),
    }
}

/// `dlm_tool status [-v] [--json]`.
fn status(verbose: bool, json: bool) -> ExitCode {
    match client::status_records() {
        Ok(recs) if json => write_out(json::status(&recs).as_bytes()),
        Ok(recs) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            write_out(status::format(&recs, verbose, now).as_bytes())
        }
        Err(e) => {
            // the C client's words, on stdout; but a non-zero exit for monitors
            let _ = write_out(b"cannot connect to dlm_controld\n");
            fail(&e)
        }
    }
}

/// `dlm_tool lockdump|lockdebug <ls>`: the kernel's debugfs files, as C prints them.
fn debug_files(
    root: &std::path::Path,
    name: &str,
    dump: bool,
    mstcpy: bool,
    opts: debugfs::DebugOpts,
) -> ExitCode {
    let dir = root.join("sys/kernel/debug/dlm");
    let read = |suffix: &str| std::fs::read_to_string(dir.join(format!("{name}{suffix}")));
    let (out, err) = if dump {
        match read("_locks") {
            Ok(t) => debugfs::lockdump(&t, mstcpy),
            Err(e) => (
                String::new(),
                format!(
                    "can't open {}: {e}\n",
                    dir.join(format!("{name}_locks")).display()
                ),
            ),
        }
    } else {
        let files = debugfs::DebugFiles {
            all: read("_all").ok(),
            old: read("").ok(),
            toss: read("_toss").ok(),
            waiters: read("_waiters").ok(),
        };
        if files.all.is_none() && files.old.is_none() {
            (
                String::new(),
                format!("can't open {}: no such file\n", dir.join(name).display()),
            )
        } else {
            debugfs::lockdebug(&files, opts)
        }
    };
    eprint!("{err}");
    let code = write_out(out.as_bytes());
    // C exits 0 even when it cannot read the file; a monitor wants to know
    if err.starts_with("can't open") {
        ExitCode::FAILURE
    } else {
        code
    }
}

/// `dlm_tool dump|dump_config|log_plock|run_list [--json]`.
fn dump(command: Command, json: bool) -> ExitCode {
    match client::dump(command, None) {
        Ok((text, _)) if json => {
            let t = String::from_utf8_lossy(&text);
            let out = if command == Command::DUMP_CONFIG {
                json::config(&t)
            } else {
                json::lines(&t)
            };
            write_out(out.as_bytes())
        }
        // do_dump prints the text, then a newline
        Ok((mut text, _)) => {
            text.push(b'\n');
            write_out(&text)
        }
        Err(e) => fail(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Op, String> {
        let v: Vec<String> = s.split_whitespace().map(str::to_owned).collect();
        parse(&v)
    }

    #[test]
    fn exit_codes_rank_the_waits() {
        use dlm_proto::LockspaceName;
        use dlm_proto::query::{DlmcChange, DlmcLockspace, LockspaceFlags, WaitCondition};
        let ls = |seq, wait, msgs| DlmcLockspace {
            cg_prev: DlmcChange::default(),
            cg_next: DlmcChange {
                seq,
                wait_condition: wait,
                wait_messages: msgs,
                ..DlmcChange::default()
            },
            flags: LockspaceFlags(0),
            global_id: 1,
            name: LockspaceName::new(b"x").expect("name"),
        };
        assert_eq!(wait_code(&ls(0, WaitCondition::Fencing, false)), 0);
        assert_eq!(
            wait_code(&ls(2, WaitCondition::Fencing, false)),
            WAIT_FENCING
        );
        assert_eq!(wait_code(&ls(2, WaitCondition::Quorum, false)), WAIT_QUORUM);
        assert_eq!(wait_code(&ls(2, WaitCondition::Other(2), true)), WAIT_OTHER);
        assert_eq!(wait_code(&ls(2, WaitCondition::Ringid, false)), WAIT_OTHER);
    }

    #[test]
    fn arguments_as_getopt_and_decode_arguments_take_them() {
        let ls = |name: Option<&str>, all, json, exit_code| {
            Ok(Op::List {
                name: name.map(str::to_owned),
                all,
                json,
                exit_code,
            })
        };
        let plocks = |name: &str, json| {
            Ok(Op::Plocks {
                name: name.to_owned(),
                json,
                waits: false,
            })
        };
        let dump = |command, json| Ok(Op::Dump { command, json });
        assert_eq!(p("ls"), ls(None, false, false, false));
        assert_eq!(p("ls -n foo"), ls(Some("foo"), true, false, false));
        assert_eq!(p("-n ls"), ls(None, true, false, false));
        assert_eq!(p("ls --json --exit-code"), ls(None, false, true, true));
        // words before the command are skipped, as C's loop does
        assert_eq!(p("junk plocks gfs"), plocks("gfs", false));
        assert_eq!(
            p("plocks --waits gfs"),
            Ok(Op::Plocks {
                name: "gfs".to_owned(),
                json: false,
                waits: true
            })
        );
        assert_eq!(p("-m 0644 plocks gfs"), plocks("gfs", false));
        assert_eq!(p("-m0644 plocks --json gfs"), plocks("gfs", true));
        assert_eq!(p("dump_config"), dump(Command::DUMP_CONFIG, false));
        assert_eq!(p("dump --json"), dump(Command::DUMP_DEBUG, true));
        assert_eq!(p("log_plock"), dump(Command::DUMP_LOG_PLOCK, false));
        assert_eq!(p("ls -h"), Ok(Op::Help));
        assert_eq!(p("-V"), Ok(Op::Version));
        assert!(p("plocks").is_err_and(|e| e.contains("name required")));
        assert!(p("").is_err());
        assert!(p("ls -x").is_err_and(|e| e.contains("-x")));
        assert!(p("plocks -m").is_err_and(|e| e.contains("argument")));
        assert_eq!(
            p("status -v"),
            Ok(Op::Status {
                verbose: true,
                json: false
            })
        );
        assert_eq!(
            p("--json status"),
            Ok(Op::Status {
                verbose: false,
                json: true
            })
        );
        assert_eq!(p("reload_config"), Ok(Op::ReloadConfig));
        assert_eq!(
            p("set_config log_debug=1 post_join_delay=5"),
            Ok(Op::SetConfig("log_debug=1 post_join_delay=5 ".into()))
        );
        assert!(p("set_config").is_err());
        assert_eq!(p("fence_ack 3"), Ok(Op::FenceAck(3)));
        assert!(p("fence_ack").is_err());
        assert!(p("fence_ack x").is_err());
        assert!(matches!(
            p("-M lockdump foo"),
            Ok(Op::Debugfs {
                dump: true,
                mstcpy: true,
                ..
            })
        ));
        assert!(matches!(
            p("-v -w -s lockdebug foo"),
            Ok(Op::Debugfs {
                dump: false,
                opts: debugfs::DebugOpts {
                    verbose: true,
                    wide: true,
                    summarize: true
                },
                ..
            })
        ));
        assert_eq!(p("deadlock_check foo"), Ok(Op::DeadlockCheck));
        assert!(p("deadlock_check").is_err());
        assert!(matches!(
            p("-m 0644 -e 1 join foo"),
            Ok(Op::Join {
                join: true,
                leave: false,
                mode: 0o644,
                flags: 8,
                ..
            })
        ));
        assert!(matches!(
            p("--kernel-root /tmp/k joinleave foo"),
            Ok(Op::Join {
                join: true,
                leave: true,
                ..
            })
        ));
        assert!(p("join").is_err());
        assert!(p("lsx").is_err());
    }
}
