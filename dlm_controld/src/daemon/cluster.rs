//! The cluster under the daemon: corosync (CPG groups, quorum, cfg, cmap) or the embedded
//! one-node group. Everything else in the daemon sees only [`ClusterGroup`] and [`QuorumState`].

use std::time::Duration;

use dlm_cpg::{
    AsyncCorosyncGroup, Cfg, Cmap, CorosyncGroup, CpgError, EmbeddedGroup, Event, Group, NodeAddr,
    Quorum,
};

/// `CS_ERR_EXIST` (corotypes.h).
const CS_ERR_EXIST: i32 = 14;

/// Quorum as the lockspaces need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct QuorumState {
    /// The partition is quorate.
    pub(crate) quorate: bool,
    /// Ring sequence of the last quorum notification (`cluster_ringid_seq`).
    pub(crate) ring_seq: u64,
}

/// How far a [`ClusterGroup::flush_some`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Nothing left queued.
    Empty,
    /// The budget ran out: more can go at once.
    Budget,
    /// corosync said TRY_AGAIN: retry shortly.
    PushedBack,
}

/// A process group of either kind: a lockspace's or the daemon group.
#[derive(Debug)]
pub(crate) enum ClusterGroup {
    Embedded(EmbeddedGroup),
    /// Dispatched by its task on the daemon's runtime.
    Corosync(AsyncCorosyncGroup),
    /// A lockspace's group dispatched by the plock device's reader on its thread
    /// (`polled.rs`), as C's one loop polls the device and the groups: not
    /// registered with the runtime, so a delivery wakes one thread, the reader.
    Polled(CorosyncGroup),
}

impl ClusterGroup {
    /// Joins `name` (bytes with the NUL counted) as node `our`, asking for the initial
    /// totem ring. Retries corosync's TRY_AGAIN every 100 ms (C: every second, blocking).
    /// With `polled`, a corosync group is left to the plock device's reader to dispatch
    /// ([`Self::Polled`]).
    pub(crate) async fn join(
        embedded: bool,
        our: u32,
        name: &[u8],
        polled: bool,
    ) -> Result<Self, CpgError> {
        if embedded {
            return Ok(Self::Embedded(EmbeddedGroup::join(
                our,
                std::process::id(),
                true,
            )));
        }
        // CS_ERR_EXIST: corosync has not yet processed a leave of the same group by this
        // process (a lockspace left and joined again at once); it clears within moments
        let mut exist_tries = 0;
        loop {
            match CorosyncGroup::join(name, true) {
                Ok(g) if polled => return Ok(Self::Polled(g)),
                Ok(g) => return Ok(Self::Corosync(AsyncCorosyncGroup::new(g)?)),
                Err(CpgError::TryAgain) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(CpgError::Call {
                    code: CS_ERR_EXIST, ..
                }) if exist_tries < 50 => {
                    exist_tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The corosync group, whoever dispatches it.
    fn corosync(&mut self) -> Option<&mut CorosyncGroup> {
        match self {
            Self::Embedded(_) => None,
            Self::Corosync(g) => Some(g.group()),
            Self::Polled(g) => Some(g),
        }
    }

    pub(crate) fn mcast(&mut self, bytes: &[u8]) -> Result<(), CpgError> {
        match self {
            Self::Embedded(g) => g.mcast(bytes),
            Self::Corosync(g) => g.group().mcast(bytes),
            Self::Polled(g) => g.mcast(bytes),
        }
    }

    /// Queues a message behind the backlog without sending it now (the tail of a long
    /// burst: a state transfer must not hold the task in thousands of IPC calls).
    pub(crate) fn enqueue(&mut self, bytes: Vec<u8>) -> Result<(), CpgError> {
        match self.corosync() {
            Some(g) => g.enqueue(bytes),
            None => self.mcast(&bytes),
        }
    }

    /// Sends at most `max` queued messages, without waiting.
    pub(crate) fn flush_some(&mut self, max: usize) -> Result<Flush, CpgError> {
        let Some(g) = self.corosync() else {
            return Ok(Flush::Empty);
        };
        Ok(if g.flush_some(max)? {
            Flush::Empty
        } else if g.pushed_back() {
            Flush::PushedBack
        } else {
            Flush::Budget
        })
    }

    /// Sends everything queued, without waiting: `Ok(true)` when nothing is left.
    pub(crate) fn try_flush(&mut self) -> Result<bool, CpgError> {
        self.corosync().map_or(Ok(true), |g| g.flush())
    }

    /// Messages corosync has not taken yet.
    pub(crate) fn queued(&mut self) -> usize {
        match self {
            Self::Embedded(g) => g.send_queue_len(),
            Self::Corosync(g) => g.group().send_queue_len(),
            Self::Polled(g) => g.send_queue_len(),
        }
    }

    pub(crate) fn leave(&mut self) -> Result<(), CpgError> {
        match self {
            Self::Embedded(g) => {
                g.leave();
                Ok(())
            }
            Self::Corosync(g) => g.group().leave(),
            Self::Polled(g) => g.leave(),
        }
    }

    /// An event already queued, without waiting.
    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        match self {
            Self::Embedded(g) => g.poll_event(),
            Self::Corosync(g) => g.group().poll_event(),
            Self::Polled(g) => g.poll_event(),
        }
    }

    /// The next event, waiting for corosync (forever on the embedded group).
    pub(crate) async fn next_event(&mut self) -> Result<Event, CpgError> {
        std::future::poll_fn(|cx| self.poll_next_event(cx)).await
    }

    /// The next event as a poll, the task woken when corosync has one (the embedded group
    /// never produces events by itself, nor does a group the plock device's reader
    /// dispatches, so they stay pending there).
    pub(crate) fn poll_next_event(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Event, CpgError>> {
        match self {
            Self::Embedded(g) => g
                .poll_event()
                .map_or(std::task::Poll::Pending, |e| std::task::Poll::Ready(Ok(e))),
            Self::Corosync(g) => g.poll_next_event(cx),
            Self::Polled(_) => std::task::Poll::Pending,
        }
    }

    /// The fd the plock device's reader polls for a [`Self::Polled`] group.
    pub(crate) fn polled_fd(&self) -> Option<std::os::fd::RawFd> {
        match self {
            Self::Polled(g) => g.as_raw_fd().ok(),
            _ => None,
        }
    }

    /// A [`Self::Polled`] group's deliveries, at most `max`, moved into its event queue
    /// without waiting: `Ok(true)` when corosync has no more now.
    pub(crate) fn dispatch_some(&mut self, max: usize) -> Result<bool, CpgError> {
        match self {
            Self::Polled(g) => g.dispatch_some(max),
            _ => Ok(true),
        }
    }
}

/// What the daemon learns from corosync at startup.
#[derive(Debug)]
pub(crate) struct CorosyncServices {
    pub(crate) cfg: Cfg,
    pub(crate) quorum: Quorum,
    pub(crate) nodeid: u32,
    pub(crate) cluster_name: String,
    /// corosync `quorum.two_node` with exactly two configured nodes.
    pub(crate) two_node: bool,
    /// The configured nodes (`nodelist.node.*.nodeid`), for startup fencing.
    pub(crate) nodelist: Vec<u32>,
}

impl CorosyncServices {
    /// Connects to cfg, cmap and quorum (`setup_cluster`).
    pub(crate) fn connect() -> Result<Self, CpgError> {
        let cfg = Cfg::with_shutdown_tracking()?;
        let nodeid = cfg.local_nodeid()?;
        let cmap = Cmap::new()?;
        let cluster_name = cmap.get_string("totem.cluster_name")?.unwrap_or_default();
        // setup_node_config: the node list and two_node are hints (startup fencing, the
        // two_node merge rule); as C, a key that cannot be read ends or skips them
        let nodelist = match cmap.nodelist() {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("corosync nodelist: {e}");
                Vec::new()
            }
        };
        let two_node = match cmap.get_u8("quorum.two_node") {
            Ok(v) => v.unwrap_or(0) != 0 && nodelist.len() == 2,
            Err(e) => {
                tracing::error!("corosync quorum.two_node: {e}");
                false
            }
        };
        let quorum = Quorum::new()?;
        Ok(Self {
            cfg,
            quorum,
            nodeid,
            cluster_name,
            two_node,
            nodelist,
        })
    }

    /// Addresses of a node for configfs `comms/<id>/addr`.
    pub(crate) fn addrs(&self, nodeid: u32) -> Vec<NodeAddr> {
        self.cfg.node_addrs(nodeid).unwrap_or_default()
    }
}
