//! Issue 14's targets printed beside a side-by-side bench's table (`vs_c`, `vs_c3`): each a
//! ratio of one of our daemons to a C daemon on one case, judged round by round (the runs
//! alternate, so round i of every daemon ran in the same minutes) and on the medians. Where
//! one is missed, the runs' own measurements say where the time went: CPU per op of the
//! daemon and of corosync, and our daemon's hops (device to task, CPG round trip).

use std::collections::BTreeMap;

use crate::closed_loop::{Daemons, Run};

/// What a target compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Ops per second: ours ÷ C's.
    Rate,
    /// Latency p50: C's ÷ ours.
    P50,
    /// The `ls` query's p99 during the storm: C's ÷ ours, and ours under 1 ms.
    QueryP99,
}

/// The C daemon a target divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Against {
    /// One of C's two modes.
    Mode(Daemons),
    /// Either mode: whichever did better in the round.
    Better,
}

/// One target: `ours` ÷ `against` on `measure` at least `at_least`.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Our daemon's mode.
    pub ours: Daemons,
    /// The C daemon divided by.
    pub against: Against,
    /// What is compared.
    pub measure: Measure,
    /// The ratio to reach.
    pub at_least: f64,
}

impl Target {
    const fn of(ours: Daemons, against: Against, measure: Measure, at_least: f64) -> Self {
        Self {
            ours,
            against,
            measure,
            at_least,
        }
    }
}

use Against::{Better, Mode};
use Daemons::{CDefault, COwnership, Ours, OursCompat};
use Measure::{P50, QueryP99, Rate};

/// The queries under load, on one node (the only bench that probes them).
const QUERIES: [Target; 2] = [
    Target::of(Ours, Mode(CDefault), QueryP99, 1.0),
    Target::of(OursCompat, Mode(CDefault), QueryP99, 1.0),
];

/// One node, own files or one file: native ≥ 1.3× C's ownership mode with p50 ≤ 1/10 of
/// C's default mode's; C-compatible ≥ 1.2× C's default mode.
pub const ONE_NODE_LOCAL: &[Target] = &[
    Target::of(Ours, Mode(COwnership), Rate, 1.3),
    Target::of(Ours, Mode(CDefault), P50, 10.0),
    Target::of(OursCompat, Mode(CDefault), Rate, 1.2),
    QUERIES[0],
    QUERIES[1],
];

/// One node, one contended byte: native ≥ 1.0× C's ownership mode; C-compatible ≥ 1.2×
/// C's default mode.
pub const ONE_NODE_CONTENDED: &[Target] = &[
    Target::of(Ours, Mode(COwnership), Rate, 1.0),
    Target::of(OursCompat, Mode(CDefault), Rate, 1.2),
    QUERIES[0],
    QUERIES[1],
];

/// One node, one process alone (the real kernel's row on the fake kernel): native ≥ 1.2×
/// C's ownership mode; C-compatible ≥ 1.2× C's default mode.
pub const ONE_PROCESS: &[Target] = &[
    Target::of(Ours, Mode(COwnership), Rate, 1.2),
    Target::of(OursCompat, Mode(CDefault), Rate, 1.2),
    QUERIES[0],
    QUERIES[1],
];

/// Three nodes, node-local (the load on node 1 on own files or one file, every node on its
/// own files): as on one node, with C-compatible ≥ 1.0×.
pub const THREE_NODES_LOCAL: &[Target] = &[
    Target::of(Ours, Mode(COwnership), Rate, 1.3),
    Target::of(Ours, Mode(CDefault), P50, 10.0),
    Target::of(OursCompat, Mode(CDefault), Rate, 1.0),
];

/// Three nodes, one contended byte: native ≥ 1.0× C's ownership mode, C-compatible ≥ 1.0×.
pub const THREE_NODES_CONTENDED: &[Target] = &[
    Target::of(Ours, Mode(COwnership), Rate, 1.0),
    Target::of(OursCompat, Mode(CDefault), Rate, 1.0),
];

/// Three nodes, every node on shared files: native ≥ 2× C in either mode.
pub const SHARED_FILES: &[Target] = &[
    Target::of(Ours, Better, Rate, 2.0),
    Target::of(OursCompat, Mode(CDefault), Rate, 1.0),
];

/// Lock passing between two nodes: ≥ 1.0× C in either mode.
pub const LOCK_PASSING: &[Target] = &[
    Target::of(Ours, Better, Rate, 1.0),
    Target::of(OursCompat, Mode(CDefault), Rate, 1.0),
];

/// A target's ratios: each round's, and the medians'; None when a daemon it names did not
/// run (or measured nothing to divide).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Round by round.
    pub rounds: Vec<f64>,
    /// Rounds that reached the target.
    pub met: usize,
    /// The ratio of the medians (the table's rows).
    pub of_medians: f64,
}

/// The runs of each daemon, in round order.
pub type RunsOf<'a> = &'a dyn Fn(Daemons) -> Option<&'a [Run]>;

fn value(run: &Run, m: Measure) -> Option<f64> {
    let v = match m {
        Rate => run.ops_s,
        P50 => run.p50_us,
        QueryP99 => run.ls_us?.1,
    };
    (v > 0.0).then_some(v)
}

/// `ours` against `base` on `m`, bigger is better.
fn ratio(m: Measure, ours: &Run, base: &Run) -> Option<f64> {
    let (o, b) = (value(ours, m)?, value(base, m)?);
    Some(if m == Rate { o / b } else { b / o })
}

fn bases(a: Against) -> &'static [Daemons] {
    match a {
        Mode(CDefault) => &[CDefault],
        Mode(_) => &[COwnership],
        Better => &[CDefault, COwnership],
    }
}

/// The ratio to the better of `t`'s C daemons, from the run `base` picks of each.
fn worst_ratio(
    t: &Target,
    ours: &Run,
    runs: RunsOf,
    base: impl Fn(&[Run]) -> Option<Run>,
) -> Option<f64> {
    bases(t.against)
        .iter()
        .filter_map(|&k| ratio(t.measure, ours, &base(runs(k)?)?))
        .min_by(f64::total_cmp)
}

fn reached(t: &Target, ours: &Run, r: f64) -> bool {
    r >= t.at_least && (t.measure != QueryP99 || ours.ls_us.is_some_and(|(_, p99)| p99 < 1000.0))
}

/// `t` judged on the runs of one case.
pub fn judge(t: &Target, runs: RunsOf) -> Option<Verdict> {
    let ours = runs(t.ours)?;
    let mut rounds = Vec::new();
    let mut met = 0;
    for (i, o) in ours.iter().enumerate() {
        let r = worst_ratio(t, o, runs, |v| v.get(i).copied())?;
        met += usize::from(reached(t, o, r));
        rounds.push(r);
    }
    let median = crate::closed_loop::median(ours.to_vec());
    let of_medians = worst_ratio(t, &median, runs, |v| {
        Some(crate::closed_loop::median(v.to_vec()))
    })?;
    Some(Verdict {
        rounds,
        met,
        of_medians,
    })
}

/// A daemon as the targets name it.
fn name(k: Daemons) -> &'static str {
    match k {
        CDefault => "C's default mode",
        COwnership => "C's ownership mode",
        OursCompat => "C-compatible",
        Ours => "native",
        Daemons::StandIn => "the stand-in",
        Daemons::CpgCeiling => "the ceiling",
    }
}

/// The target as a table cell.
pub fn label(t: &Target) -> String {
    let against = match t.against {
        Mode(k) => name(k),
        Better => "C (either mode)",
    };
    let ours = name(t.ours);
    match t.measure {
        Rate => format!("{ours} ≥ {:.1}× {against}", t.at_least),
        P50 => format!("{ours} p50 ≤ 1/{} of {against}'s", t.at_least),
        QueryP99 => format!("{ours}: `ls` p99 ≤ {against}'s and < 1 ms"),
    }
}

/// Where the median run of ours spent its time against C's (the first C daemon `t` names).
pub fn why(t: &Target, runs: RunsOf) -> Option<String> {
    let ours = crate::closed_loop::median(runs(t.ours)?.to_vec());
    let c = crate::closed_loop::median(runs(bases(t.against)[0])?.to_vec());
    let c_name = name(bases(t.against)[0]);
    Some(match t.measure {
        P50 => format!(
            "p50 {:.0} µs against {c_name}'s {:.0}",
            ours.p50_us, c.p50_us
        ),
        QueryP99 => {
            let p99 = |r: &Run| r.ls_us.map_or(0.0, |(_, p)| p);
            format!("p99 {:.0} µs against {c_name}'s {:.0}", p99(&ours), p99(&c))
        }
        Rate => {
            let cpu = format!(
                "ours {:.1} µs of daemon and {:.1} of corosync CPU per op, {c_name} {:.1} and {:.1}",
                ours.daemon_us_op, ours.corosync_us_op, c.daemon_us_op, c.corosync_us_op
            );
            let why = ours
                .hops
                .map_or(cpu.clone(), |h| format!("{cpu}; {}", hops_why(&h)));
            match ceiling(t, runs) {
                Some(c) => format!("{why}; {c}"),
                None => why,
            }
        }
    })
}

/// For a C-compatible rate: what `cpg_ceiling` (one CPG round trip per request and
/// nothing else) made of the same case, against the same C daemon, and ours against it,
/// on the medians.
fn ceiling(t: &Target, runs: RunsOf) -> Option<String> {
    if t.ours != OursCompat {
        return None;
    }
    let median = |v: &[Run]| crate::closed_loop::median(v.to_vec());
    let top = median(runs(Daemons::CpgCeiling)?);
    let r = worst_ratio(t, &top, runs, |v| Some(median(v)))?;
    let ours = ratio(Rate, &median(runs(t.ours)?), &top)?;
    Some(format!(
        "the ceiling of any C-compatible daemon (one CPG round trip per request, nothing \
         else) {r:.2}× {}, ours {ours:.2}× the ceiling",
        name(bases(t.against)[0])
    ))
}

/// A request's time in our daemon (of those that never wait for a lock, where there were
/// any: the others' time is the wait), and corosync's share of it.
fn hops_why(h: &crate::closed_loop::HopSplit) -> String {
    let (request, which) = match (h.quick_us, h.request_us) {
        (Some(q), _) => (q, "a request that does not wait"),
        (None, r) => (r.unwrap_or(0.0), "a request"),
    };
    let handoff = h.handoff_us.unwrap_or(0.0);
    match h.round_trip_us {
        // a sync or claim now and then is not a message per request
        Some(rt) if h.trips_per_request >= 0.01 => {
            let share = rt * h.trips_per_request.min(1.0) / request.max(f64::MIN_POSITIVE);
            format!(
                "{which} {request:.0} µs in our daemon: corosync's round trip {rt:.0} µs \
                 ({:.0} % of it; {:.2} messages per request), device to task {handoff:.0} µs",
                100.0 * share.min(1.0),
                h.trips_per_request
            )
        }
        _ => format!(
            "{which} {request:.1} µs in our daemon ({handoff:.1} µs device to task), no message per request"
        ),
    }
}

fn cell(v: &Verdict, t: &Target) -> String {
    let n = v.rounds.len();
    if v.met == n && v.of_medians >= t.at_least {
        "met".to_owned()
    } else if v.met == 0 {
        "**missed**".to_owned()
    } else {
        format!("missed in {} of {n} rounds", n - v.met)
    }
}

/// The targets of every case run, after the table; then our replies out of order over
/// every run (must be 0).
pub fn print_targets<C: crate::closed_loop::BenchCase>(
    cases: &[C],
    runs: &BTreeMap<(C, Daemons), Vec<Run>>,
) {
    println!();
    println!("Targets (issue 14): each round's ratio, then the medians' (the table's rows)");
    println!();
    println!("| case | target | per round | medians | verdict | where ours went (medians) |");
    println!("|---|---|---|---|---|---|");
    for &case in cases {
        let of = |k: Daemons| runs.get(&(case, k)).map(Vec::as_slice);
        for t in case.targets() {
            let Some(v) = judge(t, &of) else { continue };
            let verdict = cell(&v, t);
            let why = if verdict == "met" {
                String::new()
            } else {
                why(t, &of).unwrap_or_default()
            };
            let rounds: Vec<String> = v.rounds.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "| {} | {} | {} | {:.2} | {verdict} | {why} |",
                case.label(),
                label(t),
                rounds.join(" / "),
                v.of_medians
            );
        }
    }
    let ours: Vec<&Run> = runs
        .iter()
        .filter(|((_, k), _)| matches!(k, Ours | OursCompat))
        .flat_map(|(_, v)| v)
        .collect();
    let late = ours.iter().filter(|r| r.out_of_order > 0).count();
    let replies: u64 = ours.iter().map(|r| r.out_of_order).sum();
    println!();
    if late == 0 {
        let runs = if ours.len() == 1 { "run" } else { "runs" };
        println!(
            "Replies of ours out of per-fsid order: none in {} {runs} (met)",
            ours.len()
        );
    } else {
        println!(
            "Replies of ours out of per-fsid order: {replies} in {late} of {} runs (**missed**)",
            ours.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::closed_loop::HopSplit;

    fn rate(ops_s: f64) -> Run {
        Run {
            ops_s,
            ..Run::default()
        }
    }

    fn judged(t: &Target, runs: &[(Daemons, Vec<Run>)]) -> Option<Verdict> {
        let of = |k: Daemons| {
            runs.iter()
                .find(|(d, _)| *d == k)
                .map(|(_, v)| v.as_slice())
        };
        judge(t, &of)
    }

    #[test]
    fn a_target_is_judged_round_by_round_and_on_the_medians() {
        let t = Target::of(Ours, Mode(COwnership), Rate, 1.3);
        let ours = vec![rate(130.0), rate(100.0), rate(140.0)];
        let c = vec![rate(100.0), rate(100.0), rate(100.0)];
        let v = judged(&t, &[(Ours, ours), (COwnership, c)]).expect("both ran");
        assert_eq!(v.rounds, vec![1.3, 1.0, 1.4]);
        assert_eq!(v.met, 2);
        assert!((v.of_medians - 1.3).abs() < 1e-9);
        assert_eq!(cell(&v, &t), "missed in 1 of 3 rounds");
        let all = Verdict { met: 3, ..v };
        assert_eq!(cell(&all, &t), "met");
    }

    #[test]
    fn either_mode_divides_by_the_better_c_in_each_round() {
        let t = Target::of(Ours, Better, Rate, 2.0);
        let runs = [
            (Ours, vec![rate(100.0), rate(100.0)]),
            (CDefault, vec![rate(10.0), rate(50.0)]),
            (COwnership, vec![rate(40.0), rate(20.0)]),
        ];
        let v = judged(&t, &runs).expect("all ran");
        assert_eq!(v.rounds, vec![2.5, 2.0]);
        assert_eq!(v.met, 2);
    }

    #[test]
    fn latency_targets_divide_c_by_ours() {
        let t = Target::of(Ours, Mode(CDefault), P50, 10.0);
        let p50 = |p50_us| Run {
            p50_us,
            ..Run::default()
        };
        let v = judged(
            &t,
            &[
                (Ours, vec![p50(50.0), p50(75.0)]),
                (CDefault, vec![p50(600.0), p50(600.0)]),
            ],
        )
        .expect("both ran");
        assert_eq!(v.rounds, vec![12.0, 8.0]);
        assert_eq!(v.met, 1);
    }

    #[test]
    fn a_query_over_one_millisecond_misses_even_when_c_is_slower() {
        let t = QUERIES[0];
        let p99 = |p| Run {
            ls_us: Some((100.0, p)),
            ..Run::default()
        };
        let v = judged(
            &t,
            &[
                (Ours, vec![p99(1200.0), p99(400.0)]),
                (CDefault, vec![p99(3000.0), p99(300.0)]),
            ],
        )
        .expect("both probed");
        assert_eq!(v.rounds, vec![2.5, 0.75]);
        assert_eq!(v.met, 0, "the first over 1 ms, the second slower than C");
        let unprobed = judged(&t, &[(Ours, vec![rate(1.0)]), (CDefault, vec![rate(1.0)])]);
        assert_eq!(unprobed, None);
    }

    #[test]
    fn a_target_whose_c_did_not_run_is_not_judged() {
        let t = Target::of(Ours, Mode(COwnership), Rate, 1.3);
        assert_eq!(
            judged(&t, &[(Ours, vec![rate(1.0)]), (CDefault, vec![rate(1.0)])]),
            None
        );
        assert_eq!(judged(&t, &[(COwnership, vec![rate(1.0)])]), None);
    }

    #[test]
    fn a_missed_rate_says_what_share_of_a_request_is_corosyncs() {
        let t = Target::of(OursCompat, Mode(CDefault), Rate, 1.2);
        let ours = Run {
            ops_s: 100.0,
            daemon_us_op: 15.5,
            corosync_us_op: 87.8,
            hops: Some(HopSplit {
                request_us: Some(900.0),
                quick_us: Some(517.0),
                handoff_us: Some(115.0),
                round_trip_us: Some(376.0),
                trips_per_request: 1.0,
                ..HopSplit::default()
            }),
            ..Run::default()
        };
        let c = Run {
            ops_s: 100.0,
            daemon_us_op: 15.0,
            corosync_us_op: 90.6,
            ..Run::default()
        };
        let of = |k: Daemons| match k {
            OursCompat => Some(std::slice::from_ref(&ours)),
            CDefault => Some(std::slice::from_ref(&c)),
            _ => None,
        };
        let why = why(&t, &of).expect("both ran");
        assert!(why.contains("ours 15.5 µs of daemon and 87.8 of corosync CPU per op, C's default mode 15.0 and 90.6"), "{why}");
        assert!(why.contains("a request that does not wait 517 µs in our daemon: corosync's round trip 376 µs (73 % of it; 1.00 messages per request), device to task 115 µs"), "{why}");
        assert_eq!(label(&t), "C-compatible ≥ 1.2× C's default mode");
        // native: a sync now and then is no message per request
        let native = HopSplit {
            request_us: Some(19.0),
            quick_us: Some(19.0),
            handoff_us: Some(10.0),
            round_trip_us: Some(434.0),
            trips_per_request: 0.0004,
            ..HopSplit::default()
        };
        assert_eq!(
            hops_why(&native),
            "a request that does not wait 19.0 µs in our daemon (10.0 µs device to task), no message per request"
        );
    }

    #[test]
    fn a_missed_c_compatible_rate_names_the_ceilings_ratio_when_it_ran() {
        let t = Target::of(OursCompat, Mode(CDefault), Rate, 1.2);
        let (ours, c, top) = (rate(105.0), rate(100.0), rate(131.0));
        let with = |k: Daemons| match k {
            OursCompat => Some(std::slice::from_ref(&ours)),
            CDefault => Some(std::slice::from_ref(&c)),
            Daemons::CpgCeiling => Some(std::slice::from_ref(&top)),
            _ => None,
        };
        let why_with = why(&t, &with).expect("all ran");
        assert!(
            why_with.ends_with(
                "; the ceiling of any C-compatible daemon (one CPG round trip per request, \
                 nothing else) 1.31× C's default mode, ours 0.80× the ceiling"
            ),
            "{why_with}"
        );
        let without = |k: Daemons| {
            if k == Daemons::CpgCeiling {
                None
            } else {
                with(k)
            }
        };
        let why_without = why(&t, &without).expect("ours and C ran");
        assert!(!why_without.contains("ceiling"), "{why_without}");
        // a native target is never measured against it
        let native = Target::of(Ours, Mode(CDefault), Rate, 1.2);
        let of = |k: Daemons| if k == Ours { with(OursCompat) } else { with(k) };
        assert!(!why(&native, &of).expect("ran").contains("ceiling"));
    }
}
