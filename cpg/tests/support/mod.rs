//! A real corosync for tests: one node on loopback inside a network namespace this test
//! creates (libqb's IPC sockets are abstract, hence per namespace), with its pid file on a
//! private tmpfs `/run` and its state and log in a temporary directory. Only what the
//! fixture created is removed, and only the corosync it started is killed, by pid.
//!
//! Needs root, `ip` (iproute2) and corosync; `.ci/run` installs them.

#![allow(dead_code, unreachable_pub)]

use std::fs;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub struct Corosync {
    pub netns: String,
    pub dir: PathBuf,
    child: Option<Child>,
    pid: u32,
}

fn sh(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Corosync {
    /// Starts corosync as node 1 of a one-node cluster named `dlmtest`.
    pub fn start(tag: &str) -> Self {
        assert!(
            nix_is_root(),
            "the corosync tests start corosync in a network namespace and need root"
        );
        let netns = format!("dlmt-{tag}-{}", std::process::id());
        let dir = std::env::temp_dir().join(&netns);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("state")).expect("temp dir");
        let conf = format!(
            "totem {{\n version: 2\n cluster_name: dlmtest\n transport: knet\n token: 1000\n \
             crypto_cipher: none\n crypto_hash: none\n}}\n\
             nodelist {{\n node {{\n  ring0_addr: 127.0.0.1\n  nodeid: 1\n  name: node1\n }}\n}}\n\
             quorum {{\n provider: corosync_votequorum\n wait_for_all: 0\n}}\n\
             logging {{\n to_logfile: yes\n logfile: {log}\n to_syslog: no\n to_stderr: no\n timestamp: on\n}}\n\
             system {{\n state_dir: {state}\n move_to_root_cgroup: no\n}}\n",
            log = dir.join("corosync.log").display(),
            state = dir.join("state").display()
        );
        let conf_path = dir.join("corosync.conf");
        fs::write(&conf_path, conf).expect("write corosync.conf");
        assert!(sh("ip", &["netns", "add", &netns]), "ip netns add {netns}");
        assert!(sh(
            "ip",
            &["netns", "exec", &netns, "ip", "link", "set", "lo", "up"]
        ));
        // `ip netns exec` gives a private mount namespace: the tmpfs hides the host's /run
        // (corosync's lock file is /run/corosync.pid) from this corosync only.
        let script = format!(
            "mount -t tmpfs tmpfs /run && exec corosync -f -c {}",
            conf_path.display()
        );
        let child = Command::new("ip")
            .args(["netns", "exec", &netns, "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start corosync");
        Self {
            netns,
            dir,
            pid: child.id(),
            child: Some(child),
        }
    }

    /// Runs `f` on a new thread (8 MiB of stack, for libcpg's dispatch) inside the node's
    /// network namespace, and returns its result.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.netns);
        thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || {
                let ns = fs::File::open(&path).expect("open netns");
                // SAFETY: setns on a valid namespace fd; affects only this thread.
                let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns into {path}");
                f()
            })
            .expect("spawn")
            .join()
            .expect("test thread panicked")
    }

    /// The corosync process id (the `sh` execs into corosync).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// SIGKILLs the corosync this fixture started.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("corosync.log")).unwrap_or_default()
    }
}

impl Drop for Corosync {
    fn drop(&mut self) {
        let pid = Some(self.pid);
        self.kill();
        let _ = sh("ip", &["netns", "del", &self.netns]);
        // libqb leaves /dev/shm/qb-<serverpid>-* behind after a SIGKILL
        if let (Some(pid), Ok(entries)) = (pid, fs::read_dir("/dev/shm")) {
            let ours = [format!("qb-{pid}-"), format!("qb-corosync-{pid}-")];
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if ours.iter().any(|p| name.starts_with(p.as_str())) {
                    let _ = fs::remove_dir_all(e.path());
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Runs `f` on a new thread (8 MiB of stack) inside network namespace `netns`.
pub fn run_in<T: Send + 'static>(netns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{netns}");
    thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let ns = fs::File::open(&path).expect("open netns");
            // SAFETY: setns on a valid namespace fd; affects only this thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns into {path}");
            f()
        })
        .expect("spawn")
        .join()
        .expect("test thread panicked")
}

fn must(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect("run command");
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// N corosync nodes, each in its own network namespace `dlmt-<tag>-<pid>-n<k>` with address
/// 127.100.0.k on a veth whose peer sits on a bridge in namespace `...-br` (the host sees
/// none of it). Node k's corosync runs on a private tmpfs `/run`.
pub struct Cluster {
    pub prefix: String,
    pub dir: PathBuf,
    pub nodes: usize,
    children: Vec<Option<Child>>,
    /// Every corosync pid this fixture started, for the /dev/shm clean-up.
    pids: Vec<u32>,
}

impl Cluster {
    pub fn node_ns(&self, k: usize) -> String {
        format!("{}-n{k}", self.prefix)
    }

    fn br_ns(&self) -> String {
        format!("{}-br", self.prefix)
    }

    pub fn start(tag: &str, nodes: usize) -> Self {
        assert!(nix_is_root(), "the cluster tests need root");
        let prefix = format!("dlmt-{tag}-{}", std::process::id());
        let dir = std::env::temp_dir().join(&prefix);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir");
        let mut c = Self {
            prefix,
            dir,
            nodes,
            children: (0..=nodes).map(|_| None).collect(),
            pids: Vec::new(),
        };
        let br = c.br_ns();
        must("ip", &["netns", "add", &br]);
        must("ip", &["-n", &br, "link", "add", "br0", "type", "bridge"]);
        must("ip", &["-n", &br, "link", "set", "br0", "up"]);
        let mut nodelist = String::new();
        for k in 1..=nodes {
            let ns = c.node_ns(k);
            let port = format!("p{k}");
            must("ip", &["netns", "add", &ns]);
            must(
                "ip",
                &[
                    "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port,
                    "netns", &br,
                ],
            );
            must(
                "ip",
                &["-n", &br, "link", "set", &port, "master", "br0", "up"],
            );
            must("ip", &["-n", &ns, "link", "set", "lo", "up"]);
            // 127/8 on lo would capture the peers' 127.100.0.x: keep only 127.0.0.1 there
            must(
                "ip",
                &["-n", &ns, "addr", "del", "127.0.0.1/8", "dev", "lo"],
            );
            must(
                "ip",
                &["-n", &ns, "addr", "add", "127.0.0.1/32", "dev", "lo"],
            );
            let addr = format!("127.100.0.{k}/24");
            must("ip", &["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            must("ip", &["-n", &ns, "link", "set", "eth0", "up"]);
            must(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "sysctl",
                    "-q",
                    "-w",
                    "net.ipv4.conf.all.route_localnet=1",
                ],
            );
            must(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "sysctl",
                    "-q",
                    "-w",
                    "net.ipv4.conf.eth0.route_localnet=1",
                ],
            );
            nodelist.push_str(&format!(
                " node {{\n  ring0_addr: 127.100.0.{k}\n  nodeid: {k}\n  name: node{k}\n }}\n"
            ));
        }
        for k in 1..=nodes {
            let nd = c.dir.join(format!("n{k}"));
            fs::create_dir_all(nd.join("state")).expect("node dir");
            let conf = format!(
                "totem {{\n version: 2\n cluster_name: dlmtest\n transport: udpu\n token: 1000\n \
                 crypto_cipher: none\n crypto_hash: none\n}}\n\
                 nodelist {{\n{nodelist}}}\n\
                 quorum {{\n provider: corosync_votequorum\n}}\n\
                 logging {{\n to_logfile: yes\n logfile: {log}\n to_syslog: no\n to_stderr: no\n timestamp: on\n}}\n\
                 system {{\n state_dir: {state}\n move_to_root_cgroup: no\n}}\n",
                log = nd.join("corosync.log").display(),
                state = nd.join("state").display()
            );
            fs::write(nd.join("corosync.conf"), conf).expect("write conf");
            c.start_node(k);
        }
        c
    }

    /// Node k's corosync process id (the `sh` execs into corosync; 0 when stopped).
    pub fn corosync_pid(&self, k: usize) -> u32 {
        self.children[k].as_ref().map_or(0, Child::id)
    }

    /// (Re)starts node k's corosync.
    pub fn start_node(&mut self, k: usize) {
        let conf = self.dir.join(format!("n{k}/corosync.conf"));
        let script = format!(
            "mount -t tmpfs tmpfs /run && exec corosync -f -c {}",
            conf.display()
        );
        let child = Command::new("ip")
            .args(["netns", "exec", &self.node_ns(k), "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start corosync");
        self.pids.push(child.id());
        self.children[k] = Some(child);
    }

    /// Sends `signal` to node k's corosync (the one this fixture started) and reaps it.
    pub fn signal(&mut self, k: usize, signal: i32) {
        if let Some(mut c) = self.children[k].take() {
            let pid = i32::try_from(c.id()).expect("pid");
            // SAFETY: signalling a child process we started and have not reaped.
            unsafe { libc::kill(pid, signal) };
            let _ = c.wait();
        }
    }

    /// Whether node k's corosync exits within `limit`.
    pub fn exits_within(&mut self, k: usize, limit: Duration) -> bool {
        let Some(child) = self.children[k].as_mut() else {
            return true;
        };
        let exited = wait_for(limit, || child.try_wait().ok().flatten()).is_some();
        if exited {
            self.children[k] = None;
        }
        exited
    }

    /// Cuts (`false`) or restores (`true`) node k's link at the bridge.
    pub fn link(&self, k: usize, up: bool) {
        must(
            "ip",
            &[
                "-n",
                &self.br_ns(),
                "link",
                "set",
                &format!("p{k}"),
                if up { "up" } else { "down" },
            ],
        );
    }

    pub fn run<T: Send + 'static>(&self, k: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        run_in(&self.node_ns(k), f)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for k in 1..=self.nodes {
            self.signal(k, libc::SIGKILL);
            let _ = sh("ip", &["netns", "del", &self.node_ns(k)]);
        }
        let _ = sh("ip", &["netns", "del", &self.br_ns()]);
        if let Ok(entries) = fs::read_dir("/dev/shm") {
            let ours: Vec<String> = self
                .pids
                .iter()
                .flat_map(|p| [format!("qb-{p}-"), format!("qb-corosync-{p}-")])
                .collect();
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if ours.iter().any(|p| name.starts_with(p.as_str())) {
                    let _ = fs::remove_dir_all(e.path());
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Retries `f` until it returns `Some` or `limit` passes (readiness of a just-started
/// service, not a performance assertion).
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        thread::sleep(Duration::from_millis(50));
    }
}
