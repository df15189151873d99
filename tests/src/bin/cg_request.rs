//! `cg_request FILE REQUESTS-FN [TOP]`: what one request costs in a callgrind profile taken
//! with `--dump-instr=yes --collect-jumps=yes` (`tests/prof/callgrind.sh`), per request:
//! instructions run, distinct instructions (each counted once in a request that runs it:
//! one run every other request counts a half), calls, calls and jumps to another page, and
//! pages of code (those holding an instruction run at least every other request), by
//! object; then the functions with the most distinct instructions. Requests are the calls of every function whose name
//! contains REQUESTS-FN (`=NAME`: named exactly NAME).
//!
//! Under TCG a request's price follows its distinct code (each translated block runs
//! after every address-space switch has emptied the emulator's caches), a call or jump to
//! another page (a lookup of the next block) and the pages it touches, not the instructions
//! it repeats (docs/BENCHMARKS.md, "What one request costs, counted"). This is that count
//! on the host.

use std::collections::HashMap;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(pattern)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: cg_request <callgrind.out> <requests function> [top]");
        return ExitCode::FAILURE;
    };
    let top = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(30);
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cg_request: {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let profile = match Profile::parse(&text) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cg_request: {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let requests = profile.calls_of(pattern);
    if requests == 0 {
        eprintln!("cg_request: no call of a function matching {pattern:?}");
        return ExitCode::FAILURE;
    }
    print!("{}", profile.report(requests, top));
    ExitCode::SUCCESS
}

/// What a profile holds, by instruction address.
#[derive(Debug, Default)]
struct Profile {
    /// Instructions run at each (object, address), and the function it belongs to.
    runs: HashMap<(usize, u64), (u64, usize)>,
    /// Per object: calls, calls to another page (or object), jumps to another page.
    flow: HashMap<usize, Flow>,
    /// Calls made to each function.
    calls_to: HashMap<usize, u64>,
    objects: Names,
    functions: Names,
}

#[derive(Debug, Default, Clone, Copy)]
struct Flow {
    calls: u64,
    far_calls: u64,
    far_jumps: u64,
}

/// Callgrind's compressed names: `(id) name` defines an id, `(id)` uses it.
#[derive(Debug, Default)]
struct Names {
    ids: HashMap<String, usize>,
    names: Vec<String>,
}

impl Names {
    fn resolve(&mut self, spec: &str) -> usize {
        let spec = spec.trim();
        let (id, name) = match spec.strip_prefix('(').and_then(|s| s.split_once(')')) {
            Some((id, rest)) => (Some(id.to_owned()), rest.trim()),
            None => (None, spec),
        };
        if let Some(&i) = id.as_ref().and_then(|id| self.ids.get(id)) {
            if !name.is_empty() {
                name.clone_into(&mut self.names[i]);
            }
            return i;
        }
        let i = self.names.len();
        self.names.push(name.to_owned());
        if let Some(id) = id {
            self.ids.insert(id, i);
        }
        i
    }

    fn name(&self, i: usize) -> &str {
        self.names.get(i).map_or("?", String::as_str)
    }
}

const PAGE_BITS: u32 = 12;

/// One position field: absolute (hex or decimal), `+n`/`-n` from the last, or `*`.
fn position(field: &str, last: u64) -> Result<u64, String> {
    let bad = || format!("bad position {field:?}");
    let number = |s: &str| match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).map_err(|_| bad()),
        None => s.parse::<u64>().map_err(|_| bad()),
    };
    match field.as_bytes().first() {
        Some(b'*') => Ok(last),
        Some(b'+') => Ok(last.wrapping_add(number(&field[1..])?)),
        Some(b'-') => Ok(last.wrapping_sub(number(&field[1..])?)),
        _ => number(field),
    }
}

/// A call or jump line waits for the source position on the next line.
enum Pending {
    Call {
        count: u64,
        target: u64,
        object: usize,
        function: usize,
    },
    Jump {
        count: u64,
        target: u64,
    },
}

/// Two addresses on different pages: the emulator looks the next block up between them.
fn far(a: u64, b: u64) -> bool {
    a >> PAGE_BITS != b >> PAGE_BITS
}

/// Where the reading of a profile stands: the object and function its cost lines are of,
/// the callee the next call line names, the last position, and a call or jump line waiting
/// for its source position.
struct Reader {
    object: usize,
    function: usize,
    call_object: Option<usize>,
    call_function: usize,
    last: u64,
    pending: Option<Pending>,
}

impl Reader {
    /// One line of the profile into `p`.
    fn line(&mut self, p: &mut Profile, line: &str) -> Result<(), String> {
        if let Some(v) = line.strip_prefix("ob=") {
            self.object = p.objects.resolve(v);
        } else if let Some(v) = line.strip_prefix("cob=") {
            self.call_object = Some(p.objects.resolve(v));
        } else if let Some(v) = line.strip_prefix("fn=") {
            self.function = p.functions.resolve(v);
        } else if let Some(v) = line.strip_prefix("cfn=") {
            self.call_function = p.functions.resolve(v);
        } else if let Some(v) = line.strip_prefix("calls=") {
            let mut f = v.split_whitespace();
            let count = f.next().and_then(|c| c.parse().ok()).ok_or("bad calls=")?;
            let target = position(f.next().ok_or("calls= without a target")?, self.last)?;
            self.pending = Some(Pending::Call {
                count,
                target,
                object: self.call_object.take().unwrap_or(self.object),
                function: self.call_function,
            });
        } else if let Some(v) = line
            .strip_prefix("jump=")
            .or_else(|| line.strip_prefix("jcnd="))
        {
            let mut f = v.split_whitespace();
            // jcnd=<taken>/<executed>: the jumps taken
            let taken = f.next().and_then(|c| c.split('/').next());
            let count = taken.and_then(|c| c.parse().ok()).ok_or("bad jump=")?;
            let target = position(f.next().ok_or("jump= without a target")?, self.last)?;
            self.pending = Some(Pending::Jump { count, target });
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            self.cost(p, line)?;
        }
        Ok(())
    }

    /// A cost line: its instruction's position (`0x…`, `+n`, `-n`, `*`), its line number,
    /// then the instructions run there; after a call or jump line, that line's source.
    fn cost(&mut self, p: &mut Profile, line: &str) -> Result<(), String> {
        let mut f = line.split_whitespace();
        let at = position(f.next().unwrap_or("*"), self.last)?;
        self.last = at;
        match self.pending.take() {
            Some(Pending::Call {
                count,
                target,
                object,
                function,
            }) => {
                let flow = p.flow.entry(self.object).or_default();
                flow.calls += count;
                if object != self.object || far(target, at) {
                    flow.far_calls += count;
                }
                *p.calls_to.entry(function).or_default() += count;
            }
            Some(Pending::Jump { count, target }) => {
                if far(target, at) {
                    p.flow.entry(self.object).or_default().far_jumps += count;
                }
            }
            None => {
                let ir = f.nth(1).and_then(|c| c.parse::<u64>().ok()).unwrap_or(0);
                let e = p
                    .runs
                    .entry((self.object, at))
                    .or_insert((0, self.function));
                e.0 += ir;
            }
        }
        Ok(())
    }
}

impl Profile {
    fn parse(text: &str) -> Result<Self, String> {
        let mut p = Self::default();
        if !text.lines().any(|l| l.trim() == "positions: instr line") {
            return Err("not a profile with --dump-instr=yes (positions: instr line)".into());
        }
        let unknown = p.functions.resolve("?");
        let mut r = Reader {
            object: p.objects.resolve("?"),
            function: unknown,
            call_object: None,
            call_function: unknown,
            last: 0,
            pending: None,
        };
        for line in text.lines() {
            r.line(&mut p, line.trim_end())?;
        }
        Ok(p)
    }

    /// Calls of every function named like `pattern` (`=name`: exactly `name`).
    fn calls_of(&self, pattern: &str) -> u64 {
        let matches = |name: &str| match pattern.strip_prefix('=') {
            Some(exact) => name == exact,
            None => name.contains(pattern),
        };
        self.calls_to
            .iter()
            .filter(|(f, _)| matches(self.functions.name(**f)))
            .map(|(_, n)| n)
            .sum()
    }

    /// Per object (heaviest first) and per function: what runs, and how much of it a
    /// request runs at least once (distinct).
    fn tally(&self, requests: u64) -> Tallies {
        let mut objects: HashMap<usize, Tally> = HashMap::new();
        let mut functions: HashMap<usize, f64> = HashMap::new();
        for (&(object, at), &(runs, function)) in &self.runs {
            let t = objects.entry(object).or_default();
            t.runs += runs;
            // once per request at most: what one request runs of it
            #[allow(clippy::cast_precision_loss)]
            let share = (runs as f64 / requests as f64).min(1.0);
            t.distinct += share;
            *functions.entry(function).or_default() += share;
            if runs.saturating_mul(2) >= requests {
                t.pages.insert(at >> PAGE_BITS);
            }
        }
        let mut objects: Vec<_> = objects.into_iter().collect();
        objects.sort_by_key(|(o, t)| (std::cmp::Reverse(t.runs), *o));
        let mut functions: Vec<_> = functions.into_iter().collect();
        functions.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        (objects, functions)
    }

    /// The per-request table and the top functions by distinct instructions.
    fn report(&self, requests: u64, top: usize) -> String {
        use std::fmt::Write as _;
        let (objects, functions) = self.tally(requests);
        let mut out = format!("requests {requests}\n");
        let _ = writeln!(
            out,
            "{:<28} {:>9} {:>9} {:>7} {:>9} {:>9} {:>6}",
            "object", "instr", "distinct", "calls", "far calls", "far jumps", "pages"
        );
        let mut total = Row::default();
        for (object, t) in objects {
            let flow = self.flow.get(&object).copied().unwrap_or_default();
            let row = Row::of(&t, flow, requests);
            if row.instr < 1.0 {
                continue;
            }
            let name = self.objects.name(object);
            row.write(&mut out, name.rsplit('/').next().unwrap_or(name));
            total.add(&row);
        }
        total.write(&mut out, "total");
        let _ = writeln!(out, "distinct instructions by function:");
        for (f, d) in functions.into_iter().take(top) {
            let _ = writeln!(out, "{d:>7.1} {}", self.functions.name(f));
        }
        out
    }
}

/// Objects with their tallies (heaviest first), functions with their distinct
/// instructions (most first).
type Tallies = (Vec<(usize, Tally)>, Vec<(usize, f64)>);

/// One object's instructions: run in all, distinct, and the pages those are on.
#[derive(Debug, Default)]
struct Tally {
    runs: u64,
    distinct: f64,
    pages: std::collections::BTreeSet<u64>,
}

/// One line of the table, per request.
#[derive(Debug, Default)]
struct Row {
    instr: f64,
    distinct: f64,
    calls: f64,
    far_calls: f64,
    far_jumps: f64,
    pages: usize,
}

impl Row {
    fn of(t: &Tally, flow: Flow, requests: u64) -> Self {
        #[allow(clippy::cast_precision_loss)]
        let per = |x: u64| x as f64 / requests as f64;
        Self {
            instr: per(t.runs),
            distinct: t.distinct,
            calls: per(flow.calls),
            far_calls: per(flow.far_calls),
            far_jumps: per(flow.far_jumps),
            pages: t.pages.len(),
        }
    }

    fn add(&mut self, r: &Self) {
        self.instr += r.instr;
        self.distinct += r.distinct;
        self.calls += r.calls;
        self.far_calls += r.far_calls;
        self.far_jumps += r.far_jumps;
        self.pages += r.pages;
    }

    fn write(&self, out: &mut String, name: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "{name:<28} {:>9.0} {:>9.0} {:>7.1} {:>9.1} {:>9.1} {:>6}",
            self.instr, self.distinct, self.calls, self.far_calls, self.far_jumps, self.pages
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two requests of `handle` (called from `main`, a page away), which runs two
    /// instructions twice each and one instruction once; a jump within its page and one to
    /// the next page; a libc call across objects.
    const PROFILE: &str = "\
# callgrind format
version: 1
positions: instr line
events: Ir

ob=(1) /usr/bin/daemon
fl=(1) main.rs
fn=(1) main
0x1000 10 2
cfn=(2) handle
calls=2 0x3000 20
+4 11 8
+6 12 2

fn=(2)
0x3000 20 2
+2 * 2
jump=2 +8 *
* *
+3 21 1
jcnd=1/2 0x4000 30
* *
cob=(2) /usr/lib/libc.so.6
cfn=(3) write
calls=2 0x9000 0
+1 * 6
ob=(2)
fn=(3)
0x9000 0 6
";

    #[test]
    fn positions_follow_the_last_one() {
        assert_eq!(position("0x10", 5), Ok(16));
        assert_eq!(position("+3", 16), Ok(19));
        assert_eq!(position("-4", 16), Ok(12));
        assert_eq!(position("*", 16), Ok(16));
        assert_eq!(position("12", 0), Ok(12));
        assert!(position("0xzz", 0).is_err());
        assert!(position("+x", 0).is_err());
    }

    #[test]
    fn a_profile_is_counted_per_request() {
        let p = Profile::parse(PROFILE).expect("parses");
        assert_eq!(p.calls_of("handle"), 2);
        assert_eq!(p.calls_of("=write"), 2);
        assert_eq!(p.calls_of("=writ"), 0, "an exact name");
        let daemon = p.objects.ids["1"];
        let libc = p.objects.ids["2"];
        // main: 0x1000 run twice; its call site's inclusive cost is not its own
        assert_eq!(p.runs[&(daemon, 0x1000)].0, 2);
        assert!(
            !p.runs.contains_key(&(daemon, 0x1004)),
            "a call site's cost"
        );
        assert_eq!(p.runs[&(daemon, 0x100a)].0, 2);
        // handle: 0x3000 and 0x3002 twice, 0x3005 once (the jump lines move nothing)
        assert_eq!(p.runs[&(daemon, 0x3002)].0, 2);
        assert_eq!(p.runs[&(daemon, 0x3005)].0, 1);
        assert_eq!(p.runs[&(libc, 0x9000)].0, 6);
        let flow = p.flow[&daemon];
        assert_eq!(flow.calls, 4, "two of handle, two of write");
        assert_eq!(flow.far_calls, 4, "a page away, and another object");
        assert_eq!(flow.far_jumps, 1, "the jump to 0x4000, taken once");
        let report = p.report(2, 10);
        // daemon: 2 + 2 + 2 + 2 + 1 = 9 instructions (4.5 a request), 4.5 distinct (0x3005
        // runs in every other request), on 2 pages
        assert!(report.contains("daemon"), "{report}");
        let row = report
            .lines()
            .find(|l| l.starts_with("daemon"))
            .expect("a row");
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            fields[1..],
            ["4", "4", "2.0", "2.0", "0.5", "2"],
            "{report}"
        );
        let libc_row = report.lines().find(|l| l.starts_with("libc")).expect("row");
        assert!(libc_row.split_whitespace().nth(1) == Some("3"), "{report}");
        assert!(report.contains("    2.5 handle"), "{report}");
        assert!(report.contains("    2.0 main"), "{report}");
    }

    #[test]
    fn a_profile_without_instructions_is_refused() {
        let err = Profile::parse("positions: line\nevents: Ir\n").expect_err("refused");
        assert!(err.contains("--dump-instr"), "{err}");
    }
}
