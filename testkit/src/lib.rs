//! Test support shared by every crate's tests, simulations and benches (a dev-dependency
//! only; it has no dependencies itself, so even `dlm-plock`'s tests may use it).

/// A small deterministic generator (xorshift64): the same seed gives the same run, so a
/// failing seed of a simulation can be run again alone.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for run `seed` (spread by a multiplication, never the stuck state 0).
    pub fn new(seed: u64) -> Self {
        Self::from_state(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// A generator started at `state` as given (0 becomes 1: xorshift never leaves 0).
    pub fn from_state(state: u64) -> Self {
        Self(state | u64::from(state == 0))
    }

    /// The next value below `n` (`n` > 0).
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The seeds a simulation runs: `DLM_SIM_SEED` alone, else `DLM_SIM_RUNS` of them (default
/// `runs`) from `DLM_SIM_FROM` (default 1). Panics on a `DLM_SIM_SEED` that is not a
/// number (a test's input error).
pub fn seeds(runs: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("DLM_SIM_SEED") {
        return vec![s.parse().expect("DLM_SIM_SEED is a number")];
    }
    let runs = std::env::var("DLM_SIM_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(runs);
    // `DLM_SIM_FROM=n`: the seeds from n on (a long run taken up where it stopped)
    let from: u64 = std::env::var("DLM_SIM_FROM")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    (from..from.saturating_add(runs)).collect()
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_gives_its_own_run_again() {
        let run = |seed| {
            let mut r = Rng::new(seed);
            (0..64).map(|_| r.next(1000)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let mut zero = Rng::from_state(0);
        assert_ne!((0..8).map(|_| zero.next(1 << 32)).sum::<u64>(), 0);
    }

    #[test]
    fn values_stay_below_the_bound() {
        let mut r = Rng::new(3);
        assert!((0..10_000).all(|_| r.next(6) < 6));
        assert_eq!(r.next(0), 0);
    }
}
