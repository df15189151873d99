//! Prometheus metrics (docs/metrics.md): counters moved where their events happen, gauges
//! of lockspace state filled at scrape time from the lockspace tasks' reports.

use std::sync::OnceLock;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Declares [`Metrics`] and its constructor from one table: per metric its field, type,
/// constructor, exported name, help and labels.
macro_rules! metrics {
    ($(
        $(#[$doc:meta])*
        $field:ident: $ty:ty = $make:ident($name:expr, $help:expr $(, [$($label:expr),*])?);
    )*) => {
        /// Every metric this daemon exports.
        #[derive(Debug)]
        pub struct Metrics {
            registry: Registry,
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Metrics {
            fn new() -> Self {
                let r = Registry::new();
                Self {
                    $($field: $make(&r, $name, $help $(, &[$($label),*])?),)*
                    registry: r,
                }
            }
        }
    };
}

metrics! {
    /// Plock requests read from the kernel, by lockspace and op.
    plock_requests: IntCounterVec = counter_vec(
        "dlm_plock_requests_total",
        "POSIX lock requests read from the kernel",
        ["lockspace", "op"]
    );
    /// Plock replies written to the kernel, by lockspace and result.
    plock_replies: IntCounterVec = counter_vec(
        "dlm_plock_replies_total",
        "POSIX lock replies written to the kernel",
        ["lockspace", "result"]
    );
    /// Request read to reply written, by lockspace and whether it could wait.
    plock_seconds: HistogramVec = histogram_vec(
        "dlm_plock_request_seconds",
        "From a request read from the kernel to its reply written (wait=true includes the time blocked)",
        ["lockspace", "wait"]
    );
    /// From a request read from the kernel to its being performed (in place by the reader,
    /// or by its lockspace's task taking it from the queue), by lockspace.
    handoff_seconds: HistogramVec = fine_histogram_vec(
        "dlm_plock_handoff_seconds",
        "From a plock request read from the kernel to its being performed (in place, or by its lockspace's task)",
        ["lockspace"]
    );
    /// A message of ours from its multicast to its delivery back to us, by lockspace.
    round_trip_seconds: HistogramVec = fine_histogram_vec(
        "dlm_cpg_round_trip_seconds",
        "A message of this node's from its multicast (or send queue) to corosync delivering it back",
        ["lockspace"]
    );
    /// Kernel plock records that did not decode.
    plock_bad_records: IntCounter = counter(
        "dlm_plock_bad_records_total",
        "Kernel plock records dropped because they did not decode"
    );
    /// Lockspace CPG messages sent / delivered, by lockspace.
    cpg_sent: IntCounterVec = counter_vec(
        "dlm_cpg_messages_sent_total",
        "Messages multicast on a lockspace's CPG group",
        ["lockspace"]
    );
    /// See `cpg_sent`.
    cpg_received: IntCounterVec = counter_vec(
        "dlm_cpg_messages_received_total",
        "Messages delivered on a lockspace's CPG group",
        ["lockspace"]
    );
    /// Delivered messages dropped as malformed or not for us, by lockspace.
    cpg_dropped: IntCounterVec = counter_vec(
        "dlm_cpg_messages_dropped_total",
        "Delivered messages dropped: malformed, a wrong sender or protocol version",
        ["lockspace"]
    );
    /// Granted locks held, by lockspace (at scrape).
    locks: IntGaugeVec = gauge_vec("dlm_plock_locks", "Granted POSIX locks", ["lockspace"]);
    /// Granted locks of this node's processes, by lockspace (at scrape).
    own_locks: IntGaugeVec = gauge_vec(
        "dlm_plock_own_locks",
        "Granted POSIX locks held by this node's processes (bounded by plock_locks_max)",
        ["lockspace"]
    );
    /// `plock_locks_max` as each lockspace applies it, by lockspace (at scrape; 0: none).
    locks_max: IntGaugeVec = gauge_vec(
        "dlm_plock_locks_max",
        "plock_locks_max: the most granted locks this node's processes may hold (0: no bound)",
        ["lockspace"]
    );
    /// Waiters queued, by lockspace (at scrape).
    waiters: IntGaugeVec = gauge_vec(
        "dlm_plock_waiters",
        "Blocked POSIX lock requests",
        ["lockspace"]
    );
    /// Resources (inodes with locks or waiters), by lockspace (at scrape).
    resources: IntGaugeVec = gauge_vec(
        "dlm_plock_resources",
        "Inodes with POSIX locks or waiters",
        ["lockspace"]
    );
    /// Members of the started change, by lockspace (at scrape).
    members: IntGaugeVec = gauge_vec(
        "dlm_lockspace_members",
        "Members of the lockspace's started change",
        ["lockspace"]
    );
    /// Sequence number of the started change, by lockspace (at scrape).
    change_seq: IntGaugeVec = gauge_vec(
        "dlm_lockspace_change_seq",
        "Sequence number of the lockspace's started change",
        ["lockspace"]
    );
    /// 1 while a pending change waits for `condition`, by lockspace (at scrape).
    waiting: IntGaugeVec = gauge_vec(
        "dlm_lockspace_waiting",
        "1 while the lockspace's pending change waits for the condition",
        ["lockspace", "condition"]
    );
    /// Query and main socket requests, by socket, command and outcome.
    socket_requests: IntCounterVec = counter_vec(
        "dlm_socket_requests_total",
        "Requests on the query and main sockets",
        ["socket", "command", "outcome"]
    );
    /// Query socket request latency.
    query_seconds: HistogramVec = histogram_vec(
        "dlm_query_seconds",
        "Query socket requests, accept to reply written",
        ["command"]
    );
    /// Connections closed at accept by a bound, by socket and bound.
    socket_refused: IntCounterVec = counter_vec(
        "dlm_socket_refused_total",
        "Connections closed at accept by a bound",
        ["socket", "bound"]
    );
    /// Failed accepts (EMFILE, ENFILE, ENOMEM, …), by socket: each one backs off.
    accept_errors: IntCounterVec = counter_vec(
        "dlm_socket_accept_errors_total",
        "Failed accepts on the local listeners (each backs off)",
        ["socket"]
    );
    /// Connections open on the local listeners now.
    connections: IntGauge = gauge(
        "dlm_socket_connections",
        "Connections open on the local listeners"
    );
    /// Uevent reads that failed and were gone on from, by reason (overrun, truncated, …).
    uevents_lost: IntCounterVec = counter_vec(
        "dlm_uevent_errors_total",
        "Uevent reads that failed and were gone on from (overrun: events lost)",
        ["reason"]
    );
    /// Plock requests read and not yet done with, over every lockspace.
    plock_backlog: IntGauge = gauge(
        "dlm_plock_backlog",
        "Plock requests read and not yet done with, every lockspace"
    );
    /// Times reading the plock device paused at the backlog bound.
    plock_read_pauses: IntCounter = counter(
        "dlm_plock_read_pauses_total",
        "Times reading the plock device paused at the backlog bound"
    );
    /// The plock device's reader reading on instead of sleeping (`plock_spin_us`): reads
    /// that found requests (a wake-up saved), windows that passed without one.
    plock_spins: IntCounterVec = counter_vec(
        "dlm_plock_spins_total",
        "The plock device read on after it emptied (plock_spin_us): outcome request (a wake-up saved), none (a window spent), busy (another task wanted the CPU) or turn (a process's turn long beside a wake-up)",
        ["outcome"]
    );
    /// On one CPU: the plock device's reader looking at the device again after the other
    /// tasks' turn instead of sleeping: looks that found requests, and that found none.
    plock_looks: IntCounterVec = counter_vec(
        "dlm_plock_looks_total",
        "On one CPU, the plock device looked at again after its reader gave up the CPU once instead of sleeping: outcome request (a sleep and a wake-up saved) or none",
        ["outcome"]
    );
    /// What the plock device's reader has learned for its spin, in µs: the gap from the
    /// device emptying to the next request when it slept and when it read on, and the
    /// window that gives (0 until learned).
    plock_spin_us: IntGaugeVec = gauge_vec(
        "dlm_plock_spin_microseconds",
        "The plock device reader's spin, learned: gap_slept and gap_spun (device empty to next request, sleeping or reading on), window (how long it reads on)",
        ["what"]
    );
    /// Log lines for syslog, the log file or stderr dropped: the writer's queue was full.
    log_lines_dropped: IntCounter = counter(
        "dlm_log_lines_dropped_total",
        "Log lines for syslog, the log file or stderr dropped at a full writer queue"
    );
    /// Lines logged at error level (bad input included).
    errors: IntCounter = counter(
        "dlm_errors_total",
        "Lines logged at error level, bad input included"
    );
    /// State transfers by lockspace and role (sent, received).
    transfers: IntCounterVec = counter_vec(
        "dlm_plock_transfers_total",
        "Plock state transfers to joining nodes (sent) and as a joiner (received)",
        ["lockspace", "role"]
    );
    /// PLOCKS_DATA messages of state transfers, by lockspace and role.
    transfer_messages: IntCounterVec = counter_vec(
        "dlm_plock_transfer_messages_total",
        "PLOCKS_DATA messages of state transfers",
        ["lockspace", "role"]
    );
    /// A joiner's wait for the plock state, by lockspace.
    transfer_seconds: HistogramVec = histogram_vec(
        "dlm_plock_transfer_seconds",
        "A joiner's wait for the plock state, from the start of saving to PLOCKS_DONE",
        ["lockspace"]
    );
    /// corosync TRY_AGAIN on a lockspace's send queue, by lockspace.
    try_again: IntCounterVec = counter_vec(
        "dlm_cpg_try_again_total",
        "Times corosync answered TRY_AGAIN to a lockspace's queued messages",
        ["lockspace"]
    );
    /// Plock requests decided locally in native mode.
    native_local: IntCounterVec = counter_vec(
        "dlm_plock_local_total",
        "Plock requests decided on this node without a CPG round trip (native mode)",
        ["lockspace"]
    );
    /// Resources we owned that another node's request made us give back.
    native_recalls: IntCounterVec = counter_vec(
        "dlm_plock_recalls_total",
        "Resources this node owned that another node's request made it give back",
        ["lockspace"]
    );
    /// NATIVE messages sent.
    native_batches: IntCounterVec = counter_vec(
        "dlm_plock_native_messages_total",
        "NATIVE messages (batches of plock entries) sent",
        ["lockspace"]
    );
    /// Messages queued for a lockspace's group (at scrape).
    send_queue: IntGaugeVec = gauge_vec(
        "dlm_cpg_send_queue",
        "Messages queued for a lockspace's group, not yet taken by corosync",
        ["lockspace"]
    );
    /// Age of the longest-waiting plock waiter, by lockspace (at scrape; 0 with none).
    oldest_waiter: GaugeVec = float_gauge_vec(
        "dlm_plock_oldest_waiter_seconds",
        "How long the longest-waiting blocked plock request has waited (0: none)",
        ["lockspace"]
    );
    /// Lock owners in a cycle of waiting owners (a deadlock across nodes), per lockspace.
    owners_in_cycle: IntGaugeVec = gauge_vec(
        "dlm_plock_owners_in_cycle",
        "Lock owners in a cycle of waiting owners now: a deadlock across nodes (dlm_tool plocks --waits shows it)",
        ["lockspace"]
    );
    /// How long blocking requests waited: granted or cancelled.
    plock_wait_seconds: HistogramVec = histogram_vec(
        "dlm_plock_wait_seconds",
        "How long a blocking request (F_SETLKW) of this node waited, until granted or cancelled",
        ["lockspace", "outcome"]
    );
    /// Fence agents started here, by device.
    fence_attempts: IntCounterVec = counter_vec(
        "dlm_fence_agent_runs_total",
        "Fence agents started by this node",
        ["device"]
    );
    /// Fence agents that ended here, by outcome (success, failure).
    fence_results: IntCounterVec = counter_vec(
        "dlm_fence_agent_results_total",
        "Fence agents that ended on this node, by outcome",
        ["outcome"]
    );
    /// FENCE_RESULT messages received, by outcome (fenced, acknowledged, failed).
    fence_received: IntCounterVec = counter_vec(
        "dlm_fence_results_received_total",
        "FENCE_RESULT messages received from any node: fenced, acknowledged (fence_ack), failed",
        ["outcome"]
    );
    /// Daemon nodes that need fencing now (at scrape).
    need_fencing: IntGauge = gauge(
        "dlm_nodes_need_fencing",
        "Daemon nodes that must be fenced before lockspaces that lost them restart"
    );
    /// Daemon group messages dropped: malformed, a wrong sender, an unknown type.
    daemon_dropped: IntCounter = counter(
        "dlm_daemon_messages_dropped_total",
        "Daemon group messages dropped: malformed, a wrong sender or an unknown type"
    );
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(c.clone()));
    c
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(g.clone()));
    g
}

fn histogram_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let buckets = vec![
        50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 1.0, 10.0,
    ];
    histogram_of(r, name, help, labels, buckets)
}

/// A histogram of one hop of a request, from microseconds up.
fn fine_histogram_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let buckets = vec![
        5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 10e-3, 100e-3, 1.0,
    ];
    histogram_of(r, name, help, labels, buckets)
}

fn histogram_of(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(h.clone()));
    h
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(c.clone()));
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(g.clone()));
    g
}

fn float_gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(g.clone()));
    g
}

impl Metrics {
    /// The text exposition format.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }

    /// Forgets a lockspace's labelled series once it is gone.
    pub fn forget(&self, lockspace: &str) {
        for v in [
            &self.locks,
            &self.own_locks,
            &self.locks_max,
            &self.waiters,
            &self.resources,
            &self.members,
            &self.change_seq,
            &self.send_queue,
        ] {
            let _ = v.remove_label_values(&[lockspace]);
        }
        let _ = self.oldest_waiter.remove_label_values(&[lockspace]);
        let _ = self.handoff_seconds.remove_label_values(&[lockspace]);
        let _ = self.round_trip_seconds.remove_label_values(&[lockspace]);
        let _ = self.owners_in_cycle.remove_label_values(&[lockspace]);
        for o in ["granted", "cancelled"] {
            let _ = self.plock_wait_seconds.remove_label_values(&[lockspace, o]);
        }
        for c in CONDITIONS {
            let _ = self.waiting.remove_label_values(&[lockspace, c]);
        }
    }
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The daemon's metrics.
pub fn get() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// The `condition` label values of `dlm_lockspace_waiting`.
pub const CONDITIONS: [&str; 5] = ["ringid", "quorum", "fencing", "fsdone", "messages"];

/// The `op` label values of `dlm_plock_requests_total`.
pub const OPS: [&str; 5] = ["lock", "unlock", "get", "cancel", "other"];

/// The `result` label values of `dlm_plock_replies_total`.
pub const RESULTS: [&str; 6] = ["ok", "eagain", "conflict", "enoent", "enolck", "error"];

/// Index in [`OPS`] of a plock request's op.
pub fn op_index(op: dlm_proto::kernel::PlockOp) -> usize {
    use dlm_proto::kernel::PlockOp;
    match op {
        PlockOp::LOCK => 0,
        PlockOp::UNLOCK => 1,
        PlockOp::GET => 2,
        PlockOp::CANCEL => 3,
        _ => 4,
    }
}

/// Index in [`RESULTS`] of a plock reply.
pub fn result_index(op: dlm_proto::kernel::PlockOp, rv: i32) -> usize {
    use dlm_proto::errno::{EAGAIN, ENOENT, ENOLCK};
    match (op, rv) {
        (dlm_proto::kernel::PlockOp::GET, 1) => 2,
        (_, 0) => 0,
        (_, r) if r == -EAGAIN => 1,
        (_, r) if r == -ENOENT => 3,
        (_, r) if r == -ENOLCK => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_registered_and_exported() {
        let m = get();
        m.plock_requests.with_label_values(&["t", "lock"]).inc();
        m.plock_replies.with_label_values(&["t", "ok"]).inc();
        m.plock_seconds
            .with_label_values(&["t", "false"])
            .observe(0.001);
        m.plock_bad_records.inc();
        m.handoff_seconds.with_label_values(&["t"]).observe(3e-6);
        m.round_trip_seconds
            .with_label_values(&["t"])
            .observe(80e-6);
        m.cpg_sent.with_label_values(&["t"]).inc();
        m.cpg_received.with_label_values(&["t"]).inc();
        m.cpg_dropped.with_label_values(&["t"]).inc();
        m.locks.with_label_values(&["t"]).set(3);
        m.own_locks.with_label_values(&["t"]).set(2);
        m.locks_max.with_label_values(&["t"]).set(10);
        m.waiters.with_label_values(&["t"]).set(1);
        m.resources.with_label_values(&["t"]).set(2);
        m.members.with_label_values(&["t"]).set(3);
        m.change_seq.with_label_values(&["t"]).set(4);
        m.waiting.with_label_values(&["t", "quorum"]).set(1);
        m.socket_requests
            .with_label_values(&["query", "lockspaces", "ok"])
            .inc();
        m.query_seconds
            .with_label_values(&["lockspaces"])
            .observe(0.0001);
        m.socket_refused.with_label_values(&["query", "uid"]).inc();
        m.accept_errors.with_label_values(&["main"]).inc();
        m.connections.set(2);
        m.uevents_lost.with_label_values(&["overrun"]).inc();
        m.plock_backlog.set(7);
        m.plock_read_pauses.inc();
        m.plock_spins.with_label_values(&["none"]).inc();
        m.plock_looks.with_label_values(&["none"]).inc();
        m.log_lines_dropped.inc();
        m.errors.inc();
        m.fence_attempts.with_label_values(&["fence_all"]).inc();
        m.fence_results.with_label_values(&["success"]).inc();
        m.fence_received.with_label_values(&["fenced"]).inc();
        m.need_fencing.set(1);
        m.daemon_dropped.inc();
        m.transfers.with_label_values(&["t", "sent"]).inc();
        m.transfer_messages
            .with_label_values(&["t", "received"])
            .inc();
        m.transfer_seconds.with_label_values(&["t"]).observe(0.1);
        m.try_again.with_label_values(&["t"]).inc();
        m.native_local.with_label_values(&["t"]).inc();
        m.native_recalls.with_label_values(&["t"]).inc();
        m.native_batches.with_label_values(&["t"]).inc();
        m.send_queue.with_label_values(&["t"]).set(5);
        m.oldest_waiter.with_label_values(&["t"]).set(1.5);
        m.owners_in_cycle.with_label_values(&["t"]).set(2);
        m.plock_wait_seconds
            .with_label_values(&["t", "granted"])
            .observe(0.5);
        let text = String::from_utf8(m.encode()).expect("utf8");
        for name in [
            "dlm_plock_requests_total",
            "dlm_plock_replies_total",
            "dlm_plock_request_seconds",
            "dlm_plock_bad_records_total",
            "dlm_plock_handoff_seconds",
            "dlm_cpg_round_trip_seconds",
            "dlm_cpg_messages_sent_total",
            "dlm_cpg_messages_received_total",
            "dlm_cpg_messages_dropped_total",
            "dlm_plock_locks",
            "dlm_plock_own_locks",
            "dlm_plock_locks_max",
            "dlm_plock_waiters",
            "dlm_plock_resources",
            "dlm_lockspace_members",
            "dlm_lockspace_change_seq",
            "dlm_lockspace_waiting",
            "dlm_socket_requests_total",
            "dlm_query_seconds",
            "dlm_socket_refused_total",
            "dlm_socket_accept_errors_total",
            "dlm_socket_connections",
            "dlm_uevent_errors_total",
            "dlm_plock_backlog",
            "dlm_plock_read_pauses_total",
            "dlm_plock_spins_total",
            "dlm_plock_looks_total",
            "dlm_log_lines_dropped_total",
            "dlm_errors_total",
            "dlm_fence_agent_runs_total",
            "dlm_fence_agent_results_total",
            "dlm_fence_results_received_total",
            "dlm_nodes_need_fencing",
            "dlm_daemon_messages_dropped_total",
            "dlm_plock_transfers_total",
            "dlm_plock_transfer_messages_total",
            "dlm_plock_transfer_seconds",
            "dlm_cpg_try_again_total",
            "dlm_plock_local_total",
            "dlm_plock_recalls_total",
            "dlm_plock_native_messages_total",
            "dlm_cpg_send_queue",
            "dlm_plock_oldest_waiter_seconds",
            "dlm_plock_owners_in_cycle",
            "dlm_plock_wait_seconds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing:\n{text}"
            );
        }
        assert!(
            text.contains("dlm_plock_locks{lockspace=\"t\"} 3"),
            "{text}"
        );
        m.forget("t");
        let text = String::from_utf8(m.encode()).expect("utf8");
        assert!(!text.contains("dlm_plock_locks{lockspace=\"t\"}"), "{text}");
    }

    #[test]
    fn labels() {
        use dlm_proto::errno::{EAGAIN, EINVAL, ENOLCK};
        use dlm_proto::kernel::PlockOp;
        assert_eq!(OPS[op_index(PlockOp::GET)], "get");
        assert_eq!(RESULTS[result_index(PlockOp::GET, 1)], "conflict");
        assert_eq!(RESULTS[result_index(PlockOp::LOCK, -EAGAIN)], "eagain");
        assert_eq!(RESULTS[result_index(PlockOp::LOCK, 0)], "ok");
        assert_eq!(RESULTS[result_index(PlockOp::UNLOCK, -EINVAL)], "error");
        assert_eq!(RESULTS[result_index(PlockOp::LOCK, -ENOLCK)], "enolck");
    }
}
