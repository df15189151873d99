//! A keyed hash of inode numbers, for tables a local user fills: splitmix64's finaliser of
//! the number xor a per-process key. One multiply-xor chain instead of SipHash, and a user
//! who does not know the key cannot choose numbers that collide.

use std::hash::{BuildHasher, Hasher};

use crate::arena::mix64;

/// The hash of `number` under `key`.
pub(crate) fn hash_number(key: u64, number: u64) -> u64 {
    mix64(number ^ key)
}

/// Builds [`NumberHasher`]s with one key: the `S` of a `HashMap<u64, _, S>` or
/// `HashSet<u64, S>`.
#[derive(Debug, Clone, Copy)]
pub struct KeyedNumbers {
    key: u64,
}

impl KeyedNumbers {
    /// Hashes under `key` (drawn at random per process).
    pub fn new(key: u64) -> Self {
        Self { key }
    }
}

impl BuildHasher for KeyedNumbers {
    type Hasher = NumberHasher;

    fn build_hasher(&self) -> NumberHasher {
        NumberHasher {
            key: self.key,
            state: 0,
        }
    }
}

/// Hashes one `u64` (an inode number); other writes are folded in 8 bytes at a time.
#[derive(Debug, Clone, Copy)]
pub struct NumberHasher {
    key: u64,
    state: u64,
}

impl Hasher for NumberHasher {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write_u64(&mut self, n: u64) {
        self.state = hash_number(self.key, n ^ self.state.rotate_left(23));
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_every_hash_and_numbers_do_not_collide() {
        let (a, b) = (KeyedNumbers::new(1), KeyedNumbers::new(2));
        let hashes: std::collections::BTreeSet<u64> =
            (0..10_000u64).map(|n| a.hash_one(n)).collect();
        assert_eq!(hashes.len(), 10_000, "a bijection of the number");
        assert!((0..100u64).all(|n| a.hash_one(n) != b.hash_one(n)));
        assert_eq!(a.hash_one(7u64), hash_number(1, 7), "one u64 is one mix");
    }
}
