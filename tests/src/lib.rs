//! `dlm-tests`: what the daemon's tests and benches share. The fake kernel (library and
//! `fake_kernel` binary: the configfs/sysfs tree, the misc devices as `SOCK_SEQPACKET`
//! sockets, uevents, a record of every write); the LD_PRELOAD shims of `shim/`
//! (`dlm_shim.c` runs Debian's C daemon on the fake kernel, [`build_shim`] and
//! [`start_c_daemon`]; `cpg_pushback.c` makes corosync answer TRY_AGAIN on demand,
//! [`build_c_shim`]); the daemon's guard and builders, network namespaces and the helpers
//! the cluster tests share; and the benches' driver ([`closed_loop`], [`plock_port`]) and
//! targets ([`targets`]). The benches' binaries are in `src/bin/` (docs/BENCHMARKS.md).

pub mod closed_loop;
pub mod fake_kernel;
pub mod plock_port;
pub mod targets;

pub use fake_kernel::{FakeKernel, Record, configfs_members, control_writes, writes};

/// A write-lock request of owner `owner` (its pid is the owner too) on lockspace `foo`, as
/// the kernel would send it: the daemon fills in the node id.
pub fn foo_request(
    op: dlm_proto::kernel::PlockOp,
    owner: u64,
    number: u64,
    wait: bool,
    start: u64,
    end: u64,
) -> dlm_proto::kernel::PlockInfo {
    let name = dlm_proto::LockspaceName::new(b"foo").expect("foo is a valid name");
    dlm_proto::kernel::PlockInfo {
        version: dlm_proto::kernel::PLOCK_VERSION,
        op,
        ex: true,
        wait,
        flags: dlm_proto::kernel::PlockFlags(0),
        pid: u32::try_from(owner).unwrap_or(u32::MAX),
        nodeid: 0,
        rv: 0,
        fsid: dlm_proto::wire::global_id(&name),
        number,
        start,
        end,
        owner,
    }
}

/// A process this test started, killed and reaped when dropped.
#[derive(Debug)]
pub struct Daemon(pub std::process::Child);

impl Daemon {
    /// Sends SIGTERM.
    pub fn terminate(&self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    /// Its exit status once it has exited, polling every 100 ms for up to `limit`.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        let t = std::time::Instant::now();
        loop {
            if let Ok(Some(st)) = self.0.try_wait() {
                return Some(st);
            }
            if t.elapsed() > limit {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `dlm_controld` command line for a test: `--kernel-root <root> --foreground`, then the
/// cluster and options asked for; run in a network namespace with its output discarded.
#[derive(Debug, Clone)]
pub struct DaemonBuilder {
    bin: std::path::PathBuf,
    args: Vec<String>,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

impl DaemonBuilder {
    /// The daemon `bin` on the fake kernel under `root`.
    pub fn new(bin: impl AsRef<std::path::Path>, root: &std::path::Path) -> Self {
        Self {
            bin: bin.as_ref().to_path_buf(),
            args: vec![
                "--kernel-root".into(),
                root.display().to_string(),
                "--foreground".into(),
            ],
            env: Vec::new(),
        }
    }

    /// The one-node embedded group instead of corosync.
    #[must_use]
    pub fn embedded(self) -> Self {
        self.args(&["--cluster", "embedded"])
    }

    /// More options, in order.
    #[must_use]
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| (*a).to_string()));
        self
    }

    /// An environment variable of the daemon.
    #[must_use]
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.env.push((key.into(), value.as_ref().to_owned()));
        self
    }

    /// The command, in network namespace `ns` (`ip netns exec`); its output is the
    /// caller's to direct (`output()` captures it).
    pub fn command(&self, ns: &str) -> std::process::Command {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(&self.bin)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Started in `ns`, its output discarded.
    pub fn spawn(&self, ns: &str) -> std::io::Result<Daemon> {
        self.spawn_with(ns, std::process::Stdio::null())
    }

    /// Started in `ns`, its standard error appended to `stderr` (a daemon that exits at
    /// start says why there, before its log file exists).
    pub fn spawn_logged(&self, ns: &str, stderr: &std::path::Path) -> std::io::Result<Daemon> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(stderr)?;
        self.spawn_with(ns, f.into())
    }

    fn spawn_with(&self, ns: &str, stderr: std::process::Stdio) -> std::io::Result<Daemon> {
        self.command(ns)
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .map(Daemon)
    }
}

/// The standard error file [`start_daemon_on_corosync`] keeps under a kernel root.
pub const DAEMON_STDERR: &str = "daemon.stderr";

/// What our daemon on the fake kernel under `root` logged (its log file, then what it
/// wrote to standard error when started by [`start_daemon_on_corosync`]), for a failing
/// test's message; empty where nothing was written.
pub fn daemon_logs(root: &std::path::Path) -> String {
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    read(root.join("var/log/dlm_controld/dlm_controld.log")) + &read(root.join(DAEMON_STDERR))
}

/// The last `n` lines of `text`, newest first.
pub fn newest_lines(text: &str, n: usize) -> String {
    text.lines().rev().take(n).collect::<Vec<_>>().join("\n")
}

/// Starts `dlm_controld` (path `bin`) in network namespace `ns` on the fake kernel `k` under
/// `root`, with corosync, `--foreground -f 0` (fencing off unless `extra` says `-f 1`) and
/// `extra` options. corosync may still be forming its ring, and the daemon exits when it
/// cannot connect: it is started again, up to 30 times, as a service manager would; a daemon
/// that runs is waited for, never killed for being slow (see `wait_up`).
pub fn start_daemon_on_corosync(
    ns: &str,
    bin: &std::path::Path,
    root: &std::path::Path,
    k: &FakeKernel,
    extra: &[&str],
) -> Option<Daemon> {
    let daemon = DaemonBuilder::new(bin, root).args(&["-f", "0"]).args(extra);
    for _ in 0..30 {
        let mut d = daemon.spawn_logged(ns, &root.join(DAEMON_STDERR)).ok()?;
        if wait_up(&mut d, k) {
            return Some(d);
        }
        // a corosync started a moment ago may not take connections yet: paced as a
        // service manager's restarts are, 30 attempts span seconds, not one
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    None
}

/// The stdout of `program args` run in network namespace `ns` (empty if it cannot run).
pub fn stdout_in_ns(ns: &str, program: &str, args: &[&str]) -> String {
    std::process::Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Daemons started one after the other with the default `post_join_delay` (30 s), so a
/// slow start of the next is not fenced at startup (a configured node outside the daemon
/// group when the delay ends is, as in C): waits until the real `dlm_tool status` in each
/// of `nss` lists every node `1..=nss.len()` as a daemon member, then sets the delay to
/// `secs` on each (`set_config`), so a failure later is fenced soon. False on a timeout
/// or a refused `set_config`.
pub fn settle_post_join_delay(nss: &[String], secs: u32, timeout: std::time::Duration) -> bool {
    let all_members = |status: &str| {
        (1..=nss.len()).all(|k| {
            status
                .lines()
                .any(|l| l.starts_with(&format!("node {k} M ")))
        })
    };
    let end = std::time::Instant::now() + timeout;
    for ns in nss {
        while !all_members(&stdout_in_ns(ns, "dlm_tool", &["status"])) {
            if std::time::Instant::now() >= end {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let set = format!("post_join_delay={secs}");
    nss.iter()
        .all(|ns| stdout_in_ns(ns, "dlm_tool", &["set_config", &set]) == "set_config done\n")
}

/// One series of the metrics endpoint (127.0.0.1:9465) of the daemon in network namespace
/// `ns`, e.g. `dlm_plock_locks{lockspace="foo"}`; 0 when absent or unreachable.
pub fn metric_in_ns(ns: &str, series: &str) -> f64 {
    series_in(&metrics_in_ns(ns), series).unwrap_or(0.0)
}

/// The text of one scrape of `/metrics` of the daemon in network namespace `ns` (empty if
/// it did not answer).
pub fn metrics_in_ns(ns: &str) -> String {
    std::process::Command::new("ip")
        .args(["netns", "exec", ns, "bash", "-c"])
        .arg(
            "exec 3<>/dev/tcp/127.0.0.1/9465; \
             printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3",
        )
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The value of `series` (the metric's name with its labels, as exported) in a scrape.
pub fn series_in(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// Compiles `tests/shim/dlm_shim.c` (the LD_PRELOAD shim that runs the C daemon on a fake
/// kernel) into `dir` with the system C compiler; returns the library's path.
pub fn build_shim(dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    build_c_shim(dir, "dlm_shim")
}

/// Compiles `tests/shim/<name>.c` into `dir/<name>.so` (an LD_PRELOAD shim) with the system
/// C compiler; returns the library's path.
pub fn build_c_shim(dir: &std::path::Path, name: &str) -> std::io::Result<std::path::PathBuf> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("shim/{name}.c"));
    let out = dir.join(format!("{name}.so"));
    let st = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-ldl")
        .status()?;
    if st.success() {
        Ok(out)
    } else {
        Err(std::io::Error::other(format!("cc {}: {st}", src.display())))
    }
}

/// Starts Debian's C `dlm_controld` 4.2.0 (`/usr/sbin/dlm_controld`, `-D`: foreground,
/// debug to stderr, which goes to `log`) in network namespace `ns` on the fake kernel `k`,
/// with `extra` options. It runs in the namespace's private mount namespace with a tmpfs on
/// `/run` (its pid file) and the fake kernel's `sys/kernel` bound on `/sys/kernel`
/// (configfs and sysfs by path), the `shim` preloaded for the plock device and uevents.
/// Retries while corosync forms its ring, as [`start_daemon_on_corosync`].
pub fn start_c_daemon(
    ns: &str,
    shim: &std::path::Path,
    k: &FakeKernel,
    extra: &[&str],
    log: &std::path::Path,
) -> Option<Daemon> {
    let root = k.root().display().to_string();
    let mut args = String::new();
    for a in extra {
        args.push(' ');
        args.push_str(a);
    }
    // for profiling: `C_DAEMON_WRAP="valgrind --tool=callgrind"` runs it under a tool
    let wrap = std::env::var("C_DAEMON_WRAP").unwrap_or_default();
    let script = format!(
        "mount -t tmpfs tmpfs /run && mount --bind {root}/sys/kernel /sys/kernel && \
         exec env LD_PRELOAD={} DLM_FAKE_ROOT={root} {wrap} /usr/sbin/dlm_controld -D{args}",
        shim.display()
    );
    for _ in 0..30 {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .ok()?;
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", ns, "sh", "-c", &script])
            .stdout(std::process::Stdio::null())
            .stderr(err)
            .spawn()
            .ok()?;
        let mut d = Daemon(child);
        if wait_up(&mut d, k) {
            return Some(d);
        }
    }
    None
}

/// Waits for a daemon just started to listen for uevents: `true` once it does, `false` once
/// it has exited (corosync was not ready: start it again) or after a minute. A daemon still
/// running is never killed for being slow: a killed daemon is a failed cluster member to the
/// others (PROCDOWN), which they fence, and kick from the cluster once it is back.
fn wait_up(d: &mut Daemon, k: &FakeKernel) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < end {
        if k.wait_daemon(std::time::Duration::from_secs(1)) {
            return true;
        }
        if !matches!(d.0.try_wait(), Ok(None)) {
            return false;
        }
    }
    false
}

/// Moves the calling thread into network namespace `name` (`/run/netns/<name>`), where
/// that namespace's daemon listens on its abstract sockets.
pub fn enter_netns(name: &str) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: setns on a valid namespace fd; it changes only the calling thread's network
    // namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A network namespace made for one test and deleted when dropped, so that daemons of
/// parallel tests do not meet on the abstract sockets `\0dlmc_query_sock` and `\0dlmc_sock`.
#[derive(Debug)]
pub struct Netns(pub String);

impl Netns {
    /// Creates `dlmt-<tag>-<pid>` with its loopback up.
    pub fn new(tag: &str) -> std::io::Result<Self> {
        let name = format!("dlmt-{tag}-{}", std::process::id());
        let run = |args: &[&str]| -> std::io::Result<()> {
            let ok = std::process::Command::new("ip")
                .args(args)
                .status()?
                .success();
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::other(format!("ip {args:?} failed")))
            }
        };
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(std::process::Stdio::null())
            .status();
        run(&["netns", "add", &name])?;
        run(&["-n", &name, "link", "set", "lo", "up"])?;
        Ok(Self(name))
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> std::process::Command {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

/// User plus system CPU time of process `pid`, in clock ticks (0 if it cannot be read).
pub fn cpu_ticks(pid: u32) -> u64 {
    stat_ticks(std::path::Path::new(&format!("/proc/{pid}/stat")))
}

/// The same for the thread of `pid` named `comm`: its tid and ticks, if there is one.
pub fn thread_cpu_ticks(pid: u32, comm: &str) -> Option<(u32, u64)> {
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let named = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if named.trim() == comm {
            let tid = t.file_name().to_str()?.parse().ok()?;
            return Some((tid, stat_ticks(&t.path().join("stat"))));
        }
    }
    None
}

/// utime + stime of a `/proc/.../stat` file.
fn stat_ticks(path: &std::path::Path) -> u64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // the fields after the command's closing parenthesis; utime and stime are 14 and 15
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

/// A hostile local user: the `flood` binary run as uid 65534 (setpriv, a descriptor limit of
/// 8192) in a network namespace, holding its connections to the daemon's three listeners
/// until dropped.
#[derive(Debug)]
pub struct Flood {
    child: std::process::Child,
    bin: std::path::PathBuf,
    /// Connections made to the main socket, the query socket and the metrics endpoint.
    pub opened: Vec<usize>,
}

impl Flood {
    /// Starts `flood` (the binary at `flood`, copied where uid 65534 may run it) in `ns`
    /// with `n` connections to each listener; returns once they are made.
    pub fn start(ns: &Netns, flood: &std::path::Path, n: usize) -> std::io::Result<Self> {
        use std::io::BufRead;
        use std::os::unix::fs::PermissionsExt;
        let bin = std::env::temp_dir().join(format!("dlm-flood-bin-{}", std::process::id()));
        std::fs::create_dir_all(&bin)?;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))?;
        let exe = bin.join("flood");
        std::fs::copy(flood, &exe)?;
        let mut child = ns
            .command("prlimit")
            .args(["--nofile=8192:8192", "--", "setpriv"])
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .arg(n.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            std::io::BufReader::new(out).read_line(&mut line)?;
        }
        let opened = line
            .split_whitespace()
            .skip(1)
            .filter_map(|w| w.parse().ok())
            .collect();
        Ok(Self { child, bin, opened })
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        use std::io::Write;
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.bin);
    }
}
