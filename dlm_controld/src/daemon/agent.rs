//! Fence agents (fence.c `run_agent`, `fence_result`, `unfence_node`): the program found
//! on PATH, started without arguments, its stdin the `key=val` lines, stdout and stderr to
//! /dev/null. An agent's exit arrives on a channel; nothing waits for it.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::config::ConfFile;
use crate::fencing::agent_args;

/// An agent ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AgentExit {
    /// The node it fenced.
    pub(crate) nodeid: u32,
    /// Its process id (0 when it could not start).
    pub(crate) pid: u32,
    /// Exit status; -1 when a signal ended it.
    pub(crate) result: i32,
}

fn command(agent: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(agent);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Starts `agent` for `nodeid` with `stdin`; its exit is sent on `exits`. An agent that
/// cannot be executed ends as C's child does when `execlp` fails: status 1.
pub(crate) fn spawn(
    agent: &str,
    stdin: String,
    nodeid: u32,
    exits: mpsc::UnboundedSender<AgentExit>,
) -> u32 {
    let mut child = match command(agent).spawn() {
        Ok(c) => c,
        Err(e) => {
            crate::log_error!("fence request {nodeid} agent {agent}: {e}");
            let _ = exits.send(AgentExit {
                nodeid,
                pid: 0,
                result: 1,
            });
            return 0;
        }
    };
    let pid = child.id().unwrap_or(0);
    let input = child.stdin.take();
    tokio::spawn(async move {
        if let Some(mut i) = input {
            // an agent that exits without reading its stdin is not an error here
            let _ = i.write_all(stdin.as_bytes()).await;
        }
        let result = match child.wait().await {
            Ok(s) => s.code().unwrap_or(-1),
            Err(_) => -1,
        };
        if result == -1 {
            crate::log_error!("fence result {nodeid} pid {pid} result -1 term signal");
        }
        let _ = exits.send(AgentExit {
            nodeid,
            pid,
            result,
        });
    });
    pid
}

/// Kills an agent we no longer need (`fence_pid_cancel`); its task reaps it.
pub(crate) fn cancel(nodeid: u32, pid: u32) {
    crate::log_debug!("fence_pid_cancel nodeid {nodeid} pid {pid} sigkill");
    let Ok(raw) = i32::try_from(pid) else { return };
    if raw > 0 {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(raw),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// `unfence_node`: every device of ours marked `unfence` runs with `action=on`, one after
/// another, before we join the daemon group; any failure stops the daemon.
pub(crate) async fn unfence(conf: &ConfFile, our: u32) -> Result<(), String> {
    for m in conf.fence_methods(our).iter().filter(|m| m.unfence) {
        let stdin = agent_args(m, our, "action=on\n")
            .ok_or_else(|| format!("unfence {our} config args error -1"))?;
        let mut child = command(&m.agent)
            .spawn()
            .map_err(|e| format!("unfence {our} {} {} run error {e}", m.device, m.agent))?;
        let pid = child.id().unwrap_or(0);
        crate::log_error!("unfence {our} pid {pid} {} {}", m.device, m.agent);
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(stdin.as_bytes()).await;
        }
        let status = child
            .wait()
            .await
            .map_err(|e| format!("unfence {our} pid {pid} waitpid {e}"))?;
        if !status.success() {
            return Err(format!("unfence {our} pid {pid} error status {status}"));
        }
    }
    Ok(())
}
