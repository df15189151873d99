//! The plock workload driver of the side-by-side benches (`vs_c`, `vs_c3`): simulated
//! processes on one fake kernel, each with one request outstanding (closed loop), following
//! a script of requests. Latencies, ops, and non-blocking replies that came out of the
//! order they were sent in (the kernel's matching; must be 0).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};

use crate::FakeKernel;

/// The daemons the side-by-side benches compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Daemons {
    /// A stand-in answering every request at once (the driver's own ceiling).
    StandIn,
    /// Debian's C 4.2.0, default mode.
    CDefault,
    /// Debian's C 4.2.0 with `plock_ownership=1`.
    COwnership,
    /// Ours with `plock_native=0`: a C-compatible lockspace.
    OursCompat,
    /// Ours as it runs by default (native mode).
    Ours,
    /// `cpg_ceiling`: one CPG round trip per request and nothing else, what any
    /// C-compatible daemon could reach at most.
    CpgCeiling,
}

impl Daemons {
    /// Its name in the tables.
    pub fn label(self) -> &'static str {
        match self {
            Self::StandIn => "stand-in (answers at once)",
            Self::CDefault => "C 4.2.0",
            Self::COwnership => "C 4.2.0 plock_ownership=1",
            Self::OursCompat => "ours, plock_native=0 (C-compatible)",
            Self::Ours => "ours (native mode)",
            Self::CpgCeiling => "ceiling: one CPG round trip per request",
        }
    }

    /// Whether it is a `dlm_controld` (joins lockspaces, answers queries, has metrics).
    pub fn is_dlm_controld(self) -> bool {
        !matches!(self, Self::StandIn | Self::CpgCeiling)
    }
}

/// Starts one daemon of `kind` (not the stand-in) in network namespace `ns` on the fake
/// kernel `k` (ours from the directory of this executable, with the dlm.conf lines of
/// `VS_CONF`, `;` between them; C's through `shim`, its stderr to `log`), with fencing off.
pub fn start_daemon_of(
    kind: Daemons,
    ns: &str,
    k: &FakeKernel,
    shim: &std::path::Path,
    log: &std::path::Path,
) -> Option<crate::Daemon> {
    let root = k.root();
    match kind {
        Daemons::StandIn => None,
        Daemons::Ours | Daemons::OursCompat => {
            // `VS_CONF=<dlm.conf lines>`: our daemon's options for an experiment
            let mut conf = std::env::var("VS_CONF")
                .unwrap_or_default()
                .replace(';', "\n");
            if kind == Daemons::OursCompat {
                conf.push_str("\nplock_native=0\n");
            }
            if !conf.trim().is_empty() {
                let etc = root.join("etc/dlm");
                std::fs::create_dir_all(&etc).ok()?;
                std::fs::write(etc.join("dlm.conf"), conf).ok()?;
            }
            // `VS_DAEMON_BIN=<path>`: another binary (a wrapper that runs ours under a
            // profiler: tests/prof/callgrind.sh); ours next to this executable otherwise
            let bin = match std::env::var_os("VS_DAEMON_BIN") {
                Some(b) => std::path::PathBuf::from(b),
                None => std::env::current_exe().ok()?.parent()?.join("dlm_controld"),
            };
            crate::start_daemon_on_corosync(ns, &bin, root, k, &[])
        }
        Daemons::CDefault => crate::start_c_daemon(ns, shim, k, &["-f", "0"], log),
        Daemons::COwnership => crate::start_c_daemon(ns, shim, k, &["-f", "0", "-o", "1"], log),
        Daemons::CpgCeiling => start_ceiling(ns, root),
    }
}

/// `cpg_ceiling` (next to this executable) on the fake kernel under `root`, in `ns`, once
/// it has joined its group.
fn start_ceiling(ns: &str, root: &std::path::Path) -> Option<crate::Daemon> {
    use std::io::BufRead;
    let bin = std::env::current_exe().ok()?.parent()?.join("cpg_ceiling");
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(bin)
        .arg(root)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let out = child.stdout.take()?;
    let daemon = crate::Daemon(child);
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).ok()?;
    (line.trim() == "ready").then_some(daemon)
}

/// What a process asks at one step of its script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// LOCK or UNLOCK.
    pub op: PlockOp,
    /// Inode.
    pub number: u64,
    /// First byte.
    pub start: u64,
    /// Last byte.
    pub end: u64,
    /// F_SETLKW (LOCK only).
    pub wait: bool,
}

/// A workload: process `p`'s request at step `n` (0, 1, …).
pub trait Script: Sync {
    /// The request; owners and pids are the driver's.
    fn step(&self, p: u64, n: u64) -> Step;
}

/// Lock then unlock one lock, for ever: (inode, start, end, wait) of process `p`.
#[derive(Debug)]
pub struct LockUnlock<F>(pub F);

impl<F: Fn(u64, u64) -> (u64, u64, u64, bool) + Sync> Script for LockUnlock<F> {
    fn step(&self, p: u64, n: u64) -> Step {
        let (number, start, end, wait) = (self.0)(p, n / 2);
        Step {
            op: if n % 2 == 0 {
                PlockOp::LOCK
            } else {
                PlockOp::UNLOCK
            },
            number,
            start,
            end,
            wait: wait && n % 2 == 0,
        }
    }
}

/// What one drive measured.
#[derive(Debug, Clone, Default)]
pub struct Drive {
    /// Replies within the measured time.
    pub ops: u64,
    /// Their latencies.
    pub latencies: Vec<Duration>,
    /// Non-blocking replies out of send order.
    pub out_of_order: u64,
}

/// The request of `step` for owner `owner` in lockspace `fsid`.
pub fn request(fsid: u32, owner: u64, s: Step) -> PlockInfo {
    PlockInfo {
        version: PLOCK_VERSION,
        op: s.op,
        ex: true,
        wait: s.wait,
        flags: PlockFlags(0),
        pid: u32::try_from(owner).unwrap_or(0),
        nodeid: 0,
        rv: 0,
        fsid,
        number: s.number,
        start: s.start,
        end: s.end,
        owner,
    }
}

/// Runs `procs` processes (owners `first..first+procs`) through `script` for `secs`; then
/// the drain, not counted: each process, at its next reply, unlocks everything it has on
/// that inode and stops. `None` if the daemon stopped answering (5 s without a reply).
/// The replies there are taken in one system call ([`crate::plock_port`]); each process's
/// next request goes out as soon as its reply is seen, as independent processes would
/// send them (sending a batch's requests together made the daemon and the driver take
/// turns, each idle while the other worked).
pub fn drive(
    k: &FakeKernel,
    fsid: u32,
    script: &dyn Script,
    first: u64,
    procs: u64,
    secs: f64,
) -> Option<Drive> {
    let port = k.plock_port(Duration::from_secs(10))?;
    let mut run = Running {
        at: BTreeMap::new(),
        order: VecDeque::new(),
        out: Vec::new(),
        d: Drive::default(),
    };
    let now = Instant::now();
    for p in 0..procs {
        run.send(request(fsid, first + p, script.step(p, 0)), now, 0, false);
    }
    port.send(&run.out).ok()?;
    let t0 = Instant::now();
    let mut replies = Vec::new();
    while !run.at.is_empty() {
        port.recv(&mut replies, Duration::from_secs(5)).ok()?;
        if replies.is_empty() {
            return None;
        }
        let now = Instant::now();
        let ending = t0.elapsed().as_secs_f64() >= secs;
        for r in &replies {
            run.out.clear();
            run.reply(r, now, ending, fsid, first, script);
            work(think_time());
            port.send(&run.out).ok()?;
        }
    }
    Some(run.d)
}

/// `VS_THINK_US=<µs>` (for profiling): how long a process works on the CPU between a reply
/// and its next request (0: none, as the tables run).
fn think_time() -> Duration {
    static THINK: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *THINK.get_or_init(|| {
        let us = std::env::var("VS_THINK_US")
            .ok()
            .and_then(|v| v.parse().ok());
        Duration::from_micros(us.unwrap_or(0))
    })
}

/// Works on the CPU for `d`, as a process computing between two locks.
fn work(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// One driver's processes in flight.
struct Running {
    /// Per process: when its request left, its step, and whether it is in its last unlock.
    at: BTreeMap<u64, (Instant, u64, bool)>,
    /// Non-blocking requests in the order sent: their replies must come in that order.
    order: VecDeque<(u64, PlockOp)>,
    /// The requests to send now.
    out: Vec<PlockInfo>,
    d: Drive,
}

impl Running {
    fn send(&mut self, info: PlockInfo, now: Instant, step: u64, last: bool) {
        if !info.wait {
            self.order.push_back((info.owner, info.op));
        }
        self.at.insert(info.owner, (now, step, last));
        self.out.push(info);
    }

    /// A reply: checked against the send order, counted, and its process's next request
    /// queued (its last unlock once the time is up, nothing after that).
    fn reply(
        &mut self,
        r: &PlockInfo,
        now: Instant,
        ending: bool,
        fsid: u32,
        first: u64,
        script: &dyn Script,
    ) {
        if !r.wait {
            match self
                .order
                .iter()
                .position(|&(o, op)| o == r.owner && op == r.op)
            {
                Some(0) => {
                    self.order.pop_front();
                }
                Some(i) => {
                    self.d.out_of_order += 1;
                    self.order.remove(i);
                }
                None => {}
            }
        }
        let Some((t, n, last)) = self.at.remove(&r.owner) else {
            return;
        };
        if last {
            return;
        }
        if ending {
            let s = Step {
                op: PlockOp::UNLOCK,
                number: r.number,
                start: 0,
                end: u64::MAX,
                wait: false,
            };
            self.send(request(fsid, r.owner, s), now, n + 1, true);
            return;
        }
        self.d.latencies.push(now.saturating_duration_since(t));
        self.d.ops += 1;
        let s = script.step(r.owner - first, n + 1);
        self.send(request(fsid, r.owner, s), now, n + 1, false);
    }
}

/// The `m`‰ latency in µs of sorted `lat`.
pub fn permille_us(lat: &[Duration], m: usize) -> f64 {
    lat.get((lat.len().max(1) - 1) * m / 1000)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// `dlm_tool ls`'s first query (LOCKSPACES) on the raw query socket of network namespace
/// `netns`, every 2 ms until `stop`: the latencies of those answered (a query is one
/// connection, as `dlm_tool` makes it; no process start). The prober runs `SCHED_FIFO`
/// unless `VS_PROBE_RT=0` (see [`prober_realtime`]).
pub fn probe_queries(netns: &str, stop: &std::sync::atomic::AtomicBool) -> Vec<Duration> {
    use std::sync::atomic::Ordering;
    let mut out = Vec::new();
    if crate::enter_netns(netns).is_err() {
        return out;
    }
    if std::env::var("VS_PROBE_RT").as_deref() != Ok("0") {
        prober_realtime();
    }
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        if lockspaces_query().is_ok() {
            out.push(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    out
}

/// `dlm_tool ls`'s first query (LOCKSPACES) on the query socket of this thread's network
/// namespace, as one connection: the answer's length.
pub fn lockspaces_query() -> std::io::Result<usize> {
    use std::io::Write;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};

    use dlm_proto::query::{Command, DlmcHeader, QUERY_SOCK_NAME};
    let mut h = DlmcHeader::new(Command::LOCKSPACES);
    h.data = 128;
    let mut s = UnixStream::connect_addr(&SocketAddr::from_abstract_name(QUERY_SOCK_NAME)?)?;
    s.write_all(&h.encode())?;
    read_answer(&mut s)
}

/// One answer on the query socket as `dlm_tool` reads it: the header, then the `len` it
/// gives (not up to the end of the stream: the daemon's close is not waited for).
fn read_answer(s: &mut std::os::unix::net::UnixStream) -> std::io::Result<usize> {
    use dlm_proto::query::{DlmcHeader, HEADER_SIZE};
    use std::io::Read;
    let mut head = [0u8; HEADER_SIZE];
    s.read_exact(&mut head)?;
    let h = DlmcHeader::decode(&head).map_err(std::io::Error::other)?;
    let rest = (h.len as usize).saturating_sub(HEADER_SIZE);
    let mut body = vec![0u8; rest.min(1 << 20)];
    s.read_exact(&mut body)?;
    Ok(HEADER_SIZE + body.len())
}

/// Puts the calling thread (the prober) under `SCHED_FIFO`, priority 10 (below corosync's
/// `SCHED_RR` 99): on two cores saturated by the driver, a prober at normal priority
/// measures its own wake-up after the answer as much as the daemon's answer. It sleeps
/// 2 ms between queries, so it takes no CPU from the load; every daemon of a run is
/// probed alike. A failure (no privilege) leaves it at normal priority, said on stderr.
pub fn prober_realtime() {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is this thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        eprintln!(
            "prober: SCHED_FIFO refused ({}), probing at normal priority",
            std::io::Error::last_os_error()
        );
    }
}

/// One run's numbers, as the side-by-side tables print them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    /// Replies per second, all loaded nodes.
    pub ops_s: f64,
    /// Latency p50 (µs).
    pub p50_us: f64,
    /// Latency p99 (µs).
    pub p99_us: f64,
    /// CPU of the daemons per op (µs).
    pub daemon_us_op: f64,
    /// CPU of corosync per op (µs).
    pub corosync_us_op: f64,
    /// Non-blocking replies out of order.
    pub out_of_order: u64,
    /// LOCKSPACES queries during the run: p50, p99 (µs), when probed.
    pub ls_us: Option<(f64, f64)>,
    /// Where our daemon's requests spent their time (node 1's, with three nodes).
    pub hops: Option<HopSplit>,
}

impl Run {
    /// The numbers of `d` (over `secs`), with the CPU ticks (10 ms) the daemons and corosync
    /// used meanwhile and the query latencies probed.
    pub fn of(
        d: &mut Drive,
        secs: f64,
        daemon_ticks: u64,
        corosync_ticks: u64,
        ls: &mut [Duration],
    ) -> Self {
        d.latencies.sort_unstable();
        ls.sort_unstable();
        #[allow(clippy::cast_precision_loss)]
        let per_op = |ticks: u64| ticks as f64 * 1e4 / d.ops.max(1) as f64;
        #[allow(clippy::cast_precision_loss)]
        Self {
            ops_s: d.ops as f64 / secs,
            p50_us: permille_us(&d.latencies, 500),
            p99_us: permille_us(&d.latencies, 990),
            daemon_us_op: per_op(daemon_ticks),
            corosync_us_op: per_op(corosync_ticks),
            out_of_order: d.out_of_order,
            ls_us: (!ls.is_empty()).then(|| (permille_us(ls, 500), permille_us(ls, 990))),
            hops: None,
        }
    }
}

/// The run with the median rate.
pub fn median(mut v: Vec<Run>) -> Run {
    v.sort_by(|a, b| a.ops_s.total_cmp(&b.ops_s));
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The table: one row per (case, daemon) with its run and the ratio to `base`'s rate.
pub fn print_table(rows: &[(&str, &str, Run, f64)]) {
    println!(
        "| case | daemon | ops/s | p50 | p99 | daemon CPU/op | corosync CPU/op | out of order | ÷ C | `ls` query p50 / p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (case, kind, r, base) in rows {
        let ls = r
            .ls_us
            .map_or_else(|| "—".to_owned(), |(a, b)| format!("{a:.0} / {b:.0} µs"));
        // without C's default mode in the run (`VS_KINDS`) there is nothing to divide by
        let ratio = if *base > 0.0 {
            format!("{:.2}", r.ops_s / base)
        } else {
            "—".to_owned()
        };
        println!(
            "| {case} | {kind} | {:.0} | {:.0} µs | {:.0} µs | {:.1} µs | {:.1} µs | {} | {ratio} | {ls} |",
            r.ops_s, r.p50_us, r.p99_us, r.daemon_us_op, r.corosync_us_op, r.out_of_order,
        );
    }
}

/// The bench's seconds per run (first argument, default 3), if Debian's C daemon is there.
pub fn bench_args() -> Result<f64, &'static str> {
    if !std::path::Path::new("/usr/sbin/dlm_controld").exists() {
        return Err("Debian's dlm-controld is not installed (/usr/sbin/dlm_controld)");
    }
    Ok(std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0))
}

/// The entries of `all` whose 0-based index is a digit of `pick` (`"24"`: the third and
/// fifth), or all of them without a pick: the benches' `VS_KINDS` and `VS_CASES`.
pub fn chosen<T: Copy>(all: &[T], pick: Option<&str>) -> Vec<T> {
    all.iter()
        .enumerate()
        .filter(|(i, _)| pick.is_none_or(|v| v.contains(&i.to_string())))
        .map(|(_, t)| *t)
        .collect()
}

/// A case of a side-by-side bench, by the name its table gives it.
pub trait BenchCase: Copy + Ord {
    /// The case's row label.
    fn label(self) -> &'static str;
    /// Issue 14's targets on this case (`crate::targets`).
    fn targets(self) -> &'static [crate::targets::Target];
}

/// The side-by-side loop of `vs_c` and `vs_c3`: [`rounds`] times, each daemon of `kinds` in
/// turn is started (`start`, with its start's number), run on every case (`run`) and stopped
/// (`stop`); then the table of medians is printed, each row divided by C's default mode.
/// `Err` says which daemon did not start or stopped answering.
pub fn alternate<C: BenchCase, S>(
    kinds: &[Daemons],
    cases: &[C],
    mut start: impl FnMut(Daemons, usize) -> Option<S>,
    mut run: impl FnMut(&S, C) -> Option<Run>,
    mut stop: impl FnMut(S),
) -> Result<(), String> {
    let mut runs: BTreeMap<(C, Daemons), Vec<Run>> = BTreeMap::new();
    let mut n = 0;
    for round in 0..rounds() {
        for &kind in kinds {
            n += 1;
            let s = start(kind, n).ok_or_else(|| format!("{} did not start", kind.label()))?;
            for &case in cases {
                let r = run(&s, case).ok_or_else(|| {
                    format!("{} stopped answering in {}", kind.label(), case.label())
                })?;
                print_run(round, case.label(), kind.label(), &r);
                runs.entry((case, kind)).or_default().push(r);
            }
            stop(s);
        }
    }
    let of = |case, kind| median(runs.get(&(case, kind)).cloned().unwrap_or_default());
    let mut rows = Vec::new();
    for &case in cases {
        let c = of(case, Daemons::CDefault);
        for &kind in kinds {
            rows.push((case.label(), kind.label(), of(case, kind), c.ops_s));
        }
    }
    print_table(&rows);
    crate::targets::print_targets(cases, &runs);
    Ok(())
}

/// A bench's exit: success, or its error on stderr and failure.
pub fn exit_code(done: Result<(), String>) -> std::process::ExitCode {
    match done {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// How many times each daemon runs, alternating (`VS_ROUNDS`, default 2; the table shows
/// the median, and each run is printed on stderr as it ends so the spread is seen).
pub fn rounds() -> usize {
    std::env::var("VS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(2)
}

/// One run's line on stderr: `run <round>: <case> · <daemon>: <ops/s> ops/s`, and the
/// query's p50 / p99 where it was probed.
fn print_run(round: usize, case: &str, kind: &str, r: &Run) {
    let ls = r
        .ls_us
        .map_or_else(String::new, |(a, b)| format!(", ls {a:.0} / {b:.0} µs"));
    eprintln!("run {round}: {case} · {kind}: {:.0} ops/s{ls}", r.ops_s);
}

/// `VS_PIN=1`: each run's daemon on the last CPU this bench may use and the driver on the
/// first, so the scheduler cannot put them on one CPU. The fake kernel's device is a
/// socket, whose wake-ups tell the scheduler the waker is about to sleep and so draw the
/// woken one onto the waker's CPU; the real kernel's device wakes either side without that
/// hint.
pub fn pinned() -> bool {
    std::env::var("VS_PIN").is_ok_and(|v| v == "1") && allowed().len() > 1
}

/// The CPUs this process could use when first asked (before any pin narrowed them).
fn allowed() -> &'static [usize] {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(|| {
        let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok();
        (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_some_and(|s| s.is_set(c).unwrap_or(false)))
            .collect()
    })
}

/// Pins every thread of process `pid` (the calling thread with 0) to the last CPU this
/// process could use when first asked (`daemon`) or to the first; whether the process's
/// first thread took it. A thread under `SCHED_DEADLINE` (our clients thread) keeps every
/// CPU: the kernel refuses it a narrower set.
pub fn pin(pid: u32, daemon: bool) -> bool {
    use nix::sched::{CpuSet, sched_setaffinity};
    use nix::unistd::Pid;
    let cpus = allowed();
    let cpu = if daemon { cpus.last() } else { cpus.first() };
    let mut set = CpuSet::new();
    if cpu.is_none_or(|&c| set.set(c).is_err()) {
        return false;
    }
    let mut tids: Vec<i32> = if pid == 0 {
        vec![0]
    } else {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    tids.sort_unstable();
    let mut first = None;
    for t in tids {
        let took = sched_setaffinity(Pid::from_raw(t), &set).is_ok();
        first.get_or_insert(took);
    }
    first.unwrap_or(false)
}

/// Where our daemon's requests spent their time in a run (docs/metrics.md): sums (s) and
/// counts of the hop from the device to the lockspace's task, of our messages' round trip
/// through corosync, and of whole requests read to answered; C's daemons have none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Hops {
    /// `dlm_plock_handoff_seconds`: (sum, count).
    pub handoff: (f64, f64),
    /// `dlm_cpg_round_trip_seconds`.
    pub round_trip: (f64, f64),
    /// `dlm_plock_request_seconds` (wait=false and wait=true).
    pub request: (f64, f64),
    /// `dlm_plock_request_seconds{wait="false"}`: the requests that never wait for a lock.
    pub quick: (f64, f64),
    /// `dlm_plock_spins_total`: reads on that found requests, windows spent without one,
    /// spins not begun or given up for a busy CPU, spins ended for a long turn.
    pub spins: [f64; 4],
    /// `dlm_plock_spin_microseconds` as it stands: gap slept, gap spun, window.
    pub spin_us: (f64, f64, f64),
}

impl Hops {
    /// Lockspace `ls` of the daemon in `ns` as it stands, or None (no metrics: not ours).
    pub fn read(ns: &str, ls: &str) -> Option<Self> {
        let text = crate::metrics_in_ns(ns);
        let one = |name: &str, labels: &str| -> Option<(f64, f64)> {
            let sum = crate::series_in(&text, &format!("{name}_sum{{{labels}}}"))?;
            let count = crate::series_in(&text, &format!("{name}_count{{{labels}}}"))?;
            Some((sum, count))
        };
        let at = format!("lockspace=\"{ls}\"");
        let quick = one("dlm_plock_request_seconds", &format!("{at},wait=\"false\""));
        let waits = one("dlm_plock_request_seconds", &format!("{at},wait=\"true\""));
        let (q, w) = (quick.unwrap_or_default(), waits.unwrap_or_default());
        let series = |name: &str| crate::series_in(&text, name).unwrap_or(0.0);
        let spin = |what: &str| series(&format!("dlm_plock_spin_microseconds{{what=\"{what}\"}}"));
        let spins =
            |outcome: &str| series(&format!("dlm_plock_spins_total{{outcome=\"{outcome}\"}}"));
        Some(Self {
            spins: ["request", "none", "busy", "turn"].map(spins),
            spin_us: (spin("gap_slept"), spin("gap_spun"), spin("window")),
            handoff: one("dlm_plock_handoff_seconds", &at)?,
            round_trip: one("dlm_cpg_round_trip_seconds", &at).unwrap_or_default(),
            request: (q.0 + w.0, q.1 + w.1),
            quick: q,
        })
    }

    /// The run's means since `before`.
    pub fn since(&self, before: &Self) -> HopSplit {
        let mean = |now: (f64, f64), then: (f64, f64)| {
            let n = now.1 - then.1;
            (n > 0.0).then(|| (now.0 - then.0) / n * 1e6)
        };
        let requests = self.request.1 - before.request.1;
        let trips = self.round_trip.1 - before.round_trip.1;
        HopSplit {
            request_us: mean(self.request, before.request),
            quick_us: mean(self.quick, before.quick),
            handoff_us: mean(self.handoff, before.handoff),
            round_trip_us: mean(self.round_trip, before.round_trip),
            trips_per_request: trips / requests.max(1.0),
            spins_per_request: std::array::from_fn(|i| {
                (self.spins[i] - before.spins[i]) / requests.max(1.0)
            }),
            spin_us: self.spin_us,
        }
    }
}

/// A run's requests in our daemon, means over the run (µs; None: no request, or no message,
/// made that hop).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HopSplit {
    /// Read from the device to the reply written.
    pub request_us: Option<f64>,
    /// The same, of the requests that never wait for a lock (no F_SETLKW).
    pub quick_us: Option<f64>,
    /// Read from the device to its lockspace's task taking it.
    pub handoff_us: Option<f64>,
    /// A message of ours from its multicast to corosync delivering it back.
    pub round_trip_us: Option<f64>,
    /// Messages of ours per request.
    pub trips_per_request: f64,
    /// The device's reader reading on, per request: reads that found requests, windows
    /// spent without one, spins not begun or given up for a busy CPU, spins ended for a
    /// long turn.
    pub spins_per_request: [f64; 4],
    /// What the reader learned for its spin at the run's end (µs): gap slept, gap spun,
    /// window.
    pub spin_us: (f64, f64, f64),
}

impl std::fmt::Display for HopSplit {
    /// `request … = device to task … + the rest; CPG round trip … (… per request)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.1} µs"));
        write!(
            f,
            "request {} = device to task {} + the rest; CPG round trip {} ({:.2} per request); \
             spin {:.2} found / {:.3} missed / {:.3} busy / {:.3} long turn per request, \
             gaps slept {} spun {} window {} µs",
            us(self.request_us),
            us(self.handoff_us),
            us(self.round_trip_us),
            self.trips_per_request,
            self.spins_per_request[0],
            self.spins_per_request[1],
            self.spins_per_request[2],
            self.spins_per_request[3],
            self.spin_us.0,
            self.spin_us.1,
            self.spin_us.2
        )
    }
}

/// `perf stat` of process `pid` for `secs` (software events: this machine's VMs have no
/// hardware counters): started by [`PerfCounts::start`], read by [`PerfCounts::finish`].
#[derive(Debug)]
pub struct PerfCounts(Option<std::process::Child>);

impl PerfCounts {
    /// Counting starts now, for `secs`, if `VS_PERF` is set and `perf` runs.
    pub fn start(pid: u32, secs: f64) -> Self {
        if std::env::var("VS_PERF").is_err() || pid == 0 {
            return Self(None);
        }
        let child = std::process::Command::new("perf")
            .args([
                "stat",
                "-x,",
                "-e",
                "raw_syscalls:sys_enter,context-switches",
            ])
            .args(["-p", &pid.to_string(), "--", "sleep", &format!("{secs}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok();
        Self(child)
    }

    /// (syscalls, context switches) over the counting, or None.
    pub fn finish(self) -> Option<(u64, u64)> {
        let out = self.0?.wait_with_output().ok()?;
        let text = String::from_utf8_lossy(&out.stderr);
        let count = |event: &str| {
            text.lines()
                .find(|l| l.contains(event))
                .and_then(|l| l.split(',').next())
                .and_then(|n| n.trim().parse::<u64>().ok())
        };
        Some((count("sys_enter")?, count("context-switches")?))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::fd::{AsFd, AsRawFd};
    use std::path::Path;
    use std::thread::JoinHandle;

    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::socket::{MsgFlags, recv, send};

    use super::{LockUnlock, PlockInfo, PlockOp, chosen, drive};
    use crate::FakeKernel;
    use crate::fake_kernel::daemon_end;

    /// A daemon stand-in on the plock device under `root`: each request answered rv 0, in
    /// the order read — or, with `swap`, each two read within 50 ms of each other answered
    /// the second first. Returns, once the device closes, the last request of each owner.
    fn answering(root: &Path, swap: bool) -> JoinHandle<BTreeMap<u64, PlockInfo>> {
        let fd = daemon_end(root).expect("the fake kernel's device");
        std::thread::spawn(move || {
            let answer = |info: &PlockInfo| {
                let mut r = *info;
                r.rv = 0;
                send(fd.as_raw_fd(), &r.encode(), MsgFlags::MSG_NOSIGNAL).is_ok()
            };
            let (mut last, mut held) = (BTreeMap::new(), None::<PlockInfo>);
            loop {
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                if poll(&mut fds, PollTimeout::from(50u16)).unwrap_or(0) == 0 {
                    if let Some(h) = held.take() {
                        answer(&h);
                    }
                    continue;
                }
                let mut buf = [0u8; 128];
                let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).unwrap_or(0);
                let Ok(info) = PlockInfo::decode(&buf[..n]) else {
                    return last;
                };
                last.insert(info.owner, info);
                match held.take() {
                    Some(first) => {
                        answer(&info);
                        answer(&first);
                    }
                    None if swap => held = Some(info),
                    None => {
                        answer(&info);
                    }
                }
            }
        })
    }

    /// Drives four processes, each on a file of its own, against `answering(swap)` for
    /// 0.3 s: what the driver measured and the last request of each process.
    fn drive_four(swap: bool) -> (super::Drive, BTreeMap<u64, PlockInfo>) {
        let dir = std::env::temp_dir().join(format!("dlm-drive-{}-{swap}", std::process::id()));
        let k = FakeKernel::start(&dir).expect("fake kernel");
        let stand_in = answering(&dir, swap);
        let script = LockUnlock(|p, _| (1000 + p, 0, 9, false));
        let d = drive(&k, 7, &script, 100, 4, 0.3).expect("every request answered");
        drop(k);
        let last = stand_in.join().expect("the stand-in");
        let _ = std::fs::remove_dir_all(&dir);
        (d, last)
    }

    #[test]
    fn the_driver_counts_replies_in_order_and_unlocks_everything_at_the_end() {
        let (d, last) = drive_four(false);
        assert!(d.ops > 0);
        assert_eq!(d.latencies.len() as u64, d.ops);
        assert_eq!(d.out_of_order, 0);
        assert_eq!(
            last.keys().copied().collect::<Vec<_>>(),
            vec![100, 101, 102, 103]
        );
        for (owner, r) in &last {
            assert_eq!(
                (r.op, r.number, r.start, r.end),
                (PlockOp::UNLOCK, 1000 + owner - 100, 0, u64::MAX),
                "process {owner} ends with the unlock of its whole file"
            );
        }
    }

    #[test]
    fn the_driver_counts_non_blocking_replies_out_of_request_order() {
        let (d, _) = drive_four(true);
        assert!(d.ops > 0);
        assert!(d.out_of_order > 0, "{} ops, none out of order", d.ops);
    }

    #[test]
    fn a_pinned_thread_runs_on_one_cpu_and_the_set_it_came_from_is_kept() {
        let before = super::allowed().to_vec();
        std::thread::spawn(move || {
            assert!(super::pin(0, true));
            let now = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("mask");
            let on: Vec<usize> = before
                .iter()
                .copied()
                .filter(|&c| now.is_set(c).unwrap_or(false))
                .collect();
            assert_eq!(on, before.last().copied().into_iter().collect::<Vec<_>>());
            assert_eq!(
                super::allowed(),
                before,
                "a pin does not narrow what may be used"
            );
        })
        .join()
        .expect("the pinned thread");
    }

    #[test]
    fn the_benches_pick_entries_by_their_index_digits() {
        let all = ['a', 'b', 'c', 'd', 'e'];
        assert_eq!(chosen(&all, Some("24")), vec!['c', 'e']);
        assert_eq!(
            chosen(&all, Some("42")),
            vec!['c', 'e'],
            "in the table's order"
        );
        assert_eq!(chosen(&all, None), all.to_vec());
        assert!(chosen(&all, Some("9")).is_empty());
    }
}
