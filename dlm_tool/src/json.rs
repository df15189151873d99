//! `--json`: the same facts as the text commands in a stable schema (docs/dlm_tool.md).
//! Field names never change meaning; new fields may be added.

use dlm_proto::query::{DlmcChange, DlmcLockspace, DlmcNode, NodeFlags, StateRecord, StateType};
use serde::Serialize;
use serde_json::{Map, Value};

/// A membership change (`dlmc_change`).
#[derive(Debug, Serialize)]
pub(crate) struct Change {
    member: i32,
    joined: i32,
    remove: i32,
    failed: i32,
    seq: u32,
    combined_seq: u32,
}

impl From<&DlmcChange> for Change {
    fn from(c: &DlmcChange) -> Self {
        Self {
            member: c.member_count,
            joined: c.joined_count,
            remove: c.remove_count,
            failed: c.failed_count,
            seq: c.seq,
            combined_seq: c.combined_seq,
        }
    }
}

/// The pending change and what it waits for.
#[derive(Debug, Serialize)]
pub(crate) struct Pending {
    change: Change,
    /// `ringid`, `quorum`, `fencing`, `fsdone`, `messages`, `unknown`.
    wait: &'static str,
    /// START messages still missing, when `wait` is `messages`.
    #[serde(skip_serializing_if = "Option::is_none")]
    missing_starts: Option<i32>,
    members: Option<Vec<i32>>,
}

/// One node of a lockspace (`-n`).
#[derive(Debug, Serialize)]
pub(crate) struct Node {
    nodeid: i32,
    /// 1 member, 0 not, -1 disallowed.
    member: i32,
    failed: i32,
    start: bool,
    seq_add: u32,
    seq_rem: u32,
    /// `none`, `fs`, or `fence`.
    check: &'static str,
    /// Monotonic seconds of the failure, when `check` is `fence`.
    #[serde(skip_serializing_if = "Option::is_none")]
    fail_monotime: Option<u64>,
}

impl From<&DlmcNode> for Node {
    fn from(n: &DlmcNode) -> Self {
        let f = n.flags.0;
        let fence = f & NodeFlags::NEED_FENCING != 0;
        Self {
            nodeid: n.nodeid,
            member: if f & NodeFlags::DISALLOWED != 0 {
                -1
            } else {
                i32::from(f & NodeFlags::MEMBER != 0)
            },
            failed: n.fail_reason.to_raw(),
            start: f & NodeFlags::START != 0,
            seq_add: n.added_seq,
            seq_rem: n.removed_seq,
            check: if fence {
                "fence"
            } else if f & NodeFlags::CHECK_FS != 0 {
                "fs"
            } else {
                "none"
            },
            fail_monotime: fence.then_some(n.fail_monotime),
        }
    }
}

/// One lockspace as `ls` shows it.
#[derive(Debug, Serialize)]
pub(crate) struct Lockspace {
    name: String,
    global_id: u32,
    flags: Vec<&'static str>,
    change: Change,
    /// `null` when the query failed.
    members: Option<Vec<i32>>,
    /// `null` when no change is pending.
    pending: Option<Pending>,
    /// Only with `-n`; `null` when the query failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<Option<Vec<Node>>>,
}

fn ids(nodes: &[DlmcNode]) -> Vec<i32> {
    nodes.iter().map(|n| n.nodeid).collect()
}

impl Lockspace {
    /// From the replies `ls` gathers.
    pub(crate) fn new(
        ls: &DlmcLockspace,
        members: Option<&[DlmcNode]>,
        next: Option<&[DlmcNode]>,
        all: Option<Option<&[DlmcNode]>>,
    ) -> Self {
        Self {
            name: ls.name.to_str_lossy().into_owned(),
            global_id: ls.global_id,
            flags: ls.flags.names().collect(),
            change: Change::from(&ls.cg_prev),
            members: members.map(ids),
            pending: (ls.cg_next.seq != 0).then(|| Pending {
                change: Change::from(&ls.cg_next),
                wait: ls.cg_next.wait_word(),
                missing_starts: ls
                    .cg_next
                    .wait_messages
                    .then(|| ls.cg_next.wait_condition.to_raw()),
                members: next.map(ids),
            }),
            nodes: all.map(|a| a.map(|v| v.iter().map(Node::from).collect())),
        }
    }
}

/// `{"lockspaces": [...]}`.
pub(crate) fn lockspaces(v: &[Lockspace]) -> String {
    #[derive(Serialize)]
    struct Out<'a> {
        lockspaces: &'a [Lockspace],
    }
    to_string(&Out { lockspaces: v })
}

/// Compact, one line (pipe through `jq .` to read it): a 10^6-lock table stays a quarter of
/// the pretty form's size.
fn to_string<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// A `key=value ` text as an object: numbers where the value is a decimal number.
fn fields(text: &[u8]) -> Map<String, Value> {
    let text = String::from_utf8_lossy(text);
    let mut m = Map::new();
    for word in text.split_whitespace() {
        if let Some((k, v)) = word.split_once('=') {
            let val = v
                .parse::<u64>()
                .map(Value::from)
                .or_else(|_| v.parse::<i64>().map(Value::from))
                .unwrap_or_else(|_| Value::from(v));
            m.insert(k.to_owned(), val);
        }
    }
    m
}

/// `status --json`: `{"our_nodeid", "daemon": {...}, "nodes": [{"nodeid", "startup", ...}]}`.
pub(crate) fn status(records: &[StateRecord]) -> String {
    let mut out = Map::new();
    let mut nodes = Vec::new();
    for r in records {
        match r.kind {
            StateType::Daemon => {
                out.insert("our_nodeid".into(), Value::from(r.nodeid));
                out.insert("daemon".into(), Value::Object(fields(&r.text)));
            }
            StateType::DaemonNode | StateType::StartupNode => {
                let mut m = Map::new();
                m.insert("nodeid".into(), Value::from(r.nodeid));
                m.insert(
                    "startup".into(),
                    Value::from(r.kind == StateType::StartupNode),
                );
                m.extend(fields(&r.text));
                nodes.push(Value::Object(m));
            }
            StateType::Run => {}
        }
    }
    out.insert("nodes".into(), Value::Array(nodes));
    to_string(&Value::Object(out))
}

/// `dump --json`, `log_plock --json`: `{"lines": [...]}` (a wrapped buffer's first line
/// may be partial).
pub(crate) fn lines(text: &str) -> String {
    let mut out = Map::new();
    out.insert(
        "lines".into(),
        Value::Array(text.lines().map(Value::from).collect()),
    );
    to_string(&Value::Object(out))
}

/// One plock dump line.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Plock {
    number: u64,
    /// `WR` or `RD`.
    mode: String,
    start: u64,
    end: u64,
    nodeid: i32,
    pid: u32,
    owner: u64,
    waiting: bool,
    /// Milliseconds since granted or queued (our daemon only).
    #[serde(skip_serializing_if = "Option::is_none")]
    age_ms: Option<u64>,
}

impl Plock {
    /// As the engine's dump entry (an age unknown is 0).
    pub(crate) fn entry(&self) -> dlm_plock::DumpEntry {
        dlm_plock::DumpEntry {
            number: self.number,
            ex: self.mode == "WR",
            start: self.start,
            end: self.end,
            nodeid: self.nodeid,
            pid: self.pid,
            owner: self.owner,
            waiting: self.waiting,
            age_ms: self.age_ms.unwrap_or(0),
        }
    }
}

/// Parses one line of C's dump: `<number> <WR|RD> <start>-<end> nodeid <n> pid <p> owner
/// <hex> rown <r>[ WAITING][ age_ms <ms>]`.
pub(crate) fn parse_plock(line: &str) -> Option<Plock> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let (start, end) = w.get(2)?.split_once('-')?;
    if w.get(3) != Some(&"nodeid")
        || w.get(5) != Some(&"pid")
        || w.get(7) != Some(&"owner")
        || w.get(9) != Some(&"rown")
    {
        return None;
    }
    w.get(10)?.parse::<i64>().ok()?;
    let rest = w.get(11..).unwrap_or(&[]);
    let waiting = rest.first() == Some(&"WAITING");
    let rest = if waiting { &rest[1..] } else { rest };
    let age_ms = match rest {
        ["age_ms", n] => Some(n.parse().ok()?),
        [] => None,
        _ => return None,
    };
    Some(Plock {
        number: w.first()?.parse().ok()?,
        mode: (*w.get(1)?).to_owned(),
        start: start.parse().ok()?,
        end: end.parse().ok()?,
        nodeid: w.get(4)?.parse().ok()?,
        pid: w.get(6)?.parse().ok()?,
        owner: u64::from_str_radix(w.get(8)?, 16).ok()?,
        waiting,
        age_ms,
    })
}

/// `plocks --json`: `{"lockspace", "plocks": [...], "unparsed": [lines]}`.
pub(crate) fn plocks(name: &str, text: &str) -> String {
    #[derive(Serialize)]
    struct Out<'a> {
        lockspace: &'a str,
        plocks: Vec<Plock>,
        unparsed: Vec<&'a str>,
    }
    let mut out = Out {
        lockspace: name,
        plocks: Vec::new(),
        unparsed: Vec::new(),
    };
    for l in text.lines().filter(|l| !l.is_empty()) {
        match parse_plock(l) {
            Some(p) => out.plocks.push(p),
            None => out.unparsed.push(l),
        }
    }
    to_string(&out)
}

/// `dump_config --json`: `{"options": [{"name", "value", "source"}]}`, source `default`,
/// `cli option`, `dlm.conf` or `set_config`.
pub(crate) fn config(text: &str) -> String {
    let mut opts = Vec::new();
    for l in text.lines().filter(|l| !l.is_empty()) {
        let (kv, source) = match l.split_once(" (") {
            Some((kv, s)) => (kv, s.trim_end_matches(')')),
            None => (l, "default"),
        };
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        let value = v
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::from(v));
        let mut m = Map::new();
        m.insert("name".into(), Value::from(k));
        m.insert("value".into(), value);
        m.insert("source".into(), Value::from(source));
        opts.push(Value::Object(m));
    }
    let mut out = Map::new();
    out.insert("options".into(), Value::Array(opts));
    to_string(&Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plock_lines() {
        assert_eq!(
            parse_plock("77 WR 0-9 nodeid 1 pid 4242 owner abc rown 0"),
            Some(Plock {
                number: 77,
                mode: "WR".into(),
                start: 0,
                end: 9,
                nodeid: 1,
                pid: 4242,
                owner: 0xabc,
                waiting: false,
                age_ms: None
            })
        );
        let w = parse_plock("5 RD 50-60 nodeid 2 pid 2 owner 22 rown 0 WAITING age_ms 1500")
            .expect("waiter");
        assert!(w.waiting);
        assert_eq!(w.age_ms, Some(1500));
        assert_eq!(parse_plock("garbage"), None);
        assert_eq!(
            parse_plock("5 RD 50-60 nodeid 2 pid 2 owner zz rown 0"),
            None
        );
        let j = plocks(
            "foo",
            "77 WR 0-9 nodeid 1 pid 4242 owner abc rown 0 age_ms 3\nbad\n",
        );
        let v: Value = serde_json::from_str(&j).expect("json");
        assert_eq!(v["lockspace"], "foo");
        assert_eq!(v["plocks"][0]["owner"], 0xabc);
        assert_eq!(v["plocks"][0]["age_ms"], 3);
        assert_eq!(v["unparsed"][0], "bad");
    }

    #[test]
    fn config_and_status() {
        let v: Value = serde_json::from_str(&config(
            "daemon_debug=0\nforeground=1 (cli option)\nprotocol=detect\nlog_debug=1 (set_config)\n",
        ))
        .expect("json");
        assert_eq!(v["options"][1]["name"], "foreground");
        assert_eq!(v["options"][1]["value"], 1);
        assert_eq!(v["options"][1]["source"], "cli option");
        assert_eq!(v["options"][2]["value"], "detect");
        assert_eq!(v["options"][0]["source"], "default");
        let recs = [
            StateRecord {
                kind: StateType::Daemon,
                nodeid: 1,
                text: b"quorate=1 stateful_merge_wait=0 ".to_vec(),
            },
            StateRecord {
                kind: StateType::DaemonNode,
                nodeid: 2,
                text: b"member=1 left_reason=unknown ".to_vec(),
            },
        ];
        let v: Value = serde_json::from_str(&status(&recs)).expect("json");
        assert_eq!(v["our_nodeid"], 1);
        assert_eq!(v["daemon"]["stateful_merge_wait"], 0);
        assert_eq!(v["nodes"][0]["nodeid"], 2);
        assert_eq!(v["nodes"][0]["left_reason"], "unknown");
        assert_eq!(v["nodes"][0]["startup"], false);
    }
}
