//! The text `dlm_tool ls` prints, byte for byte (`show_ls`, `show_all_nodes` in
//! dlm_tool/main.c), from decoded replies; pure so it is tested without a daemon.

use std::fmt::Write;

use dlm_proto::query::{DlmcChange, DlmcLockspace, DlmcNode, NodeFlags};

/// One lockspace's member lists as fetched: `None` when the query failed.
pub(crate) struct Lists<'a> {
    /// DLMC_NODES_MEMBERS.
    pub members: Option<&'a [DlmcNode]>,
    /// DLMC_NODES_NEXT (only asked when `cg_next.seq != 0`).
    pub next: Option<&'a [DlmcNode]>,
    /// DLMC_NODES_ALL with `-n`: `Some(Err(..))` when it failed.
    pub all: Option<Result<&'a [DlmcNode], i32>>,
}

fn ids(out: &mut String, nodes: &[DlmcNode]) {
    // show_nodeids
    for n in nodes {
        let _ = write!(out, "{} ", n.nodeid);
    }
    out.push('\n');
}

fn change(out: &mut String, label: &str, c: &DlmcChange) {
    let _ = writeln!(
        out,
        "{label}member {} joined {} remove {} failed {} seq {},{}",
        c.member_count,
        c.joined_count,
        c.remove_count,
        c.failed_count,
        // printed with %d in C
        i32::from_ne_bytes(c.combined_seq.to_ne_bytes()),
        i32::from_ne_bytes(c.seq.to_ne_bytes())
    );
}

// check_str
fn check(n: &DlmcNode) -> String {
    if n.flags.0 & NodeFlags::NEED_FENCING != 0 {
        format!("fence {}", n.fail_monotime)
    } else if n.flags.0 & NodeFlags::CHECK_FS != 0 {
        "fs".to_owned()
    } else {
        "none".to_owned()
    }
}

// member_int
fn member(n: &DlmcNode) -> i32 {
    if n.flags.0 & NodeFlags::DISALLOWED != 0 {
        -1
    } else if n.flags.0 & NodeFlags::MEMBER != 0 {
        1
    } else {
        0
    }
}

/// `show_ls` and, with `-n`, `show_all_nodes`, then the blank line `do_list` prints.
pub(crate) fn lockspace(out: &mut String, ls: &DlmcLockspace, lists: &Lists<'_>) {
    let _ = writeln!(out, "name          {}", ls.name.to_str_lossy());
    let _ = writeln!(out, "id            0x{:08x}", ls.global_id);
    let flags: Vec<&str> = ls.flags.names().collect();
    let _ = writeln!(
        out,
        "flags         0x{:08x} {}",
        ls.flags.0,
        flags.join(",")
    );
    change(out, "change        ", &ls.cg_prev);
    match lists.members {
        Some(m) => {
            out.push_str("members       ");
            ids(out, m);
        }
        None => out.push_str("members       error\n"),
    }
    if ls.cg_next.seq != 0 {
        change(out, "new change    ", &ls.cg_next);
        if ls.cg_next.wait_messages {
            let _ = writeln!(
                out,
                "new status    wait messages {}",
                ls.cg_next.wait_condition.to_raw()
            );
        } else {
            let _ = writeln!(
                out,
                "new status    wait {}",
                ls.cg_next.wait_condition.name()
            );
        }
        match lists.next {
            Some(m) => {
                out.push_str("new members   ");
                ids(out, m);
            }
            None => out.push_str("new members   error\n"),
        }
    }
    match &lists.all {
        None => {}
        Some(Err(rv)) => {
            let _ = writeln!(out, "all nodes error {rv} 0");
        }
        Some(Ok(all)) => {
            out.push_str("all nodes\n");
            for n in *all {
                let _ = writeln!(
                    out,
                    "nodeid {} member {} failed {} start {} seq_add {} seq_rem {} check {}",
                    n.nodeid,
                    member(n),
                    n.fail_reason.to_raw(),
                    i32::from(n.flags.0 & NodeFlags::START != 0),
                    n.added_seq,
                    n.removed_seq,
                    check(n)
                );
            }
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlm_proto::LockspaceName;
    use dlm_proto::query::{FailReason, LockspaceFlags, WaitCondition};

    fn node(id: i32, flags: u32) -> DlmcNode {
        DlmcNode {
            nodeid: id,
            flags: NodeFlags(flags),
            added_seq: 1,
            removed_seq: 0,
            fail_reason: FailReason::from_raw(0),
            fail_walltime: 0,
            fail_monotime: 0,
        }
    }

    fn ls(next_seq: u32, wait: WaitCondition, msgs: bool) -> DlmcLockspace {
        DlmcLockspace {
            cg_prev: DlmcChange {
                member_count: 2,
                joined_count: 1,
                seq: 2,
                combined_seq: 2,
                ..DlmcChange::default()
            },
            cg_next: DlmcChange {
                member_count: 3,
                joined_count: 1,
                seq: next_seq,
                combined_seq: next_seq,
                wait_condition: wait,
                wait_messages: msgs,
                ..DlmcChange::default()
            },
            flags: LockspaceFlags(LockspaceFlags::JOINING | LockspaceFlags::NEED_PLOCKS),
            global_id: 0x6ce2_339d,
            name: LockspaceName::new(b"foo").expect("name"),
        }
    }

    #[test]
    fn pending_change_waiting_for_messages() {
        let m = [node(1, 3), node(2, 3)];
        let n = [node(1, 3), node(2, 3), node(3, 1)];
        let mut out = String::new();
        lockspace(
            &mut out,
            &ls(3, WaitCondition::Other(1), true),
            &Lists {
                members: Some(&m),
                next: Some(&n),
                all: None,
            },
        );
        assert_eq!(
            out,
            "name          foo\n\
             id            0x6ce2339d\n\
             flags         0x00000011 need_plock,join\n\
             change        member 2 joined 1 remove 0 failed 0 seq 2,2\n\
             members       1 2 \n\
             new change    member 3 joined 1 remove 0 failed 0 seq 3,3\n\
             new status    wait messages 1\n\
             new members   1 2 3 \n\n"
        );
    }

    #[test]
    fn conditions_errors_and_all_nodes() {
        let mut out = String::new();
        let mut fenced = node(4, NodeFlags::NEED_FENCING);
        fenced.fail_monotime = 1234;
        fenced.fail_reason = FailReason::from_raw(3);
        let all = [node(1, 7), fenced, node(5, NodeFlags::CHECK_FS)];
        lockspace(
            &mut out,
            &ls(4, WaitCondition::Fencing, false),
            &Lists {
                members: None,
                next: None,
                all: Some(Ok(&all)),
            },
        );
        assert!(out.contains("members       error\n"), "{out}");
        assert!(out.contains("new status    wait fencing\n"), "{out}");
        assert!(out.contains("new members   error\n"), "{out}");
        assert!(out.ends_with(
            "all nodes\n\
             nodeid 1 member -1 failed 0 start 1 seq_add 1 seq_rem 0 check none\n\
             nodeid 4 member 0 failed 3 start 0 seq_add 1 seq_rem 0 check fence 1234\n\
             nodeid 5 member 0 failed 0 start 0 seq_add 1 seq_rem 0 check fs\n\n"
        ));
        let mut out = String::new();
        lockspace(
            &mut out,
            &ls(0, WaitCondition::None, false),
            &Lists {
                members: Some(&[]),
                next: None,
                all: Some(Err(-2)),
            },
        );
        assert!(!out.contains("new "), "{out}");
        assert!(
            out.ends_with("members       \nall nodes error -2 0\n\n"),
            "{out}"
        );
    }
}
