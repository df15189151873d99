//! Commands run on the cluster's nodes for `dlm_tool run` (lvmlockd's `lvchange --refresh`):
//! main.c `start_run_operation`, `check_run_operation`, `copy_run_list`; daemon_cpg.c
//! `send_run_request`, `receive_run_request`, `receive_run_reply`; helper.c
//! `exec_command`, `_get_cmd_id`. Sans I/O: the shell runs the commands and multicasts.

use dlm_proto::query::{RunCheckFlags, RunStartFlags, RunStatus};
use dlm_proto::wire::{
    DlmHeader, MsgType, RUN_COMMAND_LEN, RunInfo, RunReply, RunRequest, Version3,
};

/// Most arguments a command may have (`MAX_AV_COUNT`).
const MAX_ARGS: usize = 32;
/// Longest argument (`ONE_ARG_LEN` less its NUL).
const MAX_ARG_LEN: usize = 255;

/// What the daemon must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Multicast these bytes on the daemon group.
    Send(Vec<u8>),
    /// Run this command here; report with [`Runs::local_result`].
    Exec {
        /// The run.
        uuid: String,
        /// Its command line.
        command: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeResult {
    nodeid: u32,
    result: i32,
    replied: bool,
}

/// One run (`struct run`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Lowercase uuid text.
    pub uuid: String,
    /// The command line.
    pub command: String,
    /// Bookkeeping as C keeps it.
    pub info: RunInfo,
    results: Vec<NodeResult>,
}

/// The runs this node knows (`run_ops`), newest first as C's list.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    our: u32,
    runs: Vec<Run>,
}

/// `exec_command`'s tokenizer: letters, digits and punctuation make words, whitespace
/// separates them, a backslash escapes a backslash or whitespace; anything else (or a
/// backslash before anything else) ends the command. At most 32 words of 255 bytes.
pub fn tokenize(cmd: &str) -> Vec<String> {
    let b = cmd.as_bytes();
    let mut words = Vec::new();
    let mut arg = Vec::new();
    let mut i = 0;
    while i < b.len() && words.len() < MAX_ARGS {
        let c = b[i];
        if c == b'\\' {
            if i + 1 == b.len() {
                break;
            }
            i += 1;
            let e = b[i];
            if e == b'\\' || e.is_ascii_whitespace() {
                if arg.len() < MAX_ARG_LEN {
                    arg.push(e);
                }
                i += 1;
                continue;
            }
            break;
        }
        if c.is_ascii_alphanumeric() || c.is_ascii_punctuation() {
            if arg.len() < MAX_ARG_LEN {
                arg.push(c);
            }
        } else if c.is_ascii_whitespace() {
            if !arg.is_empty() {
                words.push(String::from_utf8_lossy(&arg).into_owned());
                arg.clear();
            }
        } else {
            break;
        }
        i += 1;
    }
    if words.len() < MAX_ARGS && !arg.is_empty() {
        words.push(String::from_utf8_lossy(&arg).into_owned());
    }
    words
}

/// `_get_cmd_id`: 1 `lvm lvchange --refresh ...`, 2 `lvm lvs ...`, 0 anything else (not run).
pub fn cmd_id(av: &[String]) -> u8 {
    match av {
        [a, b, c, ..] if a == "lvm" && b == "lvchange" && c == "--refresh" => 1,
        [a, b, ..] if a == "lvm" && b == "lvs" => 2,
        _ => 0,
    }
}

impl Runs {
    /// No runs yet, on node `our`.
    pub fn new(our: u32) -> Self {
        Self {
            our,
            runs: Vec::new(),
        }
    }

    fn our_i32(&self) -> i32 {
        i32::try_from(self.our).unwrap_or(0)
    }

    fn find(&mut self, uuid: &str) -> Option<&mut Run> {
        self.runs.iter_mut().find(|r| r.uuid == uuid)
    }

    fn header(&self, version: Version3, t: MsgType) -> DlmHeader {
        DlmHeader::new(version, t, self.our)
    }

    /// `start_run_operation` + `send_run_request`: `members` are the daemon members now,
    /// `uuid` a fresh one. Returns C's rv (0, or -1 when the command is too long).
    pub fn start(
        &mut self,
        version: Version3,
        members: &[u32],
        dest: i32,
        flags: u32,
        command: &[u8],
        uuid: String,
    ) -> (i32, Vec<Action>) {
        let mut out = Vec::new();
        if command.len() > RUN_COMMAND_LEN - 1 || command.contains(&0) {
            return (-1, out);
        }
        let results: Vec<NodeResult> = members
            .iter()
            .copied()
            .filter(|&n| !(n == self.our && flags & RunStartFlags::NODE_NONE != 0))
            .filter(|&n| dest == 0 || i32::try_from(n).ok() == Some(dest))
            .map(|nodeid| NodeResult {
                nodeid,
                result: 0,
                replied: false,
            })
            .collect();
        let info = RunInfo {
            dest_nodeid: dest,
            start_nodeid: self.our_i32(),
            need_replies: i32::try_from(results.len()).unwrap_or(i32::MAX),
            flags,
            ..RunInfo::default()
        };
        let text = String::from_utf8_lossy(command).into_owned();
        let prefix: String = text.chars().take(128).collect();
        tracing::error!("run start {uuid} {prefix}");
        tracing::debug!("send_run_request {uuid} for {} nodes", results.len());
        let req = RunRequest {
            info,
            uuid: uuid.as_bytes(),
            command,
        };
        match req.encode(&self.header(version, MsgType::RUN_REQUEST)) {
            Ok(bytes) => out.push(Action::Send(bytes)),
            Err(e) => {
                tracing::error!("run start {uuid}: {e}");
                return (-1, Vec::new());
            }
        }
        if flags & RunStartFlags::NODE_FIRST != 0 {
            out.push(Action::Exec {
                uuid: uuid.clone(),
                command: text.clone(),
            });
        }
        self.runs.insert(
            0,
            Run {
                uuid,
                command: text,
                info,
                results,
            },
        );
        (0, out)
    }

    /// `receive_run_request` from `from`.
    pub fn receive_request(&mut self, from: u32, req: &RunRequest<'_>) -> Vec<Action> {
        let uuid = String::from_utf8_lossy(req.uuid).into_owned();
        tracing::debug!("receive_run_request {uuid} from {from}");
        let mut out = Vec::new();
        let info = req.info;
        if info.dest_nodeid != 0 && info.dest_nodeid != self.our_i32() {
            return out;
        }
        let command = String::from_utf8_lossy(req.command).into_owned();
        if info.start_nodeid == self.our_i32() {
            if info.flags & RunStartFlags::NODE_RECV == 0 {
                tracing::debug!("receive_run_request ignore self");
                return out;
            }
            if self.find(&uuid).is_none() {
                tracing::debug!("receive_run_request from self no uuid {uuid}");
                return out;
            }
            out.push(Action::Exec { uuid, command });
            return out;
        }
        let prefix: String = command.chars().take(128).collect();
        tracing::error!("run request {uuid} {prefix}");
        self.runs.insert(
            0,
            Run {
                uuid: uuid.clone(),
                command: command.clone(),
                info: RunInfo {
                    start_nodeid: info.start_nodeid,
                    dest_nodeid: info.dest_nodeid,
                    flags: info.flags,
                    ..RunInfo::default()
                },
                results: Vec::new(),
            },
        );
        out.push(Action::Exec { uuid, command });
        out
    }

    /// The command of run `uuid` ended here with `result` (`process_helper` +
    /// `send_run_reply`): the reply goes out; a node that did not start the run forgets it.
    pub fn local_result(
        &mut self,
        version: Version3,
        uuid: &str,
        pid: i32,
        result: i32,
    ) -> Vec<Action> {
        let our = self.our_i32();
        let header = self.header(version, MsgType::RUN_REPLY);
        let Some(pos) = self.runs.iter().position(|r| r.uuid == uuid) else {
            tracing::error!("helper reply no run uuid {uuid}");
            return Vec::new();
        };
        let run = &self.runs[pos];
        let rep = RunReply {
            info: RunInfo {
                local_pid: pid,
                local_result: result,
                ..run.info
            },
            uuid: run.uuid.as_bytes(),
        };
        tracing::debug!("send_run_reply {uuid} result {result}");
        let mut out = Vec::new();
        match rep.encode(&header) {
            Ok(b) => out.push(Action::Send(b)),
            Err(e) => tracing::error!("send_run_reply {uuid}: {e}"),
        }
        if run.info.start_nodeid != our {
            tracing::debug!("clear run {uuid}");
            self.runs.remove(pos);
        }
        out
    }

    /// `receive_run_reply` from `from`: only the starting node counts results.
    pub fn receive_reply(&mut self, from: u32, rep: &RunReply<'_>) -> Vec<Action> {
        let uuid = String::from_utf8_lossy(rep.uuid).into_owned();
        tracing::debug!(
            "receive_run_reply {uuid} from {from} result {}",
            rep.info.local_result
        );
        let out = Vec::new();
        let our = self.our_i32();
        let Some(run) = self.find(&uuid) else {
            return out;
        };
        if run.info.start_nodeid != our {
            return out;
        }
        if let Some(r) = run.results.iter_mut().find(|r| r.nodeid == from) {
            if !r.replied {
                r.result = rep.info.local_result;
                r.replied = true;
                if r.result != 0 {
                    run.info.fail_count += 1;
                }
                run.info.reply_count += 1;
                run.info.need_replies -= 1;
            }
        }
        out
    }

    /// `check_run_operation`: the status bits, or `None` for an unknown uuid. CANCEL and
    /// CLEAR (when done) forget the run.
    pub fn check(&mut self, uuid: &str, flags: u32) -> Option<u32> {
        let Some(pos) = self.runs.iter().position(|r| r.uuid == uuid) else {
            tracing::debug!("check_run no uuid {uuid}");
            return None;
        };
        if flags & RunCheckFlags::CANCEL != 0 {
            tracing::debug!("cancel_run {uuid}");
            self.runs.remove(pos);
            return Some(0);
        }
        let run = &self.runs[pos];
        let i = run.info;
        tracing::debug!(
            "check_run {uuid} reply_count {} need_replies {} fail_count {}",
            i.reply_count,
            i.need_replies,
            i.fail_count
        );
        let mut status = if i.need_replies != 0 {
            RunStatus::WAITING
        } else {
            RunStatus::DONE
        };
        if i.fail_count != 0 {
            status |= RunStatus::FAILED;
        }
        if i.need_replies == 0 {
            if i.fail_count != 0 {
                let ids: String = run
                    .results
                    .iter()
                    .filter(|r| r.result != 0)
                    .map(|r| format!("{} ", r.nodeid))
                    .collect();
                tracing::error!(
                    "run ended {uuid} error from {} remote nodes with ids: {ids}",
                    i.fail_count
                );
            } else {
                tracing::error!(
                    "run ended {uuid} success from {} remote nodes",
                    i.reply_count
                );
            }
            if flags & RunCheckFlags::CLEAR != 0 {
                self.runs.remove(pos);
            }
        }
        Some(status)
    }

    /// `copy_run_list`: the text of `dlm_tool run_list`.
    pub fn list_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        for r in &self.runs {
            let i = r.info;
            let _ = writeln!(
                s,
                "run_uuid {} start_nodeid {} local_pid {} local_result {} need_replies {} \
                 reply_count {} fail_count {} flags {:x}",
                r.uuid,
                i.start_nodeid,
                i.local_pid,
                i.local_result,
                i.need_replies,
                i.reply_count,
                i.fail_count,
                i.flags
            );
            let cmd: String = r.command.chars().take(1000).collect();
            let _ = writeln!(s, "run_command {cmd}");
        }
        s
    }

    /// Runs known.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_as_c() {
        assert_eq!(tokenize("lvm lvs "), vec!["lvm", "lvs"]);
        assert_eq!(
            tokenize("lvm  lvchange --refresh vg/lv\\ 1"),
            vec!["lvm", "lvchange", "--refresh", "vg/lv 1"]
        );
        // a control character ends the command; a backslash before a letter too
        assert_eq!(tokenize("lvm lvs\x01 rm -rf /"), vec!["lvm", "lvs"]);
        assert_eq!(tokenize("lvm \\x lvs"), vec!["lvm"]);
        assert_eq!(tokenize("a\\\\b"), vec!["a\\b"]);
        let many = "x ".repeat(40);
        assert_eq!(tokenize(&many).len(), 32);
    }

    #[test]
    fn only_two_commands_run() {
        let id = |s: &str| cmd_id(&tokenize(s));
        assert_eq!(id("lvm lvchange --refresh vg/lv"), 1);
        assert_eq!(id("lvm lvs -o name"), 2);
        assert_eq!(id("lvm lvchange -an vg/lv"), 0);
        assert_eq!(id("sh -c reboot"), 0);
        assert_eq!(id("lvm"), 0);
    }

    fn v() -> Version3 {
        dlm_proto::wire::DAEMON_PROTOCOL
    }

    #[test]
    fn a_run_across_three_nodes() {
        let mut n1 = Runs::new(1);
        let mut n2 = Runs::new(2);
        let uuid = "f37ccdc6-6f28-46ca-b2a2-47237aae7c61".to_owned();
        let (rv, out) = n1.start(
            v(),
            &[1, 2, 3],
            0,
            RunStartFlags::NODE_NONE,
            b"lvm lvs ",
            uuid.clone(),
        );
        assert_eq!(rv, 0);
        let Some(Action::Send(bytes)) = out.iter().find(|o| matches!(o, Action::Send(_))) else {
            panic!("{out:?}")
        };
        // the observed RUN_REQUEST of `dlm_tool run -n lvm lvs`: run_info 0,1,0,0,... flags 1
        assert_eq!(bytes.len(), 1160);
        let msg = dlm_proto::wire::Message::decode(bytes).expect("decodes");
        let dlm_proto::wire::Body::RunRequest(req) = msg.body else {
            panic!()
        };
        assert_eq!(req.info.start_nodeid, 1);
        assert_eq!(req.info.need_replies, 2, "nodes 2 and 3, not the starter");
        assert_eq!(req.command, b"lvm lvs ");
        assert!(!out.iter().any(|o| matches!(o, Action::Exec { .. })));
        // the starter ignores its own request (no NODE_RECV); node 2 runs it
        assert!(
            !n1.receive_request(1, &req)
                .iter()
                .any(|o| matches!(o, Action::Exec { .. }))
        );
        let o2 = n2.receive_request(1, &req);
        assert!(o2.contains(&Action::Exec {
            uuid: uuid.clone(),
            command: "lvm lvs ".into()
        }));
        let o2 = n2.local_result(v(), &uuid, 4242, 5);
        assert!(n2.runs().is_empty(), "a non-starter forgets the run");
        let Some(Action::Send(rep)) = o2.iter().find(|o| matches!(o, Action::Send(_))) else {
            panic!()
        };
        assert_eq!(rep.len(), 136);
        let msg = dlm_proto::wire::Message::decode(rep).expect("decodes");
        let dlm_proto::wire::Body::RunReply(rep) = msg.body else {
            panic!()
        };
        assert_eq!((rep.info.local_pid, rep.info.local_result), (4242, 5));
        let _ = n1.receive_reply(2, &rep);
        let st = n1.check(&uuid, 0);
        assert_eq!(st, Some(RunStatus::WAITING | RunStatus::FAILED));
        let ok = RunReply {
            info: RunInfo {
                local_result: 0,
                ..rep.info
            },
            uuid: uuid.as_bytes(),
        };
        let _ = n1.receive_reply(3, &ok);
        // a duplicate reply counts once
        let _ = n1.receive_reply(3, &ok);
        assert!(n1.list_text().contains(&format!(
            "run_uuid {uuid} start_nodeid 1 local_pid 0 local_result 0 need_replies 0 reply_count 2 fail_count 1 flags 1\nrun_command lvm lvs \n"
        )));
        let mut st = None;
        let log = crate::log::messages(|| st = n1.check(&uuid, RunCheckFlags::CLEAR));
        assert_eq!(st, Some(RunStatus::DONE | RunStatus::FAILED));
        assert!(log.contains(&(
            crate::log::Level::Error,
            format!("run ended {uuid} error from 1 remote nodes with ids: 2 ")
        )));
        assert!(n1.runs().is_empty(), "CLEAR forgets a finished run");
        assert_eq!(n1.check(&uuid, 0), None);
    }

    #[test]
    fn first_and_dest_flags() {
        let mut n1 = Runs::new(1);
        let (_, out) = n1.start(
            v(),
            &[1, 2, 3],
            3,
            RunStartFlags::NODE_FIRST,
            b"lvm lvs",
            "u".into(),
        );
        assert!(out.iter().any(|o| matches!(o, Action::Exec { .. })));
        assert_eq!(n1.runs()[0].info.need_replies, 1, "only node 3 answers");
        let (rv, _) = n1.start(v(), &[1], 0, 0, &[b'x'; 1024], "w".into());
        assert_eq!(rv, -1);
    }
}
