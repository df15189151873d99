//! `plocks --waits <name>`: who blocks whom in a lockspace, from the daemon's dump with
//! ages (`dlm_plock::waits`): every waiter with its age, the granted locks that block it,
//! the chain of owners that wait on owners that wait, and cycles (a deadlock across nodes)
//! marked; a summary line first. With `--json`, the same as one object.

use std::collections::BTreeMap;

use dlm_plock::waits::Owner;
use dlm_plock::{DumpEntry, Waits};
use serde_json::{Value, json};

use crate::json::parse_plock;

/// The output for the dump `text` of lockspace `name`.
pub(crate) fn show(name: &str, text: &str, as_json: bool) -> String {
    let entries: Vec<DumpEntry> = text
        .lines()
        .filter_map(parse_plock)
        .map(|p| p.entry())
        .collect();
    let w = dlm_plock::waits::waits(&entries);
    let pids = pids(&entries);
    if as_json {
        to_json(name, &w, &pids)
    } else {
        to_text(name, &w, &pids)
    }
}

/// A pid for each owner: of its waiter if it waits, else of its first lock.
fn pids(entries: &[DumpEntry]) -> BTreeMap<Owner, u32> {
    let mut out = BTreeMap::new();
    for e in entries.iter().filter(|e| e.waiting) {
        out.entry((e.nodeid, e.owner)).or_insert(e.pid);
    }
    for e in entries {
        out.entry((e.nodeid, e.owner)).or_insert(e.pid);
    }
    out
}

fn secs(ms: u64) -> String {
    format!("{}.{} s", ms / 1000, ms % 1000 / 100)
}

fn lock_words(e: &DumpEntry) -> String {
    format!(
        "{} {} {}-{} nodeid {} pid {} owner {:x}",
        e.number,
        if e.ex { "WR" } else { "RD" },
        e.start,
        e.end,
        e.nodeid,
        e.pid,
        e.owner
    )
}

fn owner_words(o: Owner, pids: &BTreeMap<Owner, u32>) -> String {
    let pid = pids.get(&o).copied().unwrap_or(0);
    format!("nodeid {} pid {pid} owner {:x}", o.0, o.1)
}

fn to_text(name: &str, w: &Waits, pids: &BTreeMap<Owner, u32>) -> String {
    let mut out = format!(
        "lockspace {name}: {} waiters, oldest {}, longest chain {}, {} owners in a cycle\n",
        w.waits.len(),
        secs(w.oldest_ms),
        w.longest_chain,
        w.in_cycle.len()
    );
    for x in &w.waits {
        out.push_str(&format!(
            "{} waiting {}{}\n",
            lock_words(&x.waiter),
            secs(x.waiter.age_ms),
            if x.cycle { " DEADLOCK (cycle)" } else { "" }
        ));
        for b in &x.blockers {
            out.push_str(&format!(
                "  blocked by {} held {}\n",
                lock_words(b),
                secs(b.age_ms)
            ));
        }
        if x.blocker_count > x.blockers.len() {
            out.push_str(&format!(
                "  and {} more\n",
                x.blocker_count - x.blockers.len()
            ));
        }
        if x.chain.len() > 2 {
            let chain: Vec<String> = x.chain.iter().map(|o| owner_words(*o, pids)).collect();
            let cut = if x.chain_cut { " -> ..." } else { "" };
            out.push_str(&format!("  chain {}{cut}\n", chain.join(" -> ")));
        }
    }
    out
}

fn entry_json(e: &DumpEntry) -> Value {
    json!({
        "number": e.number,
        "mode": if e.ex { "WR" } else { "RD" },
        "start": e.start,
        "end": e.end,
        "nodeid": e.nodeid,
        "pid": e.pid,
        "owner": e.owner,
        "age_ms": e.age_ms,
    })
}

fn to_json(name: &str, w: &Waits, pids: &BTreeMap<Owner, u32>) -> String {
    let waits: Vec<Value> = w
        .waits
        .iter()
        .map(|x| {
            let chain: Vec<Value> = x
                .chain
                .iter()
                .map(|o| json!({"nodeid": o.0, "owner": o.1, "pid": pids.get(o).copied().unwrap_or(0)}))
                .collect();
            json!({
                "waiter": entry_json(&x.waiter),
                "blocked_by": x.blockers.iter().map(entry_json).collect::<Vec<_>>(),
                "blocker_count": x.blocker_count,
                "chain": chain,
                "chain_cut": x.chain_cut,
                "cycle": x.cycle,
            })
        })
        .collect();
    let v = json!({
        "lockspace": name,
        "summary": {
            "waiters": w.waits.len(),
            "oldest_wait_ms": w.oldest_ms,
            "longest_chain": w.longest_chain,
            "owners_in_cycle": w.in_cycle.len(),
        },
        "waits": waits,
    });
    let mut s = v.to_string();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two processes on two nodes locking crosswise, as the daemon dumps them.
    const CROSSWISE: &str = "\
7 WR 0-0 nodeid 1 pid 100 owner a rown 0 age_ms 3000
7 WR 0-0 nodeid 2 pid 200 owner b rown 0 WAITING age_ms 1500
8 WR 0-0 nodeid 2 pid 200 owner b rown 0 age_ms 2000
8 WR 0-0 nodeid 1 pid 100 owner a rown 0 WAITING age_ms 2500
";

    #[test]
    fn a_crosswise_pair_shows_the_cycle_with_both_pids() {
        let t = show("gfs", CROSSWISE, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "lockspace gfs: 2 waiters, oldest 2.5 s, longest chain 3, 2 owners in a cycle"
        );
        assert_eq!(
            lines[1],
            "7 WR 0-0 nodeid 2 pid 200 owner b waiting 1.5 s DEADLOCK (cycle)"
        );
        assert_eq!(
            lines[2],
            "  blocked by 7 WR 0-0 nodeid 1 pid 100 owner a held 3.0 s"
        );
        assert_eq!(
            lines[3],
            "  chain nodeid 2 pid 200 owner b -> nodeid 1 pid 100 owner a -> nodeid 2 pid 200 owner b"
        );
        let v: Value = serde_json::from_str(&show("gfs", CROSSWISE, true)).expect("json");
        assert_eq!(v["summary"]["owners_in_cycle"], 2);
        assert_eq!(v["waits"][1]["blocked_by"][0]["pid"], 200);
        assert_eq!(v["waits"][1]["cycle"], true);
    }

    #[test]
    fn no_waiters_no_cycle() {
        let t = show(
            "gfs",
            "7 WR 0-0 nodeid 1 pid 100 owner a rown 0 age_ms 3000\n",
            false,
        );
        assert_eq!(
            t,
            "lockspace gfs: 0 waiters, oldest 0.0 s, longest chain 0, 0 owners in a cycle\n"
        );
    }
}
