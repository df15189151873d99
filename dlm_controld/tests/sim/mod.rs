//! The cluster simulations' harness: nodes running the daemon's own lockspace logic
//! (`LsCore`) on the simulated CPG bus, a model of what each node's processes were told,
//! and the checks (no range granted twice, every request answered once and in the kernel's
//! order, replicas alike when quiet, fencing before a failed node's locks go).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use dlm_controld::daemon_core::FenceFacts;
use dlm_controld::lscore::{Action, LsCore, LsEnv, NativeStats};
use dlm_cpg::{Event, Group, SimBus, SimGroup};
use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockInfo, PlockOp};
use dlm_proto::query::LockspaceFlags;
use dlm_proto::wire::{Body, HeaderFlags, Message, NativeKind};
use dlm_testkit::Rng;

use crate::procs::{Procs, grants_clash, mask, table_clash};

pub(crate) const NAME: &[u8] = b"dlm:ls:sim\0";
pub(crate) const INODES: u64 = 3;
pub(crate) const BYTES: u64 = 12;

pub(crate) struct Node {
    pub(crate) id: u32,
    pub(crate) group: Option<SimGroup>,
    pub(crate) core: LsCore,
    pub(crate) side: u32,
    /// What its processes asked and were told.
    pub(crate) procs: Procs,
    /// `Action::Fresh` seen: a plock dump that waited may be made
    pub(crate) fresh: u32,
}

pub(crate) struct Sim {
    pub(crate) bus: SimBus,
    pub(crate) nodes: BTreeMap<u32, Node>,
    pub(crate) configured: u32,
    pub(crate) serial: u32,
    pub(crate) seed: u64,
    /// Ticks (the lockspaces' monotonic seconds).
    pub(crate) clock: u64,
    /// Fencing as the daemon group reports it: a failed node counts as fenced from the tick
    /// its (simulated) fencing completes; until then every lockspace that lost it waits.
    pub(crate) fence: FenceFacts,
    /// Nodes that do not offer native mode (as a C daemon does not): while one is a
    /// member every lockspace is C-compatible.
    pub(crate) plain: BTreeSet<u32>,
    /// Nodes of ours from before SYNC (their STARTs lack `NATIVE_SYNC`): their decoder
    /// refuses a whole batch with a SYNC or SYNCED entry, so none may reach them.
    pub(crate) older: BTreeSet<u32>,
    /// Settle rounds so far (decided entries alone go out every third).
    pub(crate) turns: u64,
    /// The STATEs of local decisions go out every this many settle rounds, or never
    /// (`plock_native_sync_ms=0`: only a dump's SYNC, a change or a recall brings them).
    pub(crate) sync_every: Option<u64>,
    /// Every node runs `plock_deadlock_detect=1` (and so no native mode).
    pub(crate) deadlock: bool,
    /// Native counts of nodes gone.
    pub(crate) stats: NativeStats,
    /// Nodes up in the cluster (they count for quorum, on side 0) that have not joined the
    /// lockspace yet; each join takes one.
    pub(crate) outside: u32,
}

/// What the fencing checks remember.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// Failed node → tick its fencing completes.
    pub(crate) fence_at: BTreeMap<u32, u64>,
    /// (survivor, failed node) → the failed node's entries in the survivor's table.
    pub(crate) held: BTreeMap<(u32, u32), usize>,
}

/// `n` applies what it is delivered (it is not a joiner before its snapshot point).
pub(crate) fn applies(n: &Node) -> bool {
    let f = n.core.report().info.flags.0;
    f & LockspaceFlags::NEED_PLOCKS == 0 || f & LockspaceFlags::SAVE_PLOCKS != 0
}

/// `payload` is a NATIVE batch with a SYNC or SYNCED entry.
pub(crate) fn has_sync(payload: &[u8]) -> bool {
    match Message::decode(payload) {
        Ok(Message {
            body: Body::Native(b),
            ..
        }) => b
            .entries()
            .any(|e| matches!(e.kind, NativeKind::Sync | NativeKind::Synced)),
        _ => false,
    }
}

/// `n` is a joiner still waiting for the table.
pub(crate) fn receiving(n: &Node) -> bool {
    n.core.report().info.flags.0 & LockspaceFlags::NEED_PLOCKS != 0
}

/// Locks and waiters of `nodeid` in `n`'s table.
pub(crate) fn entries_of(n: &Node, nodeid: u32) -> usize {
    let id = i32::try_from(nodeid).expect("small");
    n.core.plocks().dump(0).filter(|e| e.nodeid == id).count()
}

impl Sim {
    pub(crate) fn env<'a>(
        fence: &'a FenceFacts,
        clock: u64,
        quorate: bool,
        ring: u64,
    ) -> LsEnv<'a> {
        LsEnv {
            now: clock,
            now_ms: clock * 1000,
            quorate,
            cluster_ring_seq: ring,
            quorum_required: true,
            fencing_enabled: true,
            fencing: fence,
        }
    }

    pub(crate) fn quorate(&self, side: u32) -> bool {
        let alive = self
            .nodes
            .values()
            .filter(|n| n.group.is_some() && n.side == side)
            .count();
        let outside = if side == 0 { self.outside } else { 0 };
        2 * (u32::try_from(alive).unwrap_or(0) + outside) > self.configured
    }

    pub(crate) fn join(&mut self, id: u32) {
        self.outside = self.outside.saturating_sub(1);
        let group = self.bus.join(id, NAME).expect("join");
        let name = LockspaceName::new(b"sim").expect("name");
        if let Some(old) = self.nodes.get(&id) {
            let s = old.core.native_stats();
            self.stats.local += s.local;
            self.stats.recalls += s.recalls;
        }
        self.nodes.insert(
            id,
            Node {
                id,
                group: Some(group),
                core: {
                    let mut c = LsCore::new(name, id, true, u64::from(id) << 17);
                    c.set_native(!self.plain.contains(&id));
                    if self.older.contains(&id) {
                        c.withhold_start_flags(HeaderFlags::NATIVE_SYNC);
                    }
                    c.set_deadlock_detect(self.deadlock);
                    c
                },
                side: 0,
                procs: Procs::default(),
                fresh: 0,
            },
        );
    }

    pub(crate) fn perform(node: &mut Node, actions: Vec<Action>, seed: u64) {
        for a in actions {
            match a {
                Action::Send(bytes) => {
                    if let Some(g) = node.group.as_mut() {
                        let _ = g.mcast(&bytes);
                    }
                }
                Action::Reply(info) => {
                    // cut off, a node answers nothing once it knows (its lockspace stopped
                    // at the confchg); before, an owner may still decide what it owns, as it
                    // would have a moment earlier: nobody else holds those resources, and
                    // the majority fences it before granting them
                    assert!(
                        node.side == 0 || !node.core.kernel_stopped(),
                        "seed {seed}: node {} answered {info:?} while cut off without quorum",
                        node.id
                    );
                    node.procs.replied(node.id, &info, seed);
                }
                // the simulation sends only well-formed messages
                Action::Dropped { from, why } => panic!("dropped from {from}: {why}"),
                Action::StopKernel
                | Action::StartKernel { .. }
                | Action::KickNode(_)
                | Action::TransferSent { .. }
                | Action::TransferReceived { .. }
                | Action::Left => {}
                Action::Fresh => node.fresh += 1,
            }
        }
    }

    /// Node `victim` fails now (a crash); its fencing completes `delay` ticks later. Every
    /// survivor's entries of the victim are remembered: none may go before the fencing.
    pub(crate) fn fail(&mut self, victim: u32, delay: u64, watch: &mut Watch) {
        self.bus.crash(victim);
        if let Some(node) = self.nodes.get_mut(&victim) {
            node.group = None;
        }
        self.fence.in_progress = true;
        watch.fence_at.insert(victim, self.clock + delay);
        // (a joiner still receiving the table is not yet a replica: it is not watched)
        for n in self
            .nodes
            .values()
            .filter(|n| n.group.is_some() && !receiving(n))
        {
            let count = entries_of(n, victim);
            watch.held.insert((n.id, victim), count);
        }
    }

    /// One tick: the clock moves, due fencing completes, and no survivor has lost a failed
    /// node's entries before it was fenced.
    pub(crate) fn tick(&mut self, watch: &mut Watch) {
        self.clock += 1;
        let due: Vec<u32> = watch
            .fence_at
            .iter()
            .filter(|(_, at)| **at <= self.clock)
            .map(|(v, _)| *v)
            .collect();
        for v in due {
            watch.fence_at.remove(&v);
            self.fence.fenced.insert(v, self.clock);
            watch.held.retain(|(_, victim), _| *victim != v);
        }
        self.fence.in_progress = !watch.fence_at.is_empty();
        self.check_fencing_held(watch);
    }

    pub(crate) fn check_fencing_held(&self, watch: &Watch) {
        for (&(survivor, victim), &count) in &watch.held {
            let Some(n) = self.nodes.get(&survivor).filter(|n| n.group.is_some()) else {
                continue;
            };
            assert_eq!(
                entries_of(n, victim),
                count,
                "seed {}: node {survivor} dropped node {victim}'s locks before it was fenced",
                self.seed
            );
        }
    }

    /// Every pending fencing completes now; then the cluster settles.
    pub(crate) fn fence_all(&mut self, watch: &mut Watch) {
        for at in watch.fence_at.values_mut() {
            *at = self.clock;
        }
        self.tick(watch);
        self.settle();
    }

    /// Delivers until nothing moves; returns whether anything did.
    pub(crate) fn settle(&mut self) -> bool {
        self.settle_for(usize::MAX)
    }

    /// At most `turns` rounds of: order one message, let every node handle its events.
    pub(crate) fn settle_for(&mut self, turns: usize) -> bool {
        let mut any = false;
        for _ in 0..turns {
            self.turns += 1;
            let mut moved = self.bus.step();
            let ids: Vec<u32> = self.nodes.keys().copied().collect();
            for id in ids {
                moved |= self.node_turn(id);
            }
            if !moved {
                return any;
            }
            any = true;
        }
        any
    }

    /// Node `id` handles the events it has, then ends its turn as the shell does; whether
    /// anything moved.
    pub(crate) fn node_turn(&mut self, id: u32) -> bool {
        let fence = &self.fence;
        let clock = self.clock;
        let side = self.nodes[&id].side;
        let quorate = self.quorate(side);
        let seed = self.seed;
        let turns = self.turns;
        let sync_every = self.sync_every;
        let mut moved = false;
        let node = self.nodes.get_mut(&id).expect("node");
        let Some(g) = node.group.as_mut() else {
            return false;
        };
        let mut events = Vec::new();
        while let Some(e) = g.poll_event() {
            events.push(e);
        }
        let older = self.older.contains(&id);
        for ev in events {
            moved = true;
            if let Event::Deliver { payload, .. } = &ev {
                assert!(
                    !(older && applies(node) && has_sync(payload)),
                    "seed {seed}: node {id}, of ours from before SYNC, was sent a SYNC or SYNCED \
                     (its decoder refuses the whole batch)"
                );
            }
            let env = Self::env(fence, clock, quorate, 0);
            let a = node.core.event(&env, ev);
            Self::perform(node, a, seed);
            check_table(node, seed);
        }
        let env = Self::env(fence, clock, quorate, 0);
        let a = node.core.poll(&env);
        if !a.is_empty() {
            moved = true;
        }
        Self::perform(node, a, seed);
        // the shell's end of turn: the batch (requests, releases) goes at once, the
        // STATEs of our decisions a little later
        if node.core.batch_urgent() {
            let a = node.core.flush();
            Self::perform(node, a, seed);
        }
        if let Some(every) = sync_every {
            if node.core.batch_pending() && turns % every == 0 {
                let a = node.core.sync(clock * 1000);
                Self::perform(node, a, seed);
            }
            moved |= node.core.batch_pending();
        }
        // a transfer goes out a few messages per turn, interleaved with the rest
        if node.core.sending() {
            moved = true;
            let env = Self::env(fence, clock, quorate, 0);
            let a = node.core.pump(&env, 2);
            Self::perform(node, a, seed);
        }
        moved
    }

    pub(crate) fn request(&mut self, rng: &mut Rng, id: u32) {
        let Some(node) = self.nodes.get_mut(&id) else {
            return;
        };
        if node.group.is_none() || node.core.kernel_stopped() && node.core.needs_plocks() {
            return; // the kernel does not send requests before the join completes
        }
        self.serial += 1;
        let owner = u64::from(id) * 10 + rng.next(3);
        let start = rng.next(BYTES);
        let end = (start + rng.next(4)).min(BYTES - 1);
        let kind = rng.next(100);
        let (op, wait, flags) = match kind {
            0..=44 => (PlockOp::LOCK, kind % 4 == 0, 0),
            45..=74 => (PlockOp::UNLOCK, false, 0),
            75..=89 => (PlockOp::GET, false, 0),
            _ => (PlockOp::UNLOCK, false, PlockFlags::CLOSE),
        };
        // a blocked owner does nothing else until answered (a process waits in fcntl)
        let blocked = node
            .procs
            .requests
            .values()
            .any(|p| p.info.owner == owner && p.info.wait && p.replies == 0);
        if blocked {
            return;
        }
        let (start, end) = if flags == PlockFlags::CLOSE {
            (0, 0x7fff_ffff_ffff_ffff)
        } else {
            (start, end)
        };
        let info = PlockInfo {
            version: PLOCK_VERSION,
            op,
            ex: rng.next(2) == 0,
            wait,
            flags: PlockFlags(flags),
            pid: self.serial,
            nodeid: i32::try_from(id).expect("small"),
            rv: 0,
            fsid: node.core.global_id(),
            number: rng.next(INODES),
            start,
            end,
            owner,
        };
        if info.op == PlockOp::UNLOCK {
            // the process lets go when it asks
            let m = mask(info.start, info.end);
            let c = node
                .procs
                .claim
                .entry((owner, info.number))
                .or_insert((0, 0));
            c.0 &= !m;
            c.1 &= !m;
        }
        let a = submit(node, info, self.clock * 1000);
        Self::perform(node, a, self.seed);
    }

    /// An UNLOCK of a byte nobody uses, by an owner that holds nothing, on `number` from
    /// node `id`: it changes no lock but runs the resource's waiter pass everywhere.
    pub(crate) fn poke(&mut self, id: u32, number: u64) {
        if !self.nodes.contains_key(&id) {
            return;
        }
        let info = self.non_blocking(id, PlockOp::UNLOCK, number, BYTES + 10, 9);
        let node = self.nodes.get_mut(&id).expect("node");
        let a = submit(node, info, self.clock * 1000);
        Self::perform(node, a, self.seed);
    }

    /// A new non-blocking request of node `id`'s process `10 * id + proc` (a write lock or
    /// an unlock) for byte `byte` of `number`.
    pub(crate) fn non_blocking(
        &mut self,
        id: u32,
        op: PlockOp,
        number: u64,
        byte: u64,
        proc: u64,
    ) -> PlockInfo {
        self.serial += 1;
        PlockInfo {
            version: PLOCK_VERSION,
            op,
            ex: op == PlockOp::LOCK,
            wait: false,
            flags: PlockFlags(0),
            pid: self.serial,
            nodeid: i32::try_from(id).expect("small"),
            rv: 0,
            fsid: self.nodes[&id].core.global_id(),
            number,
            start: byte,
            end: byte,
            owner: u64::from(id) * 10 + proc,
        }
    }

    /// Every waiter left must still conflict with a granted lock of another owner: one
    /// whose conflict went away was granted. C's single waiter pass can leave one grantable
    /// until the next operation on its inode (plock-spec §2.8), so every inode first gets a
    /// no-op UNLOCK, until passes grant nothing more.
    pub(crate) fn check_waiters(&mut self) {
        let Some(&poker) = self
            .nodes
            .values()
            .find(|n| n.group.is_some())
            .map(|n| &n.id)
        else {
            return;
        };
        for _ in 0..4 {
            for number in 0..INODES {
                self.poke(poker, number);
            }
            self.settle();
        }
        let seed = self.seed;
        for n in self.nodes.values().filter(|n| n.group.is_some()) {
            let entries: Vec<_> = n.core.plocks().dump(0).collect();
            for w in entries.iter().filter(|e| e.waiting) {
                let blocked = entries.iter().any(|g| {
                    !g.waiting
                        && g.number == w.number
                        && (g.nodeid, g.owner) != (w.nodeid, w.owner)
                        && g.start <= w.end
                        && w.start <= g.end
                        && (g.ex || w.ex)
                });
                assert!(
                    blocked,
                    "seed {seed}: node {}: waiter {w:?} could be granted\n{}",
                    n.id,
                    n.core.plocks().dump_text()
                );
            }
        }
    }

    /// Native counts of every node, live or gone.
    /// Blocking requests of the nodes still here answered EDEADLK.
    pub(crate) fn deadlocks(&self) -> u64 {
        let refused = |n: &Node| {
            n.procs
                .requests
                .values()
                .filter(|p| p.rv == Some(-dlm_proto::errno::EDEADLK))
                .count() as u64
        };
        self.nodes.values().map(refused).sum()
    }

    pub(crate) fn native_stats(&self) -> NativeStats {
        let mut t = self.stats;
        for n in self.nodes.values() {
            let s = n.core.native_stats();
            t.local += s.local;
            t.recalls += s.recalls;
        }
        t
    }

    /// Every node sends the STATEs of its decisions (without periodic syncs a replica's
    /// copy of another's resource is older; the whole-table checks compare after this).
    pub(crate) fn sync_all(&mut self) {
        let seed = self.seed;
        let clock_ms = self.clock * 1000;
        for node in self.nodes.values_mut().filter(|x| x.group.is_some()) {
            let a = node.core.sync(clock_ms);
            Self::perform(node, a, seed);
        }
        self.settle();
    }

    /// A plock dump on node `b`: when it must wait, the wait ends once the cluster settles
    /// (nothing else asked meanwhile), and then `b` shows every resource another node
    /// decides as that node has it — with periodic syncs off, only the SYNC brings that.
    pub(crate) fn check_fresh(&mut self, b: u32) {
        let seed = self.seed;
        let now_ms = self.clock * 1000;
        let Some(node) = self.nodes.get_mut(&b) else {
            return;
        };
        if node.group.is_none() || node.side != 0 || receiving(node) {
            return;
        }
        let mut out = Vec::new();
        let waits = node.core.want_fresh(now_ms, &mut out);
        Self::perform(node, out, seed);
        let seen = node.fresh;
        self.settle();
        let node = &self.nodes[&b];
        if !waits {
            return;
        }
        assert_eq!(
            node.fresh,
            seen + 1,
            "seed {seed}: node {b}'s dump never went ahead"
        );
        for number in 0..INODES {
            let Some(x) = node.core.owner_of(number).filter(|&x| x != b) else {
                continue;
            };
            let lines = |n: &Node| -> Vec<String> {
                n.core
                    .plocks()
                    .dump_of(number, 0)
                    .map(|e| e.to_string())
                    .collect()
            };
            assert_eq!(
                lines(node),
                lines(&self.nodes[&x]),
                "seed {seed}: node {b}'s dump of inode {number}, which node {x} decides"
            );
        }
    }

    /// Whole-cluster checks at a quiet moment (no partition, every live node started).
    pub(crate) fn check_quiet(&self) {
        let seed = self.seed;
        let live: Vec<&Node> = self.nodes.values().filter(|n| n.group.is_some()).collect();
        let Some(first) = live.first() else { return };
        // ownership is replicated: every member, a joiner too, names the same owners
        for n in &live {
            for number in 0..INODES {
                assert_eq!(
                    n.core.owner_of(number),
                    first.core.owner_of(number),
                    "seed {seed}: nodes {} and {} disagree on who owns inode {number}",
                    n.id,
                    first.id
                );
            }
        }
        for n in &live {
            assert!(
                !n.core.kernel_stopped(),
                "seed {seed}: node {} still stopped when quiet: {:?}",
                n.id,
                n.core.report().info
            );
            assert_eq!(
                n.core.plocks().digest(),
                first.core.plocks().digest(),
                "seed {seed}: node {} and node {} disagree\n{}\nvs\n{}",
                n.id,
                first.id,
                n.core.plocks().dump_text(),
                first.core.plocks().dump_text()
            );
        }
        // one table printed alike on every node: the dump's order too, and outside native
        // mode the table's own (C's creation order, which C peers print and receive)
        let dump = |n: &Node| -> String {
            let t = n.core.plocks();
            n.core
                .dump_plan()
                .into_iter()
                .flat_map(|number| t.dump_of(number, 0))
                .map(|e| e.to_string())
                .collect()
        };
        for n in &live {
            assert_eq!(
                dump(n),
                dump(first),
                "seed {seed}: node {} and node {} print different dumps",
                n.id,
                first.id
            );
            if !n.core.is_native() {
                assert_eq!(
                    n.core.plocks().resource_numbers(),
                    first.core.plocks().resource_numbers(),
                    "seed {seed}: node {} and node {}: resources in different orders",
                    n.id,
                    first.id
                );
            }
        }
        let table = first.core.plocks();
        let mut covered: BTreeMap<(u32, u64, u64), u64> = BTreeMap::new();
        let mut waiting: BTreeSet<(u32, u32)> = BTreeSet::new();
        for e in table.dump(0) {
            let node = u32::try_from(e.nodeid).expect("nodeid");
            if e.waiting {
                waiting.insert((node, e.pid));
            } else {
                *covered.entry((node, e.owner, e.number)).or_insert(0) |= mask(e.start, e.end);
            }
        }
        for n in &live {
            for ((owner, ino), bits) in &n.procs.held {
                let have = covered.get(&(n.id, *owner, *ino)).copied().unwrap_or(0);
                if have != *bits {
                    let hist: Vec<String> = n
                        .procs
                        .requests
                        .values()
                        .filter(|p| p.info.owner == *owner && p.info.number == *ino)
                        .map(|p| {
                            format!(
                                "{:?} {}-{} ex {} wait {} close {} -> {:?} x{}",
                                p.info.op,
                                p.info.start,
                                p.info.end,
                                p.info.ex,
                                p.info.wait,
                                p.info.flags.close(),
                                p.rv,
                                p.replies
                            )
                        })
                        .collect();
                    panic!(
                        "seed {seed}: node {} owner {owner} inode {ino}: table {have:#b} replies {bits:#b}\n{}\n{}",
                        n.id,
                        hist.join("\n"),
                        table.dump_text()
                    );
                }
            }
            for ((node, owner, ino), bits) in &covered {
                if *node == n.id {
                    let replied = n.procs.held.get(&(*owner, *ino)).copied().unwrap_or(0);
                    assert_eq!(
                        *bits, replied,
                        "seed {seed}: phantom lock of node {node} owner {owner} inode {ino}"
                    );
                }
            }
            for p in n.procs.requests.values() {
                if p.info.flags.close() {
                    continue;
                }
                if p.replies == 0 {
                    assert!(
                        p.info.op == PlockOp::LOCK
                            && p.info.wait
                            && waiting.contains(&(n.id, p.info.pid)),
                        "seed {seed}: node {} never answered {:?}",
                        n.id,
                        p.info
                    );
                }
            }
        }
    }
}

/// Node `node`'s kernel hands it `info`: the model remembers it, the core takes it.
pub(crate) fn submit(node: &mut Node, info: PlockInfo, now_ms: u64) -> Vec<Action> {
    node.procs.asked(info.pid, info);
    let mut a = Vec::new();
    node.core.request(now_ms, &info, &mut a);
    a
}

/// Applies the CLOSEs at the front of a node's queue of non-blocking requests (all of them
/// when the cluster is quiet): the owner's bytes on that file are gone.
pub(crate) fn drain_closes(node: &mut Node, all: bool) {
    node.procs.drain_closes(node.id, all);
}

/// What the processes of the quorate side were told they hold never conflicts (no range is
/// granted twice). A node cut off answers nothing at all (checked in `perform`); what it held
/// before is void once the majority removed it, as it is then fenced or killed.
pub(crate) fn check_grants(sim: &Sim) {
    let quorate = sim
        .nodes
        .values()
        .filter(|n| n.group.is_some() && n.side == 0)
        .map(|n| (n.id, &n.procs));
    if let Err(e) = grants_clash(quorate) {
        panic!("seed {}: {e}", sim.seed);
    }
}

/// No two granted locks of different owners overlap with one of them a write lock.
pub(crate) fn check_table(node: &Node, seed: u64) {
    if let Err(e) = table_clash(node.core.plocks()) {
        panic!("seed {seed}: node {} granted {e}", node.id);
    }
}

impl Sim {
    /// `configured` nodes, none joined yet; those in `plain` do not offer native mode.
    pub(crate) fn new(seed: u64, configured: u32, plain: BTreeSet<u32>) -> Self {
        Self {
            bus: SimBus::new(seed),
            nodes: BTreeMap::new(),
            configured,
            serial: 0,
            seed,
            clock: 1,
            fence: FenceFacts::default(),
            plain,
            older: BTreeSet::new(),
            turns: 0,
            sync_every: Some(3),
            deadlock: false,
            stats: NativeStats::default(),
            outside: 0,
        }
    }

    /// Node `id`'s process `id`0 asks to lock (write) or unlock byte `byte` of `number`,
    /// without waiting; the request goes to the bus at once (not yet ordered). Its serial.
    pub(crate) fn ask_now(&mut self, id: u32, op: PlockOp, number: u64, byte: u64) -> u32 {
        let info = self.non_blocking(id, op, number, byte, 0);
        let node = self.nodes.get_mut(&id).expect("joined");
        let mut a = submit(node, info, self.clock * 1000);
        a.extend(node.core.flush());
        Self::perform(node, a, self.seed);
        info.pid
    }
}

impl Sim {
    /// Node `id`'s process `proc` asks for `op` on `number` bytes `start..=end`; the
    /// request reaches the core (not yet ordered). Its serial.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn ask(
        &mut self,
        id: u32,
        proc: u64,
        op: PlockOp,
        ex: bool,
        wait: bool,
        number: u64,
        range: (u64, u64),
    ) -> u32 {
        self.serial += 1;
        let node = self.nodes.get_mut(&id).expect("joined");
        let info = PlockInfo {
            version: PLOCK_VERSION,
            op,
            ex,
            wait,
            flags: PlockFlags(0),
            pid: self.serial,
            nodeid: i32::try_from(id).expect("small"),
            rv: 0,
            fsid: node.core.global_id(),
            number,
            start: range.0,
            end: range.1,
            owner: u64::from(id) * 10 + proc,
        };
        if op == PlockOp::UNLOCK {
            // the process lets go when it asks
            let m = mask(range.0, range.1);
            let c = node
                .procs
                .claim
                .entry((info.owner, number))
                .or_insert((0, 0));
            c.0 &= !m;
            c.1 &= !m;
        }
        let mut a = submit(node, info, self.clock * 1000);
        a.extend(node.core.flush());
        Self::perform(node, a, self.seed);
        info.pid
    }

    /// Node `id` leaves the lockspace (its kernel released it).
    pub(crate) fn leave(&mut self, id: u32) {
        let node = self.nodes.get_mut(&id).expect("joined");
        node.core.leave();
        if let Some(g) = node.group.as_mut() {
            g.leave();
        }
    }
}

impl Sim {
    /// Node `id` sends the STATEs of its decisions now.
    pub(crate) fn sync_node(&mut self, id: u32) {
        let seed = self.seed;
        let clock_ms = self.clock * 1000;
        let node = self.nodes.get_mut(&id).expect("joined");
        let a = node.core.sync(clock_ms);
        Self::perform(node, a, seed);
    }

    /// Messages node `id` sent that the bus has not ordered yet.
    pub(crate) fn queued(&self, id: u32) -> usize {
        self.nodes[&id]
            .group
            .as_ref()
            .map_or(0, |g| g.send_queue_len())
    }

    /// Node `id` asks for a plock dump: whether it waits for the owners' STATEs.
    pub(crate) fn want_fresh(&mut self, id: u32) -> bool {
        let seed = self.seed;
        let now_ms = self.clock * 1000;
        let node = self.nodes.get_mut(&id).expect("joined");
        let mut out = Vec::new();
        let waits = node.core.want_fresh(now_ms, &mut out);
        out.extend(node.core.flush());
        Self::perform(node, out, seed);
        waits
    }

    /// Every live node's CLOSEs take effect in the model (the cluster is quiet).
    pub(crate) fn drain_all(&mut self) {
        for node in self.nodes.values_mut().filter(|x| x.group.is_some()) {
            drain_closes(node, true);
        }
    }
}
