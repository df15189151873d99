//! The plock log behind `dlm_tool log_plock`, kept compactly: the two lines every plock
//! request makes (`read plock` on the node that read it, `receive plock` on every node) are
//! stored as records and formatted only when dumped. The dump is byte for byte what C's
//! 1 MiB text ring would hold: the retained records always make at least 1 MiB of text
//! once that much was logged, and the dump keeps the last 1 MiB (so it may start mid-line,
//! as C's).
//!
//! A push is a few stores: no line length is worked out (the ring keeps records while a
//! lower bound of their text, [`MIN_PLOCK_LINE`] bytes each, still falls short of 1 MiB
//! without the oldest, so it holds up to twice the records it needs), and the lockspace's
//! name is a small index, not a reference count to bump and drop. Under emulation (qemu's
//! TCG) every line of code and page a request's path touches costs, and this path runs
//! three times per lock-passing step on each node (docs/BENCHMARKS.md, session 36).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

use dlm_proto::kernel::{PlockInfo, PlockOp};

use super::PlockWords;

/// Which of C's two plock lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlockLine {
    /// `read plock ...` (`process_plocks`).
    Read,
    /// `receive plock ...` (`_receive_plock`).
    Receive,
}

/// The shortest text a record can make: `0  read plock 0 UN - 0-0 0/0/0 w 0` and its
/// newline (one-digit fields, an empty name). A bound, so never more than the truth.
const MIN_PLOCK_LINE: usize = 35;

/// Lockspace names kept before those no record uses any more are dropped.
const NAMES_KEPT: usize = 64;

/// What one plock line shows of its request.
#[derive(Debug, Clone)]
struct PlockRecord {
    number: u64,
    start: u64,
    end: u64,
    owner: u64,
    /// Monotonic seconds (u32: 136 years of uptime).
    secs: u32,
    nodeid: i32,
    pid: u32,
    /// The lockspace's name: an index into [`PlockRing::names`].
    name: u32,
    op: PlockOp,
    /// [`Self::RECEIVE`], [`Self::EX`], [`Self::WAIT`].
    bits: u8,
}

impl PlockRecord {
    const RECEIVE: u8 = 1;
    const EX: u8 = 2;
    const WAIT: u8 = 4;

    fn new(secs: u64, name: u32, line: PlockLine, info: &PlockInfo) -> Self {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        Self {
            number: info.number,
            start: info.start,
            end: info.end,
            owner: info.owner,
            secs: u32::try_from(secs).unwrap_or(u32::MAX),
            nodeid: info.nodeid,
            pid: info.pid,
            name,
            op: info.op,
            bits: bit(line == PlockLine::Receive, Self::RECEIVE)
                | bit(info.ex, Self::EX)
                | bit(info.wait, Self::WAIT),
        }
    }

    fn line(&self) -> PlockLine {
        if self.bits & Self::RECEIVE == 0 {
            PlockLine::Read
        } else {
            PlockLine::Receive
        }
    }

    /// The request's fields the line shows (C logs these of its `dlm_plock_info`).
    fn info(&self) -> PlockInfo {
        PlockInfo {
            version: dlm_proto::kernel::PLOCK_VERSION,
            op: self.op,
            ex: self.bits & Self::EX != 0,
            wait: self.bits & Self::WAIT != 0,
            flags: dlm_proto::kernel::PlockFlags(0),
            pid: self.pid,
            nodeid: self.nodeid,
            rv: 0,
            fsid: 0,
            number: self.number,
            start: self.start,
            end: self.end,
            owner: self.owner,
        }
    }
}

/// A line of the ring: a request's record, or any other line's text.
#[derive(Debug, Clone)]
enum Entry {
    Plock(PlockRecord),
    Text(Box<str>),
}

impl Entry {
    /// The line's text, as C's `log_plock` would have written it.
    fn write(&self, names: &[Arc<str>], out: &mut String) {
        match self {
            Self::Plock(r) => {
                let what = match r.line() {
                    PlockLine::Read => "read",
                    PlockLine::Receive => "receive",
                };
                let ls = names.get(r.name as usize).map_or("", |n| &**n);
                // C's line holds the name's first 32 bytes (a name cut mid-character is
                // written whole, as format_line does)
                let name = ls.get(..32).unwrap_or(ls);
                let _ = writeln!(
                    out,
                    "{} {name} {what} plock {}",
                    r.secs,
                    PlockWords(&r.info())
                );
            }
            Self::Text(t) => out.push_str(t),
        }
    }

    /// At most the length of [`Self::write`]'s text, without formatting it.
    fn min_len(&self) -> usize {
        match self {
            Self::Plock(_) => MIN_PLOCK_LINE,
            Self::Text(t) => t.len(),
        }
    }
}

/// The plock log: the newest lines, at least `cap` bytes of their text once that much was
/// logged.
#[derive(Debug)]
pub struct PlockRing {
    entries: VecDeque<Entry>,
    /// The entries' [`Entry::min_len`]s, summed.
    least: usize,
    cap: usize,
    /// An entry was dropped: more than `cap` bytes were logged.
    dropped: bool,
    /// The lockspace names records point at; `last` the one pushed last.
    names: Vec<Arc<str>>,
    last: usize,
}

impl Default for PlockRing {
    fn default() -> Self {
        Self::with_capacity(super::RING_SIZE)
    }
}

impl PlockRing {
    /// A ring that dumps at most `cap` bytes (tests use small ones).
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            least: 0,
            cap: cap.max(1),
            dropped: false,
            names: Vec::new(),
            last: 0,
        }
    }

    fn push_entry(&mut self, e: Entry) {
        self.least += e.min_len();
        self.entries.push_back(e);
        // drop the oldest while the rest still surely make a full ring
        while let Some(first) = self.entries.front().map(Entry::min_len) {
            if self.least - first < self.cap {
                break;
            }
            self.least -= first;
            self.entries.pop_front();
            self.dropped = true;
        }
    }

    /// One plock request's line, as a record.
    pub fn push_plock(&mut self, secs: u64, ls: &Arc<str>, line: PlockLine, info: &PlockInfo) {
        let name = self.name_of(ls);
        self.push_entry(Entry::Plock(PlockRecord::new(secs, name, line, info)));
    }

    /// Any other line (with its newline).
    pub fn push_text(&mut self, line: &str) {
        self.push_entry(Entry::Text(line.into()));
    }

    /// The index of `ls` among the names, found by pointer (no reference count is touched
    /// for a name already there: the last one's first, as every request of a busy
    /// lockspace finds it). Two `Arc`s of one name are two entries, both showing it.
    fn name_of(&mut self, ls: &Arc<str>) -> u32 {
        let same = |n: &Arc<str>| Arc::ptr_eq(n, ls);
        let i = if self.names.get(self.last).is_some_and(same) {
            self.last
        } else if let Some(i) = self.names.iter().position(same) {
            i
        } else {
            if self.names.len() >= NAMES_KEPT {
                self.forget_unused_names();
            }
            self.names.push(ls.clone());
            self.names.len() - 1
        };
        self.last = i;
        u32::try_from(i).unwrap_or(u32::MAX)
    }

    /// Drops the names no record points at (lockspaces long gone), renumbering the rest.
    fn forget_unused_names(&mut self) {
        let mut used = vec![false; self.names.len()];
        for e in &self.entries {
            if let Entry::Plock(r) = e {
                if let Some(u) = used.get_mut(r.name as usize) {
                    *u = true;
                }
            }
        }
        let mut new_index = vec![0u32; self.names.len()];
        let mut kept = Vec::with_capacity(self.names.len());
        for (i, name) in std::mem::take(&mut self.names).into_iter().enumerate() {
            if used[i] {
                new_index[i] = u32::try_from(kept.len()).unwrap_or(u32::MAX);
                kept.push(name);
            }
        }
        for e in &mut self.entries {
            if let Entry::Plock(r) = e {
                r.name = new_index.get(r.name as usize).copied().unwrap_or(u32::MAX);
            }
        }
        self.names = kept;
        self.last = usize::MAX;
    }

    /// The text C's ring would return: once the ring has filled, its last `cap` bytes;
    /// before that everything but the final newline; empty when fresh.
    pub fn contents(&self) -> Vec<u8> {
        let mut s = String::new();
        for e in &self.entries {
            e.write(&self.names, &mut s);
        }
        let mut v = s.into_bytes();
        if self.dropped || v.len() >= self.cap {
            let cut = v.len().saturating_sub(self.cap);
            v.drain(..cut);
        } else {
            v.pop();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Ring;
    use dlm_proto::kernel::{PLOCK_VERSION, PlockFlags, PlockOp};

    fn info(op: PlockOp, i: u64) -> PlockInfo {
        PlockInfo {
            version: PLOCK_VERSION,
            op,
            ex: i % 2 == 0,
            wait: i % 3 == 0,
            flags: PlockFlags(0),
            pid: u32::try_from(i * 7).expect("small"),
            nodeid: i32::try_from(i % 4).expect("small") - 1,
            rv: 0,
            fsid: 1,
            number: i * 0x1234,
            start: i,
            end: if i % 5 == 0 { u64::MAX } else { i * 3 },
            owner: i << 20,
        }
    }

    /// A record is a cache line at most (64 bytes; a whole request and its length took
    /// 104): a ring holds up to ~30,000 of them (1 MiB over [`MIN_PLOCK_LINE`]), ~2 MiB.
    #[test]
    fn a_record_fits_a_cache_line() {
        assert!(size_of::<Entry>() <= 64, "{}", size_of::<Entry>());
    }

    /// [`MIN_PLOCK_LINE`] is what the shortest record writes (so a bound the ring may
    /// count on), and a record's text is not cut short by it.
    #[test]
    fn the_shortest_line_is_the_bound() {
        let mut rec = PlockRing::with_capacity(4096);
        let ls: Arc<str> = Arc::from("");
        let shortest = PlockInfo {
            op: PlockOp::UNLOCK,
            ex: false,
            wait: false,
            pid: 0,
            nodeid: 0,
            number: 0,
            start: 0,
            end: 0,
            owner: 0,
            ..info(PlockOp::UNLOCK, 0)
        };
        rec.push_plock(0, &ls, PlockLine::Read, &shortest);
        // the dump of a ring not yet full leaves the final newline out
        assert_eq!(rec.contents().len() + 1, MIN_PLOCK_LINE);
        assert_eq!(
            String::from_utf8_lossy(&rec.contents()),
            "0  read plock 0 UN - 0-0 0/0/0 w 0"
        );
    }

    /// Names no record shows any more are let go (a daemon that joins and leaves
    /// lockspaces for months keeps only the names its ring still shows).
    #[test]
    fn names_of_gone_records_are_let_go() {
        let mut rec = PlockRing::with_capacity(200);
        for i in 0..1000u64 {
            let ls: Arc<str> = Arc::from(format!("ls{i}"));
            rec.push_plock(i, &ls, PlockLine::Receive, &info(PlockOp::LOCK, i));
            assert!(
                rec.names.len() <= NAMES_KEPT,
                "{} after {i}",
                rec.names.len()
            );
        }
        assert!(String::from_utf8_lossy(&rec.contents()).contains(" ls999 receive plock "));
    }

    /// The records dump exactly the bytes C's text ring holds, before and after wrapping,
    /// for every op and field width.
    #[test]
    fn same_bytes_as_the_text_ring() {
        for cap in [64, 300, 4096] {
            let mut text = Ring::with_capacity(cap);
            let mut rec = PlockRing::with_capacity(cap);
            // a long name, a short one, an empty one, a second Arc of the first, and
            // fresh names now and then (more than NAMES_KEPT of them over the run)
            let long: Arc<str> = Arc::from("a_lockspace_name_longer_than_thirty_two_chars");
            let fixed = [
                long.clone(),
                Arc::from("b"),
                Arc::from(""),
                Arc::from(&*long),
            ];
            for i in 0..400u64 {
                let ls = if i % 3 == 0 {
                    Arc::from(format!("ls{i}"))
                } else {
                    fixed[usize::try_from(i % 4).expect("small")].clone()
                };
                let op = [PlockOp::LOCK, PlockOp::UNLOCK, PlockOp::GET, PlockOp(9)]
                    [usize::try_from(i % 4).expect("small")];
                let line = if i % 2 == 0 {
                    PlockLine::Read
                } else {
                    PlockLine::Receive
                };
                let what = if line == PlockLine::Read {
                    "read"
                } else {
                    "receive"
                };
                let inf = info(op, i);
                let t = crate::log::format_line(
                    i * 1000,
                    Some(&ls),
                    format_args!("{what} plock {}", PlockWords(&inf)),
                );
                text.push(t.as_bytes());
                rec.push_plock(i * 1000, &ls, line, &inf);
                if i % 17 == 0 {
                    let other = format!("{i} other line\n");
                    text.push(other.as_bytes());
                    rec.push_text(&other);
                }
                assert_eq!(
                    String::from_utf8_lossy(&rec.contents()),
                    String::from_utf8_lossy(&text.contents()),
                    "cap {cap} after {i}"
                );
            }
        }
    }
}
