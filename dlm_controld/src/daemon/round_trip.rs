//! How long corosync takes to bring each of our messages back to us
//! (`dlm_cpg_round_trip_seconds`): the hop of a request that C pays alike and that sets
//! the pace of a C-compatible lockspace. A group delivers one sender's messages in the order
//! they were sent (CPG's agreed order keeps each sender's FIFO), so the n-th message of ours
//! delivered is the n-th one sent: each send is numbered and stamped, and the stamp of the
//! same number is taken back at its delivery. Stamps are bounded: past [`STAMPS_MAX`] in
//! flight (a state transfer's burst) a message is numbered but not stamped, and its
//! delivery observes nothing.

use std::collections::VecDeque;

/// Stamps kept at most: beyond, messages go unobserved until the queue drains.
pub(crate) const STAMPS_MAX: usize = 1024;

/// Our messages in flight, numbered, with the stamp of those observed (`T`: a `Stamp`
/// in the daemon, a number in tests).
#[derive(Debug)]
pub(crate) struct RoundTrips<T> {
    sent: u64,
    delivered: u64,
    stamps: VecDeque<(u64, T)>,
}

impl<T> Default for RoundTrips<T> {
    fn default() -> Self {
        Self {
            sent: 0,
            delivered: 0,
            stamps: VecDeque::new(),
        }
    }
}

impl<T> RoundTrips<T> {
    /// A message of ours was handed to the group at `now`.
    pub(crate) fn sent(&mut self, now: T) {
        self.sent += 1;
        if self.stamps.len() < STAMPS_MAX {
            self.stamps.push_back((self.sent, now));
        }
    }

    /// A message of ours came back: when it was sent, if it was stamped.
    pub(crate) fn delivered(&mut self) -> Option<T> {
        // a delivery of ours that we never counted as sent (impossible unless a message
        // came back twice): it must not shift every later match
        if self.delivered == self.sent {
            return None;
        }
        self.delivered += 1;
        match self.stamps.front() {
            Some((n, _)) if *n == self.delivered => self.stamps.pop_front().map(|(_, t)| t),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_delivery_takes_its_own_send_stamp() {
        let mut r = RoundTrips::default();
        r.sent(10);
        r.sent(20);
        assert_eq!(r.delivered(), Some(10));
        r.sent(30);
        assert_eq!(r.delivered(), Some(20));
        assert_eq!(r.delivered(), Some(30));
        assert_eq!(r.delivered(), None, "nothing in flight");
        r.sent(40);
        assert_eq!(
            r.delivered(),
            Some(40),
            "still matched after a stray delivery"
        );
    }

    #[test]
    fn a_burst_past_the_bound_is_numbered_but_not_stamped() {
        let mut r = RoundTrips::default();
        for t in 0..STAMPS_MAX + 5 {
            r.sent(t);
        }
        r.sent(9999);
        for t in 0..STAMPS_MAX {
            assert_eq!(r.delivered(), Some(t));
        }
        for _ in 0..5 {
            assert_eq!(r.delivered(), None, "unstamped");
        }
        assert_eq!(r.delivered(), None, "sent while the stamps were full");
        r.sent(7);
        assert_eq!(r.delivered(), Some(7), "stamped again once drained");
    }
}
