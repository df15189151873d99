//! A deterministic, seeded, in-process CPG for many nodes: total order, virtual synchrony,
//! crash, process exit, join, leave, partition and merge, and delays (messages wait in
//! their sender's queue until the bus orders them, in an order the seed chooses).
//!
//! Everything is decided by the seed: the same seed and the same calls give the same
//! trace. No clock, no threads, no unseeded randomness. The bus is single-threaded
//! (`Rc<RefCell<_>>`); a simulation drives it with [`SimBus::step`].

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use crate::{CpgError, Event, Group, Member, Reason, RingId};

type MemberKey = (u32, u32); // (nodeid, pid)

#[derive(Debug, Default)]
struct MemberState {
    events: VecDeque<Event>,
    pending: VecDeque<Vec<u8>>,
}

#[derive(Debug, Default)]
struct GroupState {
    members: BTreeMap<MemberKey, MemberState>,
    /// Event queues of members that left, readable until drained.
    departed: BTreeMap<MemberKey, VecDeque<Event>>,
}

#[derive(Debug)]
struct BusState {
    rng: u64,
    groups: BTreeMap<Vec<u8>, GroupState>,
    /// Partition side of each node (0 when whole).
    side: BTreeMap<u32, u32>,
    crashed: BTreeSet<u32>,
    next_pid: u32,
    ring_seq: u64,
    /// Every ordered delivery, for tests: (group, sender, payload).
    trace: Vec<(Vec<u8>, u32, Vec<u8>)>,
}

impl BusState {
    fn next(&mut self) -> u64 {
        // xorshift64*: fixed, seedable
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn side_of(&self, node: u32) -> u32 {
        self.side.get(&node).copied().unwrap_or(0)
    }

    fn view(&self, group: &GroupState, side: u32) -> Vec<Member> {
        group
            .members
            .keys()
            .filter(|(n, _)| self.side_of(*n) == side)
            .map(|&(nodeid, pid)| Member {
                nodeid,
                pid,
                reason: Reason::Join,
            })
            .collect()
    }

    fn nodes_on(&self, side: u32) -> Vec<u32> {
        let mut nodes: BTreeSet<u32> = self
            .groups
            .values()
            .flat_map(|g| g.members.keys().map(|k| k.0))
            .filter(|&n| self.side_of(n) == side && !self.crashed.contains(&n))
            .collect();
        nodes.extend(
            self.side
                .iter()
                .filter(|(_, s)| **s == side)
                .map(|(n, _)| *n),
        );
        nodes.retain(|n| !self.crashed.contains(n));
        nodes.into_iter().collect()
    }

    /// Sends a confchg to every member of `name` on `side`.
    fn announce(&mut self, name: &[u8], side: u32, left: &[Member], joined: &[Member]) {
        let Some(group) = self.groups.get(name) else {
            return;
        };
        let members = self.view(group, side);
        let event = Event::ConfChg {
            members,
            left: left.to_vec(),
            joined: joined.to_vec(),
        };
        let keys: Vec<MemberKey> = group
            .members
            .keys()
            .filter(|(n, _)| self.side_of(*n) == side)
            .copied()
            .collect();
        if let Some(group) = self.groups.get_mut(name) {
            for k in keys {
                if let Some(m) = group.members.get_mut(&k) {
                    m.events.push_back(event.clone());
                }
            }
        }
    }

    fn totem(&mut self, side: u32) {
        self.ring_seq += 1;
        let nodes = self.nodes_on(side);
        let ring = RingId {
            nodeid: nodes.first().copied().unwrap_or(0),
            seq: self.ring_seq,
        };
        let event = Event::Totem {
            ring,
            members: nodes,
        };
        let sides: Vec<(Vec<u8>, MemberKey)> = self
            .groups
            .iter()
            .flat_map(|(name, g)| g.members.keys().map(move |k| (name.clone(), *k)))
            .filter(|(_, (n, _))| self.side_of(*n) == side)
            .collect();
        for (name, k) in sides {
            if let Some(m) = self
                .groups
                .get_mut(&name)
                .and_then(|g| g.members.get_mut(&k))
            {
                m.events.push_back(event.clone());
            }
        }
    }
}

/// The shared simulated bus.
#[derive(Debug, Clone)]
pub struct SimBus {
    state: Rc<RefCell<BusState>>,
}

impl SimBus {
    /// A bus whose every choice follows `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: Rc::new(RefCell::new(BusState {
                rng: seed ^ 0x9E37_79B9_7F4A_7C15 | 1,
                groups: BTreeMap::new(),
                side: BTreeMap::new(),
                crashed: BTreeSet::new(),
                next_pid: 1000,
                ring_seq: 0,
                trace: Vec::new(),
            })),
        }
    }

    /// A process on `nodeid` joins group `name`; every member on its side (itself
    /// included) sees the confchg. The joiner first gets the current ring.
    pub fn join(&self, nodeid: u32, name: &[u8]) -> Result<SimGroup, CpgError> {
        let mut s = self.state.borrow_mut();
        if s.crashed.contains(&nodeid) {
            return Err(CpgError::Closed);
        }
        s.next_pid += 1;
        let pid = s.next_pid;
        let side = s.side_of(nodeid);
        let nodes = {
            let mut n = s.nodes_on(side);
            if !n.contains(&nodeid) {
                n.push(nodeid);
                n.sort_unstable();
            }
            n
        };
        let ring = RingId {
            nodeid: nodes.first().copied().unwrap_or(nodeid),
            seq: s.ring_seq,
        };
        let group = s.groups.entry(name.to_vec()).or_default();
        let mut me = MemberState::default();
        me.events.push_back(Event::Totem {
            ring,
            members: nodes,
        });
        group.members.insert((nodeid, pid), me);
        let joined = [Member {
            nodeid,
            pid,
            reason: Reason::Join,
        }];
        s.announce(name, side, &[], &joined);
        Ok(SimGroup {
            bus: self.clone(),
            name: name.to_vec(),
            nodeid,
            pid,
        })
    }

    /// Orders one pending message, chosen by the seed among the senders with pending
    /// messages, and delivers it to every member on the sender's side. False when idle.
    pub fn step(&self) -> bool {
        let mut s = self.state.borrow_mut();
        let ready: Vec<(Vec<u8>, MemberKey)> = s
            .groups
            .iter()
            .flat_map(|(name, g)| {
                g.members
                    .iter()
                    .filter(|(_, m)| !m.pending.is_empty())
                    .map(move |(k, _)| (name.clone(), *k))
            })
            .collect();
        if ready.is_empty() {
            return false;
        }
        let pick = usize::try_from(s.next() % ready.len() as u64).unwrap_or(0);
        let (name, key) = ready[pick].clone();
        let side = s.side_of(key.0);
        let Some(payload) = s
            .groups
            .get_mut(&name)
            .and_then(|g| g.members.get_mut(&key))
            .and_then(|m| m.pending.pop_front())
        else {
            return false;
        };
        s.trace.push((name.clone(), key.0, payload.clone()));
        let receivers: Vec<MemberKey> = s.groups[&name]
            .members
            .keys()
            .filter(|(n, _)| s.side_of(*n) == side)
            .copied()
            .collect();
        if let Some(g) = s.groups.get_mut(&name) {
            for k in receivers {
                if let Some(m) = g.members.get_mut(&k) {
                    m.events.push_back(Event::Deliver {
                        nodeid: key.0,
                        pid: key.1,
                        payload: payload.clone(),
                    });
                }
            }
        }
        true
    }

    /// Steps until nothing is pending; returns how many messages were ordered.
    pub fn run_until_idle(&self) -> usize {
        let mut n = 0;
        while self.step() {
            n += 1;
        }
        n
    }

    fn remove_node(&self, nodeid: u32, reason: Reason) {
        let mut s = self.state.borrow_mut();
        let side = s.side_of(nodeid);
        let names: Vec<Vec<u8>> = s.groups.keys().cloned().collect();
        for name in names {
            let gone: Vec<MemberKey> = s.groups[&name]
                .members
                .keys()
                .filter(|(n, _)| *n == nodeid)
                .copied()
                .collect();
            if gone.is_empty() {
                continue;
            }
            if let Some(g) = s.groups.get_mut(&name) {
                for k in &gone {
                    g.members.remove(k);
                }
            }
            let left: Vec<Member> = gone
                .iter()
                .map(|&(n, p)| Member {
                    nodeid: n,
                    pid: p,
                    reason,
                })
                .collect();
            s.announce(&name, side, &left, &[]);
        }
        if reason == Reason::NodeDown {
            s.totem(side);
        }
    }

    /// The node fails: its processes vanish with their unordered messages; survivors see
    /// `NodeDown` at the same point of their streams.
    pub fn crash(&self, nodeid: u32) {
        self.state.borrow_mut().crashed.insert(nodeid);
        self.remove_node(nodeid, Reason::NodeDown);
    }

    /// The node's processes exit without leaving (reason `ProcDown`); the node stays.
    pub fn kill_processes(&self, nodeid: u32) {
        self.remove_node(nodeid, Reason::ProcDown);
    }

    /// A crashed node comes back (its processes must join again).
    pub fn restart(&self, nodeid: u32) {
        let mut s = self.state.borrow_mut();
        s.crashed.remove(&nodeid);
        let side = s.side_of(nodeid);
        s.totem(side);
    }

    /// Splits the cluster: each listed node goes to side `side`. Members that can no longer
    /// see each other get `NodeDown` confchgs, on both sides.
    pub fn partition(&self, nodes: &[u32], side: u32) {
        self.change_sides(nodes.iter().map(|&n| (n, side)).collect());
    }

    /// Heals every partition: members that see each other again get `NodeUp` joins.
    pub fn heal(&self) {
        let all: Vec<(u32, u32)> = {
            let s = self.state.borrow();
            s.side.keys().map(|&n| (n, 0)).collect()
        };
        self.change_sides(all);
    }

    fn change_sides(&self, moves: Vec<(u32, u32)>) {
        let mut s = self.state.borrow_mut();
        let before: BTreeMap<u32, u32> = s
            .groups
            .values()
            .flat_map(|g| g.members.keys().map(|k| k.0))
            .map(|n| (n, s.side_of(n)))
            .collect();
        for (n, side) in moves {
            s.side.insert(n, side);
        }
        let names: Vec<Vec<u8>> = s.groups.keys().cloned().collect();
        let mut sides_touched = BTreeSet::new();
        for name in names {
            let keys: Vec<MemberKey> = s.groups[&name].members.keys().copied().collect();
            // each observer sees what changed in its own view
            for &obs in &keys {
                let side_now = s.side_of(obs.0);
                let was = before.get(&obs.0).copied().unwrap_or(0);
                let mut left = Vec::new();
                let mut joined = Vec::new();
                for &other in &keys {
                    if other == obs {
                        continue;
                    }
                    let o_was = before.get(&other.0).copied().unwrap_or(0);
                    let o_now = s.side_of(other.0);
                    let saw = o_was == was;
                    let sees = o_now == side_now;
                    let m = |reason| Member {
                        nodeid: other.0,
                        pid: other.1,
                        reason,
                    };
                    if saw && !sees {
                        left.push(m(Reason::NodeDown));
                    } else if !saw && sees {
                        joined.push(m(Reason::NodeUp));
                    }
                }
                if left.is_empty() && joined.is_empty() {
                    continue;
                }
                sides_touched.insert(side_now);
                let members = s.view(&s.groups[&name], side_now);
                if let Some(m) = s
                    .groups
                    .get_mut(&name)
                    .and_then(|g| g.members.get_mut(&obs))
                {
                    m.events.push_back(Event::ConfChg {
                        members,
                        left,
                        joined,
                    });
                }
            }
        }
        for side in sides_touched {
            s.totem(side);
        }
    }

    /// Every message ordered so far: (group, sender node, payload).
    pub fn trace(&self) -> Vec<(Vec<u8>, u32, Vec<u8>)> {
        self.state.borrow().trace.clone()
    }
}

/// One member of a simulated group.
#[derive(Debug)]
pub struct SimGroup {
    bus: SimBus,
    name: Vec<u8>,
    nodeid: u32,
    pid: u32,
}

impl SimGroup {
    /// Our process id on the bus.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Leaves the group: the other members and we ourselves see `Leave`.
    pub fn leave(&mut self) {
        let mut s = self.bus.state.borrow_mut();
        let side = s.side_of(self.nodeid);
        let key = (self.nodeid, self.pid);
        let Some(mut me) = s
            .groups
            .get_mut(&self.name)
            .and_then(|g| g.members.remove(&key))
        else {
            return;
        };
        let left = [Member {
            nodeid: self.nodeid,
            pid: self.pid,
            reason: Reason::Leave,
        }];
        s.announce(&self.name, side, &left, &[]);
        me.events.push_back(Event::ConfChg {
            members: Vec::new(),
            left: left.to_vec(),
            joined: Vec::new(),
        });
        if let Some(g) = s.groups.get_mut(&self.name) {
            g.departed.insert(key, me.events);
        }
    }
}

impl Group for SimGroup {
    fn local_nodeid(&self) -> u32 {
        self.nodeid
    }

    fn mcast(&mut self, payload: &[u8]) -> Result<(), CpgError> {
        let mut s = self.bus.state.borrow_mut();
        if s.crashed.contains(&self.nodeid) {
            return Err(CpgError::Gone {
                call: "sim mcast",
                code: 2,
            });
        }
        let m = s
            .groups
            .get_mut(&self.name)
            .and_then(|g| g.members.get_mut(&(self.nodeid, self.pid)))
            .ok_or(CpgError::Closed)?;
        m.pending.push_back(payload.to_vec());
        Ok(())
    }

    fn flush(&mut self) -> Result<bool, CpgError> {
        Ok(true)
    }

    fn dispatch(&mut self) -> Result<(), CpgError> {
        if self.bus.state.borrow().crashed.contains(&self.nodeid) {
            return Err(CpgError::Gone {
                call: "sim dispatch",
                code: 2,
            });
        }
        Ok(())
    }

    fn poll_event(&mut self) -> Option<Event> {
        let mut s = self.bus.state.borrow_mut();
        let g = s.groups.get_mut(&self.name)?;
        let key = (self.nodeid, self.pid);
        match g.members.get_mut(&key) {
            Some(m) => m.events.pop_front(),
            None => g.departed.get_mut(&key).and_then(VecDeque::pop_front),
        }
    }

    fn send_queue_len(&self) -> usize {
        let s = self.bus.state.borrow();
        s.groups
            .get(&self.name)
            .and_then(|g| g.members.get(&(self.nodeid, self.pid)))
            .map_or(0, |m| m.pending.len())
    }
}
