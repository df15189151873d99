//! The plock log behind `dlm_tool log_plock`, kept compactly: the two lines every plock
//! request makes (`read plock` on the node that read it, `receive plock` on every node) are
//! stored as records and formatted only when dumped. The dump is byte for byte what C's
//! 1 MiB text ring would hold: the retained records always make at least 1 MiB of text
//! once that much was logged, and the dump keeps the last 1 MiB (so it may start mid-line,
//! as C's).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

use dlm_proto::kernel::PlockInfo;

use super::PlockWords;

/// Which of C's two plock lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlockLine {
    /// `read plock ...` (`process_plocks`).
    Read,
    /// `receive plock ...` (`_receive_plock`).
    Receive,
}

#[derive(Debug, Clone)]
enum Entry {
    Plock {
        secs: u64,
        ls: Arc<str>,
        line: PlockLine,
        info: PlockInfo,
    },
    Text(Box<str>),
}

/// The ring of records.
#[derive(Debug)]
pub struct PlockRing {
    entries: VecDeque<(Entry, usize)>,
    /// Bytes of text the entries make.
    bytes: usize,
    cap: usize,
    wrapped: bool,
}

impl Default for PlockRing {
    fn default() -> Self {
        Self::with_capacity(super::RING_SIZE)
    }
}

fn dec_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

fn hex_len(v: u64) -> usize {
    (64 - v.leading_zeros() as usize).div_ceil(4).max(1)
}

fn signed_len(v: i64) -> usize {
    dec_len(v.unsigned_abs()) + usize::from(v < 0)
}

impl Entry {
    fn write(&self, out: &mut String) {
        match self {
            Self::Plock {
                secs,
                ls,
                line,
                info,
            } => {
                let what = match line {
                    PlockLine::Read => "read",
                    PlockLine::Receive => "receive",
                };
                let name = ls.get(..32).unwrap_or(ls);
                let _ = writeln!(out, "{secs} {name} {what} plock {}", PlockWords(info));
            }
            Self::Text(t) => out.push_str(t),
        }
    }

    /// The length of [`Self::write`]'s text, without formatting it.
    fn len(&self) -> usize {
        match self {
            Self::Plock {
                secs,
                ls,
                line,
                info,
            } => {
                use dlm_proto::kernel::PlockOp;
                let name = ls.get(..32).unwrap_or(ls).len();
                let what = match line {
                    PlockLine::Read => 4,
                    PlockLine::Receive => 7,
                };
                let op = if info.op == PlockOp::GET { 3 } else { 2 };
                let ex = if info.op == PlockOp::UNLOCK || info.op == PlockOp::GET {
                    1
                } else {
                    2
                };
                // "<secs> <ls> <what> plock <num> <op> <ex> <s>-<e> <node>/<pid>/<owner> w <w>\n"
                dec_len(*secs)
                    + 1
                    + name
                    + 1
                    + what
                    + " plock ".len()
                    + hex_len(info.number)
                    + 1
                    + op
                    + 1
                    + ex
                    + 1
                    + hex_len(info.start)
                    + 1
                    + hex_len(info.end)
                    + 1
                    + signed_len(i64::from(info.nodeid))
                    + 1
                    + dec_len(u64::from(info.pid))
                    + 1
                    + hex_len(info.owner)
                    + " w ".len()
                    + 1
                    + 1
            }
            Self::Text(t) => t.len(),
        }
    }
}

impl PlockRing {
    /// A ring that dumps at most `cap` bytes (tests use small ones).
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            cap: cap.max(1),
            wrapped: false,
        }
    }

    fn push_entry(&mut self, e: Entry) {
        let n = e.len();
        self.entries.push_back((e, n));
        self.bytes += n;
        if self.bytes >= self.cap {
            self.wrapped = true;
        }
        // drop the oldest while the rest still make a full ring
        while let Some(&(_, first)) = self.entries.front() {
            if self.bytes - first < self.cap {
                break;
            }
            self.bytes -= first;
            self.entries.pop_front();
        }
    }

    /// One plock request's line, as a record.
    pub fn push_plock(&mut self, secs: u64, ls: &Arc<str>, line: PlockLine, info: &PlockInfo) {
        self.push_entry(Entry::Plock {
            secs,
            ls: ls.clone(),
            line,
            info: *info,
        });
    }

    /// Any other line (with its newline).
    pub fn push_text(&mut self, line: &str) {
        self.push_entry(Entry::Text(line.into()));
    }

    /// The text C's ring would return: once the ring has filled, its last `cap` bytes;
    /// before that everything but the final newline; empty when fresh.
    pub fn contents(&self) -> Vec<u8> {
        let mut s = String::with_capacity(self.bytes);
        for (e, _) in &self.entries {
            e.write(&mut s);
        }
        let mut v = s.into_bytes();
        if self.wrapped {
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

    /// The records dump exactly the bytes C's text ring holds, before and after wrapping,
    /// for every op and field width.
    #[test]
    fn same_bytes_as_the_text_ring() {
        for cap in [64, 300, 4096] {
            let mut text = Ring::with_capacity(cap);
            let mut rec = PlockRing::with_capacity(cap);
            let ls: Arc<str> = Arc::from("a_lockspace_name_longer_than_thirty_two_chars");
            for i in 0..200u64 {
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
