//! Logging as the C daemon does it (logging.c `log_level`), fed by `tracing`: code logs with
//! `tracing` macros and fields, in a lockspace's task ([`in_lockspace`]) or inside a
//! `lockspace` span where it works for one lockspace;
//! [`layer::CLayer`] turns each event into C's line `<monotonic seconds> [<lockspace> ]<message>`,
//! kept in a 1 MiB debug ring buffer (`dlm_tool dump`); plock lines go to the plock ring buffer
//! (`dlm_tool log_plock`) as records. Errors, warnings and notices also go to syslog (ident
//! `dlm_controld`, facility LOCAL4) and the log file; debug lines to the log file with
//! `debug_logfile`, to stderr with `daemon_debug`. With `--log-format json` the log file and
//! stderr get one JSON object per line with every field instead (the rings stay C's text).

pub mod layer;
mod plock_ring;
mod ring;
mod task_ls;

pub use layer::{CLayer, Line, PLAIN_TARGET, PLOCK_DEBUG_TARGET, PLOCK_TARGET};
pub use plock_ring::{PlockLine, PlockRing};
pub use ring::{RING_SIZE, Ring};
pub use task_ls::{InLockspace, in_lockspace, named};

use std::cell::RefCell;
use std::fmt::Arguments;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// Severity, as syslog numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// `LOG_ERR`
    Error = 3,
    /// `LOG_WARNING`
    Warning = 4,
    /// `LOG_INFO`
    Info = 6,
    /// `LOG_DEBUG`
    Debug = 7,
}

impl Level {
    /// Lower-case name (JSON lines).
    pub fn name(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Info => "info",
            Self::Debug => "debug",
        }
    }
}

/// Where lines go, set once at start and by `reload_config`/`set_config`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sinks {
    /// `daemon_debug`: every line to stderr.
    pub stderr: bool,
    /// `plock_debug`: plock lines to stderr too (with `daemon_debug`).
    pub plock_stderr: bool,
    /// `debug_logfile`: debug lines to the log file.
    pub debug_logfile: bool,
    /// syslog.
    pub syslog: bool,
    /// `--log-format json`: JSON objects to the log file and stderr.
    pub json: bool,
}

struct Logger {
    debug: Ring,
    plock: PlockRing,
    /// Plock requests read and received so far, and when each count last passed a
    /// thousand (C's `plock_read_count`, `plock_recv_count`).
    counts: [(u64, Option<std::time::Instant>); 2],
    /// The log file, until [`init`] hands it to the writer thread.
    file: Option<File>,
    sinks: Sinks,
    /// The writer thread's queue, once [`init`] started it.
    writer: Option<std::sync::mpsc::SyncSender<Output>>,
}

/// A line for a sink outside the process: written by the writer thread, never under the
/// logger's lock (a stalled syslog or disk must not stall a plock request that records its
/// line in the ring).
enum Output {
    Syslog(libc::c_int, std::ffi::CString),
    File(String),
    Stderr(String),
    /// Everything queued before it is written: answer.
    Flush(std::sync::mpsc::SyncSender<()>),
}

/// Lines waiting for the writer; past it they are dropped and counted.
const WRITER_QUEUE: usize = 8192;

impl Logger {
    /// Hands `out` to the writer thread, or writes it here before there is one.
    fn emit(&mut self, out: Output) {
        match &self.writer {
            Some(tx) => {
                if tx.try_send(out).is_err() {
                    crate::metrics::get().log_lines_dropped.inc();
                }
            }
            None => write_out(&mut self.file, out),
        }
    }
}

fn write_out(file: &mut Option<File>, out: Output) {
    match out {
        Output::Syslog(level, c) => {
            // SAFETY: both strings are NUL-terminated; "%s" consumes exactly one argument.
            unsafe { libc::syslog(level, c"%s".as_ptr(), c.as_ptr()) };
        }
        Output::File(line) => {
            if let Some(f) = file.as_mut() {
                let _ = f.write_all(line.as_bytes());
            }
        }
        Output::Stderr(line) => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
        Output::Flush(done) => {
            let _ = done.send(());
        }
    }
}

/// The writer thread: syslog, the log file and stderr, in the order lines were logged.
fn start_writer(mut file: Option<File>) -> Option<std::sync::mpsc::SyncSender<Output>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(WRITER_QUEUE);
    std::thread::Builder::new()
        .name("dlm_log".into())
        .spawn(move || {
            while let Ok(out) = rx.recv() {
                write_out(&mut file, out);
            }
        })
        .ok()?;
    Some(tx)
}

/// Waits (up to a second) until the writer thread has written every line queued so far:
/// before the process exits.
pub fn flush() {
    let tx = logger().lock().ok().and_then(|l| l.writer.clone());
    if let Some(tx) = tx {
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        if tx.send(Output::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(std::time::Duration::from_secs(1));
        }
    }
}

static LOGGER: OnceLock<Mutex<Logger>> = OnceLock::new();

/// The longest line kept (`LOG_STR_LEN` 512 less the newline and NUL).
const MAX_LINE: usize = 510;

fn logger() -> &'static Mutex<Logger> {
    LOGGER.get_or_init(|| Mutex::new(Logger::new()))
}

/// Makes [`CLayer`] the process's `tracing` subscriber (once; later calls do nothing).
pub fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        let sub = tracing_subscriber::registry().with(CLayer);
        // fails only if another subscriber was installed first (a test harness): keep it
        let _ = tracing::subscriber::set_global_default(sub);
    });
}

/// Installs the subscriber, opens the log file (appending; its directory created) and
/// syslog.
pub fn init(logfile: Option<&Path>, sinks: Sinks) {
    install();
    let file = logfile.and_then(|p| {
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // the mode is ours, not the inherited umask's
        std::os::unix::fs::OpenOptionsExt::mode(OpenOptions::new().create(true).append(true), 0o644)
            .open(p)
            .ok()
    });
    if sinks.syslog {
        // SAFETY: the ident is a 'static C string, as openlog requires (it keeps the pointer).
        unsafe { libc::openlog(c"dlm_controld".as_ptr(), libc::LOG_PID, libc::LOG_LOCAL4) };
    }
    if let Ok(mut l) = logger().lock() {
        l.sinks = sinks;
        match start_writer(file) {
            Some(tx) => l.writer = Some(tx),
            // syslog and stderr are then written inline; the log file is lost with the thread
            None => tracing::warn!("log writer thread: not started; no log file"),
        }
    }
}

/// Changes where lines go (a reloaded option).
pub fn set_sinks(sinks: Sinks) {
    if let Ok(mut l) = logger().lock() {
        l.sinks = sinks;
    }
}

/// Whether lines are JSON now (`--log-format`, fixed at start).
pub fn json() -> bool {
    logger().lock().is_ok_and(|l| l.sinks.json)
}

/// Whether lines go to syslog (`--syslog`, fixed at start).
pub fn syslog() -> bool {
    logger().lock().is_ok_and(|l| l.sinks.syslog)
}

/// Local time in a strftime `format`.
fn local_time(format: &std::ffi::CStr) -> String {
    let mut buf = [0u8; 64];
    // SAFETY: time(NULL) has no preconditions; localtime_r writes only into `tm`, which
    // lives on this stack frame; strftime writes at most buf.len() bytes into `buf` and
    // the format is a NUL-terminated C string.
    let n = unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return String::new();
        }
        libc::strftime(buf.as_mut_ptr().cast(), buf.len(), format.as_ptr(), &tm)
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `%b %d %T` in local time, for the log file.
fn stamp() -> String {
    local_time(c"%b %d %T")
}

/// The line as it is stored: `<monotime> [<name> ]<message>\n`, cut at 510 characters.
/// Formatted once, into one buffer.
pub fn format_line(now: u64, name: Option<&str>, msg: Arguments<'_>) -> String {
    use std::fmt::Write as _;
    let mut line = String::with_capacity(96);
    let _ = match name {
        // the name is cut at 32 characters
        Some(n) => write!(line, "{now} {} {msg}", n.get(..32).unwrap_or(n)),
        None => write!(line, "{now} {msg}"),
    };
    if line.len() > MAX_LINE {
        let mut end = MAX_LINE;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    line.push('\n');
    line
}

thread_local! {
    /// Lines captured instead of written (unit tests of the layer).
    static CAPTURE: RefCell<Option<Vec<Line>>> = const { RefCell::new(None) };
}

/// Runs `f` and returns the lines its events made on this thread, written nowhere.
pub fn capture(f: impl FnOnce()) -> Vec<Line> {
    CAPTURE.with(|c| *c.borrow_mut() = Some(Vec::new()));
    f();
    CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default()
}

/// The (level, message) of every event `f` makes on this thread through the daemon's
/// layer (for the cores' unit tests: their log lines are part of what they do).
#[cfg(test)]
pub(crate) fn messages(f: impl FnOnce()) -> Vec<(Level, String)> {
    use tracing_subscriber::layer::SubscriberExt;
    let sub = tracing_subscriber::registry().with(CLayer);
    capture(|| tracing::subscriber::with_default(sub, f))
        .into_iter()
        .map(|l| (l.level, l.fields.message))
        .collect()
}

/// Writes one event to the rings and the sinks (`log_level`). Plock-only lines (C's
/// LOG_NONE) go to the plock ring only, or to stderr with `plock_debug`.
pub fn emit(line: &Line) {
    let captured = CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some(v) => {
            v.push(line.clone());
            true
        }
        None => false,
    });
    if captured {
        return;
    }
    if line.level == Level::Error {
        crate::metrics::get().errors.inc();
    }
    let now = crate::clock::monotonic_secs();
    let text = format_line(
        now,
        line.ls.as_deref().filter(|_| line.prefix),
        format_args!("{}", line.fields.message),
    );
    let Ok(mut l) = logger().lock() else {
        return;
    };
    if line.plock_only {
        l.plock.push_text(&text);
    } else {
        l.debug.push(text.as_bytes());
        if line.plock_too {
            l.plock.push_text(&text);
        }
    }
    if line.level <= Level::Info && l.sinks.syslog {
        if let Ok(c) = std::ffi::CString::new(text.trim_end()) {
            l.emit(Output::Syslog(line.level as libc::c_int, c));
        }
    }
    let json = l.sinks.json.then(|| {
        let mut j = line.json(now);
        j.push('\n');
        j
    });
    let to_file = line.level <= Level::Info || l.sinks.debug_logfile;
    if to_file {
        let out = json
            .clone()
            .unwrap_or_else(|| format!("{} {text}", stamp()));
        l.emit(Output::File(out));
    }
    if l.sinks.stderr && (!line.plock_only || l.sinks.plock_stderr) {
        let out = json.unwrap_or(text);
        l.emit(Output::Stderr(out));
    }
}

/// `log_config`: a group's membership change, `<group> conf <m> <j> <l> memb ... join ...
/// left ...`, each id list cut where C's buffer (128, 32, 32 bytes) ends.
pub fn log_config(group: &str, members: &[u32], joined: &[u32], left: &[u32]) {
    fn ids(list: &[u32], cap: usize) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for n in list {
            let before = out.len();
            let _ = write!(out, " {n}");
            // snprintf's room is cap - pos including the NUL
            if out.len() >= cap {
                out.truncate(before);
                break;
            }
        }
        out
    }
    tracing::debug!(
        target: PLAIN_TARGET,
        group,
        "{group} conf {} {} {} memb{} join{} left{}",
        members.len(),
        joined.len(),
        left.len(),
        ids(members, 128),
        ids(joined, 32),
        ids(left, 32)
    );
}

/// A plock request's `read plock` / `receive plock` line: a record in the plock ring,
/// formatted only when dumped (or at once when debugging to stderr or the log file).
/// `now` is the monotonic second the caller read (one clock read serves a request's path).
pub fn plock_op(
    now: u64,
    ls: &std::sync::Arc<str>,
    line: PlockLine,
    info: &dlm_proto::kernel::PlockInfo,
) {
    let Ok(mut l) = logger().lock() else {
        return;
    };
    l.plock.push_plock(now, ls, line, info);
    l.count_plock(now, ls, line);
    let stderr = l.sinks.stderr && l.sinks.plock_stderr;
    if !stderr && !l.sinks.debug_logfile {
        return;
    }
    let what = match line {
        PlockLine::Read => "read",
        PlockLine::Receive => "receive",
    };
    let text = format_line(
        now,
        Some(ls),
        format_args!("{what} plock {}", PlockWords(info)),
    );
    let out = if l.sinks.json {
        let fields = layer::Fields {
            message: format!("{what} plock {}", PlockWords(info)),
            rest: vec![
                ("op", layer::Value::Str(what.to_owned())),
                ("number", layer::Value::U64(info.number)),
                ("nodeid", layer::Value::I64(i64::from(info.nodeid))),
                ("pid", layer::Value::U64(u64::from(info.pid))),
                ("owner", layer::Value::U64(info.owner)),
            ],
        };
        let l = Line {
            level: Level::Debug,
            prefix: true,
            ls: Some(ls.to_string()),
            plock_only: true,
            plock_too: false,
            target: PLOCK_TARGET,
            fields,
            spans: Vec::new(),
        };
        let mut j = l.json(now);
        j.push('\n');
        j
    } else {
        text.clone()
    };
    if l.sinks.debug_logfile {
        let line = if l.sinks.json {
            out.clone()
        } else {
            format!("{} {text}", stamp())
        };
        l.emit(Output::File(line));
    }
    if stderr {
        l.emit(Output::Stderr(out));
    }
}

impl Logger {
    /// Empty rings, no sink yet ([`init`] sets them).
    fn new() -> Self {
        Self {
            debug: Ring::default(),
            plock: PlockRing::default(),
            counts: [(0, None); 2],
            file: None,
            sinks: Sinks::default(),
            writer: None,
        }
    }

    /// Every thousandth request read (received), C's `plock_read_count ... time ... s
    /// delays 0` (`plock_recv_count ... time ... s`) line in the plock ring: the seconds
    /// since the previous thousand (since the first request, the first time).
    fn count_plock(&mut self, now: u64, ls: &str, line: PlockLine) {
        let i = usize::from(line == PlockLine::Receive);
        let (n, since) = &mut self.counts[i];
        *n += 1;
        // the clock is read at the first request and at each thousandth, not per request
        let since = *since.get_or_insert_with(std::time::Instant::now);
        if *n % 1000 != 0 {
            return;
        }
        let n = *n;
        let at = std::time::Instant::now();
        self.counts[i].1 = Some(at);
        let secs = at.duration_since(since).as_secs_f64();
        let text = match line {
            PlockLine::Read => format_line(
                now,
                Some(ls),
                format_args!("plock_read_count {n} time {secs:.3} s delays 0"),
            ),
            PlockLine::Receive => format_line(
                now,
                Some(ls),
                format_args!("plock_recv_count {n} time {secs:.3} s"),
            ),
        };
        self.plock.push_text(&text);
    }
}

/// The words C's plock log uses for a request: `<number> <LK|UN|GET|CL|??> <WR|RD|->
/// <start>-<end> <nodeid>/<pid>/<owner> w <wait>` (plock.c `op_str`, `ex_str`); written
/// straight into the log line, without a String of its own.
pub fn plock_words(info: &dlm_proto::kernel::PlockInfo) -> PlockWords<'_> {
    PlockWords(info)
}

/// See [`plock_words`].
#[derive(Debug)]
pub struct PlockWords<'a>(pub(crate) &'a dlm_proto::kernel::PlockInfo);

impl std::fmt::Display for PlockWords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use dlm_proto::kernel::PlockOp;
        let info = self.0;
        let op = match info.op {
            PlockOp::LOCK => "LK",
            PlockOp::UNLOCK => "UN",
            PlockOp::GET => "GET",
            // C 4.3.0 (4.2.0, which has no CANCEL, writes "??")
            PlockOp::CANCEL => "CL",
            _ => "??",
        };
        let ex = if info.op == PlockOp::UNLOCK || info.op == PlockOp::GET {
            "-"
        } else if info.ex {
            "WR"
        } else {
            "RD"
        };
        write!(
            f,
            "{:x} {op} {ex} {:x}-{:x} {}/{}/{:x} w {}",
            info.number,
            info.start,
            info.end,
            info.nodeid,
            info.pid,
            info.owner,
            u8::from(info.wait)
        )
    }
}

/// `dlm_tool dump`.
pub fn dump_debug() -> Vec<u8> {
    logger()
        .lock()
        .map(|l| l.debug.contents())
        .unwrap_or_default()
}

/// `dlm_tool log_plock`.
pub fn dump_plock() -> Vec<u8> {
    logger()
        .lock()
        .map(|l| l.plock.contents())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thousandth_request_read_or_received_makes_cs_count_line() {
        let mut l = Logger::new();
        for _ in 0..2999 {
            l.count_plock(7, "foo", PlockLine::Read);
        }
        for _ in 0..1000 {
            l.count_plock(7, "foo", PlockLine::Receive);
        }
        let text = String::from_utf8(l.plock.contents()).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("7 foo plock_read_count 1000 time "),
            "{text}"
        );
        assert!(
            lines[1].starts_with("7 foo plock_read_count 2000 time "),
            "{text}"
        );
        assert!(lines[0].ends_with(" s delays 0"), "{text}");
        assert!(
            lines[2].starts_with("7 foo plock_recv_count 1000 time "),
            "{text}"
        );
        assert!(lines[2].ends_with(" s"), "{text}");
    }

    #[test]
    fn line_format() {
        assert_eq!(
            format_line(453, Some("foo"), format_args!("send_start {}:{}", 1, 1)),
            "453 foo send_start 1:1\n"
        );
        assert_eq!(
            format_line(447, None, format_args!("our_nodeid 1")),
            "447 our_nodeid 1\n"
        );
        let long = "x".repeat(600);
        assert_eq!(
            format_line(1, None, format_args!("{long}")).len(),
            MAX_LINE + 1
        );
        let name = "n".repeat(40);
        assert!(
            format_line(1, Some(&name), format_args!("m"))
                .starts_with(&format!("1 {} m", "n".repeat(32)))
        );
    }

    #[test]
    fn conf_line_as_c() {
        install();
        let lines = capture(|| {
            log_config("dlm:ls:foo", &[1, 2, 3], &[3], &[]);
            let many: Vec<u32> = (1000..1020).collect();
            log_config("dlm:controld", &many, &many, &[7]);
        });
        assert_eq!(
            lines[0].fields.message,
            "dlm:ls:foo conf 3 1 0 memb 1 2 3 join 3 left"
        );
        // " 1000" is 5 bytes: six fit in C's 32-byte buffer with its NUL
        assert_eq!(
            lines[1].fields.message,
            format!(
                "dlm:controld conf 20 20 1 memb{} join{} left 7",
                (1000..1020).map(|n| format!(" {n}")).collect::<String>(),
                (1000..1006).map(|n| format!(" {n}")).collect::<String>()
            )
        );
    }

    #[test]
    fn plock_words_as_c() {
        use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
        let mut i = PlockInfo {
            version: PLOCK_VERSION,
            op: PlockOp::LOCK,
            ex: true,
            wait: true,
            flags: PlockFlags(0),
            pid: 4242,
            nodeid: 1,
            rv: 0,
            fsid: 7,
            number: 0x4d,
            start: 0,
            end: u64::MAX,
            owner: 0xabc,
        };
        assert_eq!(
            plock_words(&i).to_string(),
            "4d LK WR 0-ffffffffffffffff 1/4242/abc w 1"
        );
        i.ex = false;
        i.wait = false;
        assert_eq!(
            plock_words(&i).to_string(),
            "4d LK RD 0-ffffffffffffffff 1/4242/abc w 0"
        );
        i.op = PlockOp::UNLOCK;
        assert!(plock_words(&i).to_string().starts_with("4d UN - "));
        i.op = PlockOp::CANCEL;
        assert!(plock_words(&i).to_string().starts_with("4d CL RD "));
        i.op = PlockOp(9);
        assert!(plock_words(&i).to_string().starts_with("4d ?? RD "));
    }

    #[test]
    fn buffers_take_their_lines() {
        install();
        tracing::debug!("unit test line {}", 42);
        let span = tracing::debug_span!("lockspace", ls = "ls1");
        span.in_scope(|| tracing::debug!(target: PLOCK_TARGET, "plock only line"));
        let d = String::from_utf8_lossy(&dump_debug()).into_owned();
        let p = String::from_utf8_lossy(&dump_plock()).into_owned();
        assert!(d.contains(" unit test line 42"), "{d}");
        assert!(!d.contains("plock only line"), "{d}");
        assert!(p.contains(" ls1 plock only line"), "{p}");
    }
}
