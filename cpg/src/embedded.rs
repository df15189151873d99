//! A group with exactly one member and no corosync: for a single-node cluster and the
//! demo. Same semantics as a one-node CPG: our own messages come back in order, join and
//! leave produce the confchgs a lone corosync member sees.

use std::collections::VecDeque;

use crate::{CpgError, Event, Group, Member, Reason, RingId};

/// The embedded single-member group.
#[derive(Debug)]
pub struct EmbeddedGroup {
    nodeid: u32,
    pid: u32,
    events: VecDeque<Event>,
    joined: bool,
}

impl EmbeddedGroup {
    /// Joins as node `nodeid`, process `pid`. With `initial_totem` the ring comes first.
    pub fn join(nodeid: u32, pid: u32, initial_totem: bool) -> Self {
        let me = Member {
            nodeid,
            pid,
            reason: Reason::Join,
        };
        let mut events = VecDeque::new();
        if initial_totem {
            events.push_back(Event::Totem {
                ring: RingId { nodeid, seq: 1 },
                members: vec![nodeid],
            });
        }
        events.push_back(Event::ConfChg {
            members: vec![me],
            left: Vec::new(),
            joined: vec![me],
        });
        Self {
            nodeid,
            pid,
            events,
            joined: true,
        }
    }

    /// Leaves: the confchg with ourselves in the left list arrives, then the group is closed.
    pub fn leave(&mut self) {
        if self.joined {
            self.joined = false;
            self.events.push_back(Event::ConfChg {
                members: Vec::new(),
                left: vec![Member {
                    nodeid: self.nodeid,
                    pid: self.pid,
                    reason: Reason::Leave,
                }],
                joined: Vec::new(),
            });
        }
    }
}

impl Group for EmbeddedGroup {
    fn local_nodeid(&self) -> u32 {
        self.nodeid
    }

    fn mcast(&mut self, payload: &[u8]) -> Result<(), CpgError> {
        if !self.joined {
            return Err(CpgError::Closed);
        }
        self.events.push_back(Event::Deliver {
            nodeid: self.nodeid,
            pid: self.pid,
            payload: payload.to_vec(),
        });
        Ok(())
    }

    fn flush(&mut self) -> Result<bool, CpgError> {
        Ok(true)
    }

    fn dispatch(&mut self) -> Result<(), CpgError> {
        Ok(())
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn send_queue_len(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_member_sees_join_own_messages_and_leave() {
        let mut g = EmbeddedGroup::join(7, 100, true);
        g.mcast(b"a").expect("joined");
        g.mcast(b"b").expect("joined");
        g.leave();
        assert!(g.mcast(b"c").is_err());
        let evs: Vec<Event> = std::iter::from_fn(|| g.poll_event()).collect();
        assert!(matches!(&evs[0], Event::Totem { members, .. } if members == &[7]));
        assert!(matches!(&evs[1], Event::ConfChg { joined, .. } if joined[0].nodeid == 7));
        assert_eq!(
            evs[2],
            Event::Deliver {
                nodeid: 7,
                pid: 100,
                payload: b"a".to_vec()
            }
        );
        assert!(matches!(&evs[3], Event::Deliver { payload, .. } if payload == b"b"));
        assert!(matches!(&evs[4], Event::ConfChg { left, members, .. }
            if members.is_empty() && left[0].reason == Reason::Leave));
        assert_eq!(evs.len(), 5);
    }
}
