//! `cargo bench -p dlm_controld --bench conf`: loading dlm.conf files of growing size.
//! The C daemon scans the whole file again for every lockspace it creates and every node it
//! fences, so a file of n lines describing n/4 lockspaces costs it O(n²); this prints our
//! load time per line (flat means O(n log n) or better) beside that scan-per-section cost,
//! measured with a naive implementation of the same lookups.

#![allow(missing_docs, clippy::cast_precision_loss)]

use std::hint::black_box;
use std::time::Instant;

use dlm_controld::config::parse_conf;

fn file(lines: usize) -> String {
    let mut s = String::from("log_debug=1\npost_join_delay=10\n");
    let mut i = 0;
    while s.lines().count() < lines {
        s.push_str(&format!(
            "lockspace ls{i} nodir=1\nmaster ls{i} node=1 weight=2\nmaster ls{i} node=2\n\n"
        ));
        i += 1;
    }
    s
}

/// C's way: for each lockspace, scan the whole text for its section.
fn scan_per_lockspace(text: &str) -> usize {
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("lockspace "))
        .collect();
    let mut found = 0;
    for n in names {
        let name = n.split_whitespace().next().unwrap_or_default();
        for l in text.lines() {
            if l.strip_prefix("master ")
                .is_some_and(|r| r.starts_with(name))
            {
                found += 1;
            }
        }
    }
    found
}

fn main() {
    println!("| lines | load (ours) | per line | scan per lockspace (C's way) |");
    println!("|---|---|---|---|");
    for n in [1_000usize, 10_000, 100_000] {
        let text = file(n);
        let t = Instant::now();
        let conf = parse_conf(black_box(&text)).expect("valid");
        let ours = t.elapsed();
        assert_eq!(conf.lockspaces.len(), (n - 2).div_ceil(4));
        let c_way = if n <= 10_000 {
            let t = Instant::now();
            black_box(scan_per_lockspace(&text));
            format!("{:.1} ms", t.elapsed().as_secs_f64() * 1e3)
        } else {
            "(skipped: quadratic)".into()
        };
        println!(
            "| {n} | {:.2} ms | {:.0} ns | {c_way} |",
            ours.as_secs_f64() * 1e3,
            ours.as_secs_f64() * 1e9 / n as f64
        );
    }
}
