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

fn program(name: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(name);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Starts `cmd` (stdin piped, stdout and stderr to /dev/null), hands it `stdin`, and calls
/// `ended(pid, status)` from a task when it has exited and been reaped (`None`: it could
/// not be waited for). Returns its pid; nothing here waits.
fn start(
    mut cmd: tokio::process::Command,
    stdin: String,
    ended: impl FnOnce(u32, Option<std::process::ExitStatus>) + Send + 'static,
) -> std::io::Result<u32> {
    let mut child = cmd.spawn()?;
    let pid = child.id().unwrap_or(0);
    let input = child.stdin.take();
    tokio::spawn(async move {
        if let Some(mut i) = input {
            // a program that exits without reading its stdin is not an error here
            let _ = i.write_all(stdin.as_bytes()).await;
        }
        let status = child.wait().await.ok();
        ended(pid, status);
    });
    Ok(pid)
}

/// Starts `agent` for `nodeid` with `stdin`; its exit is sent on `exits`. An agent that
/// cannot be executed ends as C's child does when `execlp` fails: status 1.
pub(crate) fn spawn(
    agent: &str,
    stdin: String,
    nodeid: u32,
    exits: mpsc::UnboundedSender<AgentExit>,
) -> u32 {
    let tx = exits.clone();
    let ended = move |pid, status: Option<std::process::ExitStatus>| {
        let result = status.and_then(|s| s.code()).unwrap_or(-1);
        if result == -1 {
            tracing::error!("fence result {nodeid} pid {pid} result -1 term signal");
        }
        let _ = tx.send(AgentExit {
            nodeid,
            pid,
            result,
        });
    };
    match start(program(agent), stdin, ended) {
        Ok(pid) => pid,
        Err(e) => {
            tracing::error!("fence request {nodeid} agent {agent}: {e}");
            let _ = exits.send(AgentExit {
                nodeid,
                pid: 0,
                result: 1,
            });
            0
        }
    }
}

/// A `dlm_tool run` command ended here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunExit {
    /// The run.
    pub(crate) uuid: String,
    /// Its process id (0 when not started).
    pub(crate) pid: i32,
    /// Exit status, or the signal that ended it (`waitid`'s `si_status`).
    pub(crate) result: i32,
}

/// Runs one `dlm_tool run` command (helper.c `exec_command`): only `lvm lvchange
/// --refresh ...` and `lvm lvs ...`, tokenized as C does; anything else ends with status 1
/// without running. Its end is sent on `exits`.
pub(crate) fn run_command(uuid: String, command: &str, exits: mpsc::UnboundedSender<RunExit>) {
    use std::os::unix::process::ExitStatusExt;
    let av = crate::run::tokenize(command);
    let id = crate::run::cmd_id(&av);
    let refused = RunExit {
        uuid: uuid.clone(),
        pid: 0,
        result: 1,
    };
    if id == 0 {
        tracing::error!("run {uuid}: not an allowed command: {command}");
        let _ = exits.send(refused);
        return;
    }
    let mut cmd = program(&av[0]);
    cmd.args(&av[1..]);
    let tx = exits.clone();
    let u = uuid.clone();
    let ended = move |pid: u32, status: Option<std::process::ExitStatus>| {
        let pid = i32::try_from(pid).unwrap_or(0);
        // waitid's si_status: the exit status, or the signal that ended it
        let result = status
            .and_then(|s| s.code().or_else(|| s.signal()))
            .unwrap_or(1);
        if result != 0 {
            tracing::error!("run error {u} id {id} pid {pid} status {result}");
        }
        let _ = tx.send(RunExit {
            uuid: u,
            pid,
            result,
        });
    };
    match start(cmd, String::new(), ended) {
        Ok(pid) => tracing::debug!("helper run {uuid} pid {pid} cmd_id {id} {command}"),
        Err(e) => {
            tracing::error!("run {uuid}: {}: {e}", av[0]);
            let _ = exits.send(refused);
        }
    }
}

/// A random lowercase version-4 uuid (`uuid_generate` + `uuid_unparse_lower`), or the
/// kernel's reason for giving no random bytes.
pub(crate) fn new_uuid() -> Result<String, getrandom::Error> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)?;
    Ok(uuid::Builder::from_random_bytes(b)
        .into_uuid()
        .hyphenated()
        .to_string())
}

/// Kills an agent we no longer need (`fence_pid_cancel`); its task reaps it.
pub(crate) fn cancel(nodeid: u32, pid: u32) {
    tracing::debug!("fence_pid_cancel nodeid {nodeid} pid {pid} sigkill");
    let Ok(raw) = i32::try_from(pid) else { return };
    if raw > 0 {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(raw),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Why unfencing this node failed (C's `unfence_node` log lines), with the cause.
#[derive(Debug, thiserror::Error)]
pub enum UnfenceError {
    /// The device's arguments do not make an agent's stdin.
    #[error("unfence {node} config args error -1")]
    Args {
        /// This node.
        node: u32,
    },
    /// The agent could not be started.
    #[error("unfence {node} {device} {agent} run error {source}")]
    Spawn {
        /// This node.
        node: u32,
        /// The device.
        device: String,
        /// The agent.
        agent: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting for the agent failed.
    #[error("unfence {node} pid {pid} waitpid {source}")]
    Wait {
        /// This node.
        node: u32,
        /// The agent's pid.
        pid: u32,
        /// Why.
        source: std::io::Error,
    },
    /// The agent said no.
    #[error("unfence {node} pid {pid} error status {status}")]
    Failed {
        /// This node.
        node: u32,
        /// The agent's pid.
        pid: u32,
        /// Its exit status.
        status: std::process::ExitStatus,
    },
}

/// `unfence_node`: every device of ours marked `unfence` runs with `action=on`, one after
/// another, before we join the daemon group; any failure stops the daemon.
pub(crate) async fn unfence(conf: &ConfFile, node: u32) -> Result<(), UnfenceError> {
    for m in conf.fence_methods(node).iter().filter(|m| m.unfence) {
        let stdin = agent_args(m, node, "action=on\n").ok_or(UnfenceError::Args { node })?;
        let mut child = program(&m.agent)
            .spawn()
            .map_err(|source| UnfenceError::Spawn {
                node,
                device: m.device.clone(),
                agent: m.agent.clone(),
                source,
            })?;
        let pid = child.id().unwrap_or(0);
        tracing::error!("unfence {node} pid {pid} {} {}", m.device, m.agent);
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(stdin.as_bytes()).await;
        }
        let status =
            child
                .wait()
                .await
                .map_err(|source| UnfenceError::Wait { node, pid, source })?;
        if !status.success() {
            return Err(UnfenceError::Failed { node, pid, status });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::UnfenceError;

    async fn unfence_with(agent: &str) -> Result<(), UnfenceError> {
        let conf = crate::config::parse_conf(&format!("fence_all {agent}\nunfence_all\n"))
            .expect("dlm.conf");
        super::unfence(&conf, 1).await
    }

    #[tokio::test]
    async fn an_unfence_failure_keeps_its_cause() {
        assert!(unfence_with("/bin/true").await.is_ok());
        let e = unfence_with("/bin/false").await.expect_err("false says no");
        assert!(
            matches!(e, UnfenceError::Failed { node: 1, ref status, .. } if status.code() == Some(1)),
            "{e}"
        );
        let e = unfence_with("/nonexistent/agent")
            .await
            .expect_err("no agent");
        match &e {
            UnfenceError::Spawn { source, agent, .. } => {
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
                assert_eq!(agent, "/nonexistent/agent");
            }
            other => panic!("{other}"),
        }
        assert!(
            e.to_string()
                .starts_with("unfence 1 fence_all /nonexistent/agent run error"),
            "{e}"
        );
    }

    #[test]
    fn a_run_uuid_is_a_fresh_lowercase_version_4_uuid() {
        let a = super::new_uuid().expect("random bytes");
        let b = super::new_uuid().expect("random bytes");
        assert_ne!(a, b);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(
            a.chars()
                .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
        assert!(parts[2].starts_with('4'), "version 4: {a}");
        assert!("89ab".contains(&parts[3][..1]), "RFC 4122 variant: {a}");
    }
}
