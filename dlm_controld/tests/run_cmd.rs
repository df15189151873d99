//! `dlm_tool run` (lvmlockd's way to run `lvm lvchange --refresh` on every node) through
//! the real dlm_tool 4.2.0 against our daemon on one node: the command runs (a stand-in
//! `lvm` first on the daemon's PATH records its arguments and exits with the status an
//! operator file gives), `run_check` reports done / failed, `run_list` shows the run as C
//! formats it, and a command outside C's two allowed ones never runs.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dlm_tests::{Daemon, DaemonBuilder, FakeKernel, Netns};

const T: Duration = Duration::from_secs(20);

struct Setup {
    dir: PathBuf,
    ns: Netns,
    _k: FakeKernel,
    _d: Daemon,
}

impl Setup {
    fn start(tag: &str, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("dlm-run-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).expect("bin");
        // a stand-in for lvm, and a program that must never run
        let lvm = format!(
            "#!/bin/sh\necho \"$@\" >> {}\nexit $(cat {} 2>/dev/null || echo 0)\n",
            dir.join("lvm.log").display(),
            dir.join("lvm.status").display()
        );
        let touch = format!("#!/bin/sh\ntouch {}\n", dir.join("pwned").display());
        for (name, text) in [("lvm", lvm), ("evil", touch)] {
            let p = bin.join(name);
            std::fs::write(&p, text).expect("script");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let root = dir.join("root");
        let k = FakeKernel::start(&root).expect("fake kernel");
        let ns = Netns::new(tag).expect("netns");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let d = DaemonBuilder::new(env!("CARGO_BIN_EXE_dlm_controld"), &root)
            .embedded()
            .args(&["--metrics", "off"])
            .args(extra)
            .env("PATH", &path)
            .spawn(&ns.0)
            .expect("daemon");
        assert!(k.wait_daemon(T), "the daemon never came up");
        // the uevent socket comes first: the main and query sockets are bound a moment later
        let answers = || {
            ns.command("dlm_tool")
                .arg("status")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        assert!(wait_until(answers), "the daemon's sockets never answered");
        Self {
            dir,
            ns,
            _k: k,
            _d: d,
        }
    }

    fn tool(&self, args: &[&str]) -> String {
        let out = self
            .ns
            .command("dlm_tool")
            .args(args)
            .output()
            .expect("dlm_tool");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// This project's dlm_tool, next to the daemon's binary.
    fn ours(&self, args: &[&str]) -> String {
        let bin =
            std::path::Path::new(env!("CARGO_BIN_EXE_dlm_controld")).with_file_name("dlm_tool");
        let out = self
            .ns
            .command(&bin.display().to_string())
            .args(args)
            .output()
            .expect("our dlm_tool");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn lvm_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("lvm.log")).unwrap_or_default()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn uuid_of(out: &str) -> String {
    let u = out
        .lines()
        .find_map(|l| l.strip_prefix("run_uuid: "))
        .unwrap_or_else(|| panic!("no run_uuid in {out:?}"))
        .to_owned();
    assert_eq!(u.len(), 36, "{u}");
    assert!(
        u.chars().all(|c| c.is_ascii_hexdigit() || c == '-') && u == u.to_lowercase(),
        "{u}"
    );
    u
}

fn wait_until(what: impl Fn() -> bool) -> bool {
    let end = Instant::now() + T;
    while Instant::now() < end {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn run_on_every_node_with_the_real_dlm_tool() {
    let s = Setup::start("run", &[]);
    // `run -n`: on every node including this one; with `-i` the tool repeats run_check
    // every second until done (the command is one word: the tool's getopt would take
    // `--refresh` for its own option)
    let out = s.tool(&["run", "-i", "10", "-n", "lvm lvchange --refresh vg/lv"]);
    let uuid = uuid_of(&out);
    assert!(out.ends_with("check_status: done \n"), "{out}");
    assert_eq!(s.lvm_log(), "lvchange --refresh vg/lv\n");

    // a failing command: done failed, and the run list shows it until cleared
    std::fs::write(s.dir.join("lvm.status"), "3").expect("status");
    let out = s.tool(&["run_start", "-n", "lvm lvs -o name"]);
    let uuid2 = uuid_of(&out);
    assert_ne!(uuid, uuid2);
    assert!(wait_until(|| s.lvm_log().contains("lvs -o name")));
    let listed = |s: &Setup| s.tool(&["run_list"]);
    assert!(
        wait_until(|| listed(&s).contains(&format!(
            "run_uuid {uuid2} start_nodeid 1 local_pid 0 local_result 0 need_replies 0 \
             reply_count 1 fail_count 1 flags 4\nrun_command lvm lvs -o name \n"
        ))),
        "{}",
        listed(&s)
    );
    let out = s.tool(&["run_check", &uuid2]);
    assert_eq!(out, "check_status: done failed \n");
    // CLEAR forgot it: an unknown uuid now
    assert!(!listed(&s).contains(&uuid2), "{}", listed(&s));

    // this project's dlm_tool: the same words, and the same run_list bytes
    std::fs::write(s.dir.join("lvm.status"), "0").expect("status");
    let out = s.ours(&["run", "-i", "10", "-n", "lvm lvs"]);
    let _ = uuid_of(&out);
    assert!(out.ends_with("check_status: done \n"), "{out}");
    let out = s.ours(&["run_start", "lvm lvs --all"]);
    let u3 = uuid_of(&out);
    assert_eq!(out, format!("run_uuid: {u3}\n"));
    let (real, mine) = (s.tool(&["run_list"]), s.ours(&["run_list"]));
    assert!(
        real.contains(&format!("run_uuid {u3} start_nodeid 1")),
        "{real}"
    );
    assert_eq!(real, mine);
    // without -n the starter does not run it: no node to wait for, done at once
    assert_eq!(s.ours(&["run_check", &u3]), "check_status: done \n");
    assert!(!s.lvm_log().contains("--all"));

    // only `lvm lvchange --refresh` and `lvm lvs` ever run, as with C's helper
    let out = s.tool(&["run", "-i", "10", "-n", "evil"]);
    assert!(out.ends_with("check_status: done failed \n"), "{out}");
    assert!(!s.dir.join("pwned").exists());
}

#[test]
fn without_the_helper_runs_are_refused() {
    let s = Setup::start("nohelper", &["--enable_helper", "0"]);
    let out = s.tool(&["run_start", "-n", "lvm", "lvs"]);
    // C's tool prints whatever uuid it got back (none) when the daemon refuses
    assert_eq!(out, "run_uuid: \n");
    assert!(s.lvm_log().is_empty());
}
