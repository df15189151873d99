//! The plock log behind `dlm_tool log_plock`, kept compactly: the two lines every plock
//! request makes (`read plock` on the node that read it, `receive plock` on every node) are
//! stored as records and formatted only when dumped. The dump is byte for byte what C's
//! 1 MiB text ring would hold: the retained records always make at least 1 MiB of text
//! once that much was logged, and the dump keeps the last 1 MiB (so it may start mid-line,
//! as C's).

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

/// What one plock line shows of its request, in as few bytes as the line needs (the ring
/// holds ~17,000 of them: a 1 MiB ring streams through them at every request).
#[derive(Debug, Clone)]
struct PlockRecord {
    ls: Arc<str>,
    number: u64,
    start: u64,
    end: u64,
    owner: u64,
    /// Monotonic seconds (u32: 136 years of uptime).
    secs: u32,
    nodeid: i32,
    pid: u32,
    op: PlockOp,
    /// [`Self::RECEIVE`], [`Self::EX`], [`Self::WAIT`].
    bits: u8,
    /// The line's length in bytes (under 200: fixed words and numbers).
    len: u16,
}

impl PlockRecord {
    const RECEIVE: u8 = 1;
    const EX: u8 = 2;
    const WAIT: u8 = 4;

    fn new(secs: u64, ls: &Arc<str>, line: PlockLine, info: &PlockInfo) -> Self {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        let mut r = Self {
            ls: ls.clone(),
            number: info.number,
            start: info.start,
            end: info.end,
            owner: info.owner,
            secs: u32::try_from(secs).unwrap_or(u32::MAX),
            nodeid: info.nodeid,
            pid: info.pid,
            op: info.op,
            bits: bit(line == PlockLine::Receive, Self::RECEIVE)
                | bit(info.ex, Self::EX)
                | bit(info.wait, Self::WAIT),
            len: 0,
        };
        r.len = u16::try_from(r.text_len()).unwrap_or(u16::MAX);
        r
    }

    fn line(&self) -> PlockLine {
        if self.bits & Self::RECEIVE == 0 {
            PlockLine::Read
        } else {
            PlockLine::Receive
        }
    }

    /// The length of its line, without formatting it.
    fn text_len(&self) -> usize {
        let name = self.ls.get(..32).unwrap_or(&self.ls).len();
        let what = match self.line() {
            PlockLine::Read => 4,
            PlockLine::Receive => 7,
        };
        let op = if self.op == PlockOp::GET { 3 } else { 2 };
        let ex = if self.op == PlockOp::UNLOCK || self.op == PlockOp::GET {
            1
        } else {
            2
        };
        // "<secs> <ls> <what> plock <num> <op> <ex> <s>-<e> <node>/<pid>/<owner> w <w>\n"
        dec_len(u64::from(self.secs))
            + 1
            + name
            + 1
            + what
            + " plock ".len()
            + hex_len(self.number)
            + 1
            + op
            + 1
            + ex
            + 1
            + hex_len(self.start)
            + 1
            + hex_len(self.end)
            + 1
            + signed_len(i64::from(self.nodeid))
            + 1
            + dec_len(u64::from(self.pid))
            + 1
            + hex_len(self.owner)
            + " w ".len()
            + 1
            + 1
    }

    /// The request as far as its line shows it (what [`PlockWords`] prints).
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

#[derive(Debug, Clone)]
enum Entry {
    Plock(PlockRecord),
    Text(Box<str>),
}

/// The ring of records.
#[derive(Debug)]
pub struct PlockRing {
    /// Each entry knows its line's length (a record keeps it, a text is one), read again
    /// when the entry leaves.
    entries: VecDeque<Entry>,
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

/// 10^i for every i a u64 reaches.
const POW10: [u64; 20] = {
    let mut p = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        p[i] = p[i - 1] * 10;
        i += 1;
    }
    p
};

/// Decimal digits of `v`, from its bit length and one comparison (`ilog10` took a dozen
/// steps, twice a record).
fn dec_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    // ⌊bits·log10 2⌋: the digits of 2^bits less one, which `v` reaches or falls one short of
    let guess = (bits * 1233) >> 12;
    let short = POW10.get(guess).is_some_and(|&p| v < p);
    (guess + 1 - usize::from(short)).max(1)
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
            Self::Plock(r) => {
                let what = match r.line() {
                    PlockLine::Read => "read",
                    PlockLine::Receive => "receive",
                };
                let name = r.ls.get(..32).unwrap_or(&r.ls);
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

    /// The length of [`Self::write`]'s text, without formatting it.
    fn len(&self) -> usize {
        match self {
            Self::Plock(r) => usize::from(r.len),
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
        self.bytes += e.len();
        self.entries.push_back(e);
        if self.bytes >= self.cap {
            self.wrapped = true;
        }
        // drop the oldest while the rest still make a full ring
        while let Some(first) = self.entries.front().map(Entry::len) {
            if self.bytes - first < self.cap {
                break;
            }
            self.bytes -= first;
            self.entries.pop_front();
        }
    }

    /// One plock request's line, as a record.
    pub fn push_plock(&mut self, secs: u64, ls: &Arc<str>, line: PlockLine, info: &PlockInfo) {
        self.push_entry(Entry::Plock(PlockRecord::new(secs, ls, line, info)));
    }

    /// Any other line (with its newline).
    pub fn push_text(&mut self, line: &str) {
        self.push_entry(Entry::Text(line.into()));
    }

    /// The text C's ring would return: once the ring has filled, its last `cap` bytes;
    /// before that everything but the final newline; empty when fresh.
    pub fn contents(&self) -> Vec<u8> {
        let mut s = String::with_capacity(self.bytes);
        for e in &self.entries {
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

    /// A record is a cache line at most (64 bytes; a whole request and its length took
    /// 104), so a full ring of ~16,000 lines takes a third less memory than it did.
    #[test]
    fn a_record_fits_a_cache_line() {
        assert!(size_of::<Entry>() <= 64, "{}", size_of::<Entry>());
    }

    #[test]
    fn decimal_lengths_at_every_power_of_ten() {
        let mut p = 1u64;
        for digits in 1..=20 {
            assert_eq!(dec_len(p), digits, "{p}");
            assert_eq!(dec_len(p - 1), (digits - 1).max(1), "{}", p - 1);
            p = p.saturating_mul(10);
        }
        assert_eq!(dec_len(u64::MAX), u64::MAX.to_string().len());
        assert_eq!(dec_len(0), 1);
        // every bit length, at both of its ends and beside them
        for b in 0..64 {
            let lo = 1u64 << b;
            for v in [lo, lo + 1, lo.saturating_sub(1), (lo << 1).wrapping_sub(1)] {
                assert_eq!(dec_len(v), v.to_string().len(), "{v}");
            }
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
