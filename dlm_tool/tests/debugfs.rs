//! `lockdump` and `lockdebug` read the kernel's debugfs, not the daemon. The fixtures in
//! `tests/debugfs/` (every line kind, status, mode, flag and format the C tool handles,
//! plus a bad waiters line) are given to the real dlm_tool 4.2.0 at
//! `/sys/kernel/debug/dlm` in a private mount namespace and to ours under `--kernel-root`:
//! stdout and stderr must be byte-identical for every option combination.

use std::path::Path;
use std::process::Command;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/debugfs")
}

fn real(args: &str) -> (Vec<u8>, Vec<u8>) {
    let script = format!(
        "mount -t tmpfs tmpfs /sys/kernel/debug && mkdir -p /sys/kernel/debug/dlm && \
         cp {}/* /sys/kernel/debug/dlm/ && exec dlm_tool {args}",
        fixtures().display()
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .expect("unshare");
    (out.stdout, out.stderr)
}

#[test]
fn lockdump_and_lockdebug_print_what_c_prints() {
    let root = std::env::temp_dir().join(format!("dlm-debugfs-{}", std::process::id()));
    let dir = root.join("sys/kernel/debug/dlm");
    std::fs::create_dir_all(&dir).expect("dir");
    for e in std::fs::read_dir(fixtures()).expect("fixtures").flatten() {
        std::fs::copy(e.path(), dir.join(e.file_name())).expect("copy");
    }
    for args in [
        "lockdump foo",
        "lockdump -M foo",
        "lockdebug foo",
        "lockdebug -v foo",
        "lockdebug -w foo",
        "lockdebug -s foo",
        "lockdebug -v -w -s foo",
    ] {
        let (want_out, want_err) = real(args);
        let ours = Command::new(env!("CARGO_BIN_EXE_dlm_tool"))
            .args(["--kernel-root", &root.display().to_string()])
            .args(args.split(' '))
            .output()
            .expect("dlm_tool");
        assert!(
            !want_out.is_empty(),
            "{args}: the real tool printed nothing"
        );
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&want_out),
            "{args}: stdout"
        );
        assert_eq!(
            String::from_utf8_lossy(&ours.stderr),
            String::from_utf8_lossy(&want_err),
            "{args}: stderr"
        );
        assert!(ours.status.success(), "{args}");
    }
    // a lockspace the kernel does not have: C prints an error and exits 0; ours exits 1
    let out = Command::new(env!("CARGO_BIN_EXE_dlm_tool"))
        .args([
            "--kernel-root",
            &root.display().to_string(),
            "lockdump",
            "bar",
        ])
        .output()
        .expect("dlm_tool");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("can't open "));
    assert_eq!(out.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&root);
}
