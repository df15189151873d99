//! The 1 MiB debug ring buffers (logging.c `log_save_str`, `log_copy`), pure.

use std::collections::VecDeque;

/// `LOG_DUMP_SIZE`.
pub const RING_SIZE: usize = 1024 * 1024;

/// Bytes appended circularly; the oldest are overwritten.
#[derive(Debug, Clone)]
pub struct Ring {
    bytes: VecDeque<u8>,
    cap: usize,
    wrapped: bool,
}

impl Default for Ring {
    fn default() -> Self {
        Self::with_capacity(RING_SIZE)
    }
}

impl Ring {
    /// A ring of `cap` bytes (tests use small ones).
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            bytes: VecDeque::new(),
            cap: cap.max(1),
            wrapped: false,
        }
    }

    /// Appends one line (with its newline).
    pub fn push(&mut self, line: &[u8]) {
        let line = &line[line.len().saturating_sub(self.cap)..];
        let over = (self.bytes.len() + line.len()).saturating_sub(self.cap);
        self.bytes.drain(..over);
        self.bytes.extend(line);
        if self.bytes.len() == self.cap {
            self.wrapped = true;
        }
    }

    /// What a dump returns: once the ring has filled, all of it from the oldest byte (it may
    /// start mid-line); before that everything but the final newline; empty when fresh.
    pub fn contents(&self) -> Vec<u8> {
        let mut v: Vec<u8> = self.bytes.iter().copied().collect();
        if !self.wrapped {
            v.pop();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_partial_and_wrapped() {
        let mut r = Ring::with_capacity(16);
        assert!(r.contents().is_empty());
        r.push(b"1 a\n");
        r.push(b"2 bb\n");
        assert_eq!(r.contents(), b"1 a\n2 bb");
        r.push(b"3 cccc\n"); // 16 bytes exactly: wrapped, returned whole
        assert_eq!(r.contents(), b"1 a\n2 bb\n3 cccc\n");
        r.push(b"4 d\n");
        assert_eq!(r.contents(), b"2 bb\n3 cccc\n4 d\n");
        r.push(b"a line longer than the ring itself\n");
        assert_eq!(r.contents(), b"the ring itself\n");
    }
}
