//! `dlm_tool status [-v]`: the DUMP_STATUS records printed as libdlmcontrol's
//! `dlmc_print_status` prints them, quirks included (values are found again in the
//! `key=value ` text by substring search and cut to 32 bits; `startup node 0`), pure.

use std::fmt::Write;

use dlm_proto::query::{StateRecord, StateType};

/// `kv`: the number after the first `key` … `=` in `text`, as `strtoul(.., 0)` reads it,
/// cut to an unsigned int; 0 when absent.
fn kv(text: &str, key: &str) -> u32 {
    let v = ks(text, key).unwrap_or("");
    let (digits, radix) = if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        (h, 16)
    } else if v.len() > 1 && v.starts_with('0') {
        (&v[1..], 8)
    } else {
        (v, 10)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    let n = u64::from_str_radix(&digits[..end], radix).unwrap_or(0);
    u32::try_from(n & 0xffff_ffff).unwrap_or(0)
}

/// `ks`: the text after the first `key` … `=` up to a space or newline.
fn ks<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(key)?;
    let rest = &text[at..];
    let eq = rest.find('=')?;
    let v = &rest[eq + 1..];
    let end = v.find([' ', '\n']).unwrap_or(v.len()).min(63);
    Some(v.get(..end).unwrap_or(v))
}

/// `print_str`: each space-separated piece on its own line, indented four spaces.
fn pieces(out: &mut String, text: &str) {
    for p in text.split(' ') {
        let _ = writeln!(out, "    {p}");
    }
}

/// The whole printout for `records` (in the order received); `now` is the client's
/// `time(NULL)`, printed in fence lines.
pub(crate) fn format(records: &[StateRecord], verbose: bool, now: u64) -> String {
    let mut out = String::new();
    let mut startup = Vec::new();
    // (nodeid, node line, fence line)
    let mut nodes: Vec<(i32, String, Option<String>)> = Vec::new();
    for r in records {
        let text = String::from_utf8_lossy(&r.text);
        match r.kind {
            StateType::Daemon if verbose => {
                let _ = writeln!(out, "our_nodeid {}", r.nodeid);
                pieces(&mut out, &text);
            }
            StateType::Daemon => {
                // print_daemon
                let _ = writeln!(
                    out,
                    "cluster nodeid {} quorate {} ring seq {} {}",
                    r.nodeid,
                    kv(&text, "quorate"),
                    kv(&text, "cluster_ringid"),
                    kv(&text, "daemon_ringid")
                );
                let _ = writeln!(
                    out,
                    "daemon now {} fence_pid {} {}",
                    kv(&text, "monotime"),
                    kv(&text, "fence_pid"),
                    if kv(&text, "fence_in_progress_unknown") != 0 {
                        "fence_init"
                    } else {
                        ""
                    }
                );
            }
            StateType::StartupNode => startup.push(r.nodeid),
            StateType::DaemonNode if verbose => {
                let _ = writeln!(out, "nodeid {}", r.nodeid);
                pieces(&mut out, &text);
            }
            StateType::DaemonNode => {
                nodes.push((r.nodeid, node_line(r, &text), fence_line(r, &text, now)))
            }
            StateType::Run => {}
        }
    }
    for id in &startup {
        match nodes.iter().find(|(n, _, _)| n == id) {
            Some((_, line, _)) => {
                let _ = write!(out, "startup {line}");
            }
            // C prints the id of the zeroed record it read last: 0
            None => out.push_str("startup node 0\n"),
        }
    }
    nodes.sort_by_key(|(id, _, _)| *id);
    for (_, _, fence) in &nodes {
        if let Some(f) = fence {
            out.push_str(f);
        }
    }
    for (_, line, _) in &nodes {
        out.push_str(line);
    }
    out
}

// format_daemon_node, node line
fn node_line(r: &StateRecord, text: &str) -> String {
    let letter = if r.kind == StateType::StartupNode {
        'U'
    } else if kv(text, "member") != 0 {
        'M'
    } else {
        'X'
    };
    format!(
        "node {} {letter} add {} rem {} fail {} fence {} at {} {}\n",
        r.nodeid,
        kv(text, "add_time"),
        kv(text, "rem_time"),
        kv(text, "fail_monotime"),
        kv(text, "fence_monotime"),
        kv(text, "actor_done"),
        kv(text, "fence_walltime")
    )
}

// format_daemon_node, fence line
fn fence_line(r: &StateRecord, text: &str, now: u64) -> Option<String> {
    if kv(text, "need_fencing") == 0 {
        return None;
    }
    let tail = format!(
        "actor {} fail {} fence {} now {}{}{}\n",
        kv(text, "actor_last"),
        kv(text, "fail_walltime"),
        kv(text, "fence_walltime"),
        now & 0xffff_ffff,
        if kv(text, "fence_result_wait") != 0 {
            " result_wait"
        } else {
            ""
        },
        if kv(text, "killed") != 0 {
            " killed"
        } else {
            ""
        }
    );
    let reason = ks(text, "left_reason").unwrap_or("");
    Some(if kv(text, "delay_fencing") != 0 {
        format!("fence {} {reason} delay {tail}", r.nodeid)
    } else {
        format!(
            "fence {} {reason} pid {} {tail}",
            r.nodeid,
            kv(text, "fence_pid")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: StateType, nodeid: i32, text: &str) -> StateRecord {
        StateRecord {
            kind,
            nodeid,
            text: text.as_bytes().to_vec(),
        }
    }

    const DAEMON: &str = "member_count=2 joined_count=1 remove_count=0 daemon_ringid=5 \
        cluster_ringid=5 quorate=1 fence_pid=0 fence_in_progress_unknown=0 zombie_count=0 \
        monotime=453 stateful_merge_wait=0 ";

    fn node(member: u8, need: u8, delay: u8) -> String {
        format!(
            "member={member} killed=0 left_reason=nodedown need_fencing={need} \
             delay_fencing={delay} fence_pid=77 fence_pid_wait=0 fence_result_wait=1 \
             fence_actor_last=1 fence_actor_done=1 add_time=447 rem_time=0 \
             fail_walltime=1795993880 fail_monotime=446 fence_walltime=0 fence_monotime=450 "
        )
    }

    #[test]
    fn plain_sorted_fence_lines_first_and_startup_quirk() {
        let recs = [
            rec(StateType::Daemon, 1, DAEMON),
            rec(StateType::DaemonNode, 2, &node(0, 1, 0)),
            rec(StateType::DaemonNode, 1, &node(1, 0, 0)),
            rec(StateType::DaemonNode, 3, &node(0, 1, 1)),
            rec(StateType::StartupNode, 9, ""),
            rec(StateType::StartupNode, 1, ""),
        ];
        assert_eq!(
            format(&recs, false, 1000),
            "cluster nodeid 1 quorate 1 ring seq 5 5\n\
             daemon now 453 fence_pid 0 \n\
             startup node 0\n\
             startup node 1 M add 447 rem 0 fail 446 fence 450 at 1 0\n\
             fence 2 nodedown pid 77 actor 1 fail 1795993880 fence 0 now 1000 result_wait\n\
             fence 3 nodedown delay actor 1 fail 1795993880 fence 0 now 1000 result_wait\n\
             node 1 M add 447 rem 0 fail 446 fence 450 at 1 0\n\
             node 2 X add 447 rem 0 fail 446 fence 450 at 1 0\n\
             node 3 X add 447 rem 0 fail 446 fence 450 at 1 0\n"
        );
    }

    #[test]
    fn verbose_one_key_per_line() {
        let recs = [
            rec(StateType::Daemon, 1, "quorate=1 monotime=9 "),
            rec(StateType::DaemonNode, 1, "member=1 "),
        ];
        assert_eq!(
            format(&recs, true, 0),
            "our_nodeid 1\n    quorate=1\n    monotime=9\n    \nnodeid 1\n    member=1\n    \n"
        );
    }

    #[test]
    fn values_as_strtoul_reads_them() {
        assert_eq!(kv("a=0x10 ", "a"), 16);
        assert_eq!(kv("a=010 ", "a"), 8);
        assert_eq!(kv("a=4294967297 ", "a"), 1, "cut to 32 bits");
        assert_eq!(kv("a=12abc ", "a"), 12);
        assert_eq!(kv("b=1 ", "a"), 0);
        // the first occurrence of the key wins: fence_pid before fence_pid_wait
        assert_eq!(kv("fence_pid_wait=3 fence_pid=4 ", "fence_pid"), 3);
    }
}
