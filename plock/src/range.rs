//! Inclusive byte ranges `[start, end]` and the C daemon's classification of how a new
//! range overlaps an existing one (`overlap_type` in plock.c). No arithmetic here can wrap:
//! the ±1 only happen where a strict inequality holds.

/// How new range N lies against existing range E, as plock.c numbers the cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overlap {
    /// 0: N == E.
    Same,
    /// 1: N inside E sharing exactly one endpoint.
    InsideEdge,
    /// 2: N strictly inside E.
    Inside,
    /// 3: E inside N (shared endpoints allowed).
    Covers,
    /// 4: partial overlap.
    Partial,
}

/// Whether `[s1, e1]` and `[s2, e2]` share a byte (`ranges_overlap`).
#[cfg(test)]
pub(crate) fn overlaps(s1: u64, e1: u64, s2: u64, e2: u64) -> bool {
    !(e1 < s2 || s1 > e2)
}

/// Classifies overlapping N = `[s1, e1]` against E = `[s2, e2]` (mirrors `overlap_type`).
pub(crate) fn overlap_type(s1: u64, e1: u64, s2: u64, e2: u64) -> Overlap {
    if s1 == s2 && e1 == e2 {
        Overlap::Same
    } else if (s1 == s2 && e1 < e2) || (s1 > s2 && e1 == e2) {
        Overlap::InsideEdge
    } else if s1 > s2 && e1 < e2 {
        Overlap::Inside
    } else if s1 <= s2 && e1 >= e2 {
        Overlap::Covers
    } else {
        Overlap::Partial
    }
}

/// E = `[s2, e2]` minus the overlapping N = `[s, e]`, when what remains is one piece
/// (`shrink_range2`): the part before N if E starts before it, else the part after it.
pub(crate) fn shrink(s2: u64, e2: u64, s: u64, e: u64) -> (u64, u64) {
    if s2 < s {
        (s2, s - 1)
    } else {
        // E ends after N here (the caller only shrinks partial or one-edge overlaps)
        (e + 1, e2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pair of ranges in 0..8: the class agrees with the byte sets it claims.
    #[test]
    fn exhaustive_small_domain() {
        for s1 in 0..8u64 {
            for e1 in s1..8 {
                for s2 in 0..8u64 {
                    for e2 in s2..8 {
                        if !overlaps(s1, e1, s2, e2) {
                            continue;
                        }
                        let n: Vec<u64> = (s1..=e1).collect();
                        let e: Vec<u64> = (s2..=e2).collect();
                        let n_in_e = n.iter().all(|b| e.contains(b));
                        let e_in_n = e.iter().all(|b| n.contains(b));
                        match overlap_type(s1, e1, s2, e2) {
                            Overlap::Same => assert_eq!(n, e),
                            Overlap::InsideEdge => {
                                assert!(n_in_e && n != e && (s1 == s2 || e1 == e2));
                                let (a, b) = shrink(s2, e2, s1, e1);
                                let rest: Vec<u64> =
                                    e.iter().copied().filter(|x| !n.contains(x)).collect();
                                assert_eq!((a..=b).collect::<Vec<_>>(), rest);
                            }
                            Overlap::Inside => assert!(n_in_e && s1 > s2 && e1 < e2),
                            Overlap::Covers => assert!(e_in_n),
                            Overlap::Partial => {
                                assert!(!n_in_e && !e_in_n);
                                let (a, b) = shrink(s2, e2, s1, e1);
                                let rest: Vec<u64> =
                                    e.iter().copied().filter(|x| !n.contains(x)).collect();
                                assert_eq!((a..=b).collect::<Vec<_>>(), rest);
                            }
                        }
                    }
                }
            }
        }
        // the extremes do not wrap
        assert_eq!(shrink(0, u64::MAX, 0, u64::MAX - 1), (u64::MAX, u64::MAX));
        assert_eq!(shrink(0, u64::MAX, 1, u64::MAX), (0, 0));
    }
}
