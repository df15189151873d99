//! `dlm_tool lockdump` and `lockdebug`: the kernel's lock tables from debugfs
//! (`/sys/kernel/debug/dlm/<ls>_locks`, `_all`, `_toss`, `_waiters`), formatted as C's
//! `do_lockdump` / `do_lockdebug` do, quirks included. Pure: file texts in, text out.

use std::fmt::Write as _;

const WAITING: i64 = 1;
const GRANTED: i64 = 2;
const CONVERT: i64 = 3;

/// `mode_str`.
fn mode_str(mode: i64) -> &'static str {
    match mode {
        -1 => "IV",
        0 => "NL",
        1 => "CR",
        2 => "CW",
        3 => "PR",
        4 => "PW",
        5 => "EX",
        _ => "??",
    }
}

/// `msg_str`.
fn msg_str(t: i64) -> &'static str {
    match t {
        1 => "request",
        2 => "convert",
        3 => "unlock ",
        4 => "cancel ",
        5 => "r_reply",
        6 => "c_reply",
        7 => "u_reply",
        8 => "c_reply",
        9 => "grant  ",
        10 => "bast   ",
        11 => "lookup ",
        12 => "remove ",
        13 => "l_reply",
        14 => "purge  ",
        _ => "unknown",
    }
}

/// `%d`-style: an optional sign and decimal digits.
fn dec(w: &str) -> Option<i64> {
    w.parse().ok()
}

/// `%x`-style: hex digits (an optional `0x`).
fn hex(w: &str) -> Option<u64> {
    u64::from_str_radix(w.trim_start_matches("0x"), 16).ok()
}

/// `sscanf`'s count of leading conversions that succeed, with `kinds` one letter per
/// conversion (`s` word, `d` signed, `u` unsigned, `x` hex), and their values.
fn scan(line: &str, kinds: &str) -> (usize, Vec<i64>, Vec<String>) {
    let mut words = line.split_whitespace();
    let mut nums = Vec::new();
    let mut strs = Vec::new();
    for (i, k) in kinds.chars().enumerate() {
        let Some(w) = words.next() else {
            return (i, nums, strs);
        };
        let ok = match k {
            's' => {
                strs.push(w.to_owned());
                nums.push(0);
                true
            }
            'x' => hex(w)
                .map(|v| nums.push(i64::try_from(v).unwrap_or(i64::MAX)))
                .is_some(),
            _ => dec(w).map(|v| nums.push(v)).is_some(),
        };
        if !ok {
            return (i, nums, strs);
        }
    }
    (kinds.len(), nums, strs)
}

/// The line after its first `n` whitespace-separated fields and the whitespace after them.
fn nth_rest(line: &str, n: usize) -> &str {
    let mut rest = line;
    for _ in 0..n {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = &rest[end..];
    }
    rest.trim_start()
}

/// The text of the line after the resource name's format word (`strstr(line, namefmt) + 4`).
fn name_after(line: &str, fmt: &str) -> Option<String> {
    let at = line.find(fmt)?;
    Some(line.get(at + 4..).unwrap_or("").to_owned())
}

fn pr_name(out: &mut String, namelen: i64, fmt: &str, name: &str) -> bool {
    if fmt.starts_with("str") {
        let _ = writeln!(out, "Resource len {namelen:2}  \"{name}\"");
    } else if fmt.starts_with("hex") {
        let _ = writeln!(out, "Resource len {namelen:2} hex {name}");
    } else {
        return false;
    }
    true
}

/// `do_lockdump` over the `<ls>_locks` text (its first line a header); `mstcpy` (`-M`)
/// shows master copies too. Returns (stdout, stderr).
pub(crate) fn lockdump(text: &str, mstcpy: bool) -> (String, String) {
    let mut out = String::new();
    for line in text.split_inclusive('\n').skip(1) {
        let (rv, n, _) = scan(line, "xdxuuxxdddudd");
        if rv != 13 {
            return (out, format!("invalid debugfs line {rv}: {line}"));
        }
        // parse_r_name: between the first two quotes
        let r_name = line
            .split_once('"')
            .map_or("", |(_, r)| r.split_once('"').map_or(r, |(n, _)| n));
        let (id, nodeid, pid, status, gr, mut rq, r_nodeid) =
            (n[0], n[1], n[3], n[7], n[8], n[9], n[11]);
        if r_nodeid == 0 && nodeid != 0 {
            if !mstcpy {
                continue;
            }
            let _ = writeln!(
                out,
                "id {id:08x} gr {} rq {} pid {pid} MSTCPY {nodeid} \"{r_name}\"",
                mode_str(gr),
                mode_str(rq)
            );
            continue;
        }
        if status == GRANTED {
            rq = -1;
        }
        let _ = writeln!(
            out,
            "id {id:08x} gr {} rq {} pid {pid} master {nodeid} \"{r_name}\"",
            mode_str(gr),
            mode_str(rq)
        );
    }
    (out, String::new())
}

/// Options of `lockdebug`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DebugOpts {
    /// `-v`
    pub(crate) verbose: bool,
    /// `-w`
    pub(crate) wide: bool,
    /// `-s`
    pub(crate) summarize: bool,
}

#[derive(Debug, Default)]
struct Rinfo {
    nodeid: i64,
    namelen: i64,
    lvb: bool,
    lkb_count: u32,
    lkb_granted: u32,
    lkb_convert: u32,
    lkb_waiting: u32,
    lkb_lookup: u32,
    lkb_wait_msg: u32,
    lkb_master_copy: u32,
    lkb_local_copy: u32,
    lkb_process_copy: u32,
    print_granted: u32,
    print_convert: u32,
    print_waiting: u32,
    print_lookup: u32,
}

impl Rinfo {
    fn cleared() -> Self {
        Self {
            nodeid: -9,
            ..Self::default()
        }
    }
}

#[derive(Debug, Default)]
struct Summary {
    rsb_total: u32,
    rsb_with_lvb: u32,
    rsb_no_locks: u32,
    rsb_master: u32,
    rsb_lookup: u32,
    rsb_local: u32,
    rsb_nodeid_error: u32,
    lkb_count: u32,
    lkb_granted: u32,
    lkb_convert: u32,
    lkb_waiting: u32,
    lkb_lookup: u32,
    lkb_wait_msg: u32,
    lkb_master_copy: u32,
    lkb_local_copy: u32,
    lkb_process_copy: u32,
    expect_replies: u32,
    toss_total: u32,
}

/// `count_rinfo`.
fn count_rinfo(out: &mut String, s: &mut Summary, ri: &Rinfo) {
    if ri.namelen == 0 {
        return;
    }
    s.rsb_total += 1;
    if ri.lvb {
        s.rsb_with_lvb += 1;
    }
    if ri.lkb_count == 0 {
        s.rsb_no_locks += 1;
        out.push_str("no locks\n");
    }
    match ri.nodeid {
        0 => s.rsb_master += 1,
        -1 => s.rsb_lookup += 1,
        n if n > 0 => s.rsb_local += 1,
        _ => s.rsb_nodeid_error += 1,
    }
    s.lkb_count += ri.lkb_count;
    s.lkb_granted += ri.lkb_granted;
    s.lkb_convert += ri.lkb_convert;
    s.lkb_waiting += ri.lkb_waiting;
    s.lkb_lookup += ri.lkb_lookup;
    s.lkb_wait_msg += ri.lkb_wait_msg;
    s.lkb_master_copy += ri.lkb_master_copy;
    s.lkb_local_copy += ri.lkb_local_copy;
    s.lkb_process_copy += ri.lkb_process_copy;
}

/// `print_rsb`.
fn print_rsb(out: &mut String, err: &mut String, line: &str, ri: &mut Rinfo) {
    let (rv, n, s) = scan(line, "ssdsudduus");
    let body = line.strip_suffix('\n');
    let ok = rv == 10
        && body.is_some()
        && {
            ri.nodeid = n[2];
            ri.namelen = n[8];
            true
        }
        && name_after(body.unwrap_or(""), &s[3])
            .is_some_and(|name| pr_name(out, n[8], &s[3], &name));
    if !ok {
        let _ = writeln!(
            err,
            "print_rsb error rv {rv} line \"{}\"",
            line.trim_end_matches('\n')
        );
        return;
    }
    let nodeid = n[2];
    let master = if nodeid > 0 {
        format!("Master:{nodeid}")
    } else if nodeid == 0 {
        "Master".to_owned()
    } else if nodeid == -1 {
        "Lookup".to_owned()
    } else {
        String::new()
    };
    let (first, flags, root, recover, locks) = (&s[2], n[4], n[5], n[6], n[7]);
    let extra = if flags != 0 || first != "0" || root != 0 || recover != 0 || locks != 0 {
        format!(
            "flags {:08x} first_lkid {first} root {root} recover {recover} locks {locks}",
            flags & 0xffff_ffff
        )
    } else {
        String::new()
    };
    let _ = writeln!(out, "{master:<16} {extra}");
}

/// `print_lvb`.
fn print_lvb(out: &mut String, err: &mut String, line: &str, wide: bool) {
    let (rv, n, _) = scan(line, "sud");
    // `%[0-9A-Fa-f ]` after the third field and the whitespace before it
    let lvb: String = nth_rest(line, 3)
        .chars()
        .take_while(|c| c.is_ascii_hexdigit() || *c == ' ')
        .collect();
    if rv != 3 || lvb.is_empty() {
        let _ = writeln!(err, "print_lvb error rv {rv} line \"{line}\"");
        return;
    }
    let (seq, len) = (n[1], n[2]);
    let _ = writeln!(out, "LVB len {len} seq {seq}");
    let mut c = 0i64;
    for ch in lvb.chars() {
        out.push(ch);
        if ch != ' ' {
            c += 1;
        }
        if !wide && ch == ' ' && c % 32 == 0 {
            out.push('\n');
        }
        if c == len * 2 {
            break;
        }
    }
    out.push('\n');
}

/// `print_lkb`.
fn print_lkb(out: &mut String, line: &str, ri: &mut Rinfo, o: DebugOpts) {
    let (_, mut n, _) = scan(line, "sxdxuuxxddddddduu");
    n.resize(17, 0);
    let (id, nodeid, remid, pid) = (n[1], n[2], n[3], n[4]);
    let (exflags, flags, status, gr, rq) = (n[6], n[7], n[8], n[9], n[10]);
    let (highbast, lookup, wait_type, timestamp, time_bast) = (n[11], n[12], n[13], n[15], n[16]);
    count_lkb(out, ri, status, lookup, wait_type, nodeid);
    let grmode = if status == GRANTED || status == CONVERT {
        mode_str(gr).to_owned()
    } else if status == WAITING || lookup != 0 {
        "--".to_owned()
    } else {
        "XX".to_owned()
    };
    let rqmode = if status == GRANTED {
        "    ".to_owned()
    } else if status == CONVERT || status == WAITING || lookup != 0 {
        format!("({})", mode_str(rq))
    } else {
        "(XX)".to_owned()
    };
    let remote = if nodeid == 0 {
        " ".repeat(20)
    } else if nodeid != ri.nodeid {
        format!("Remote: {nodeid:3} {:08x}", remid & 0xffff_ffff)
    } else {
        format!("Master: {nodeid:3} {:08x}", remid & 0xffff_ffff)
    };
    let wait = if wait_type == 0 {
        " ".repeat(8)
    } else {
        format!(" wait {wait_type:02}")
    };
    let verbose = format!(
        "time {timestamp:016} flags {:08x} {:08x} bast {highbast} {time_bast} pid {pid}",
        exflags & 0xffff_ffff,
        flags & 0xffff_ffff
    );
    let tail = if o.verbose && o.wide {
        verbose.as_str()
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "{:08x} {grmode} {rqmode} {remote} {wait} {tail}",
        id & 0xffff_ffff
    );
    if o.verbose && !o.wide {
        let _ = writeln!(out, "{verbose}");
    }
}

/// `print_lkb`'s counts, and the heading of each queue before its first lock.
fn count_lkb(
    out: &mut String,
    ri: &mut Rinfo,
    status: i64,
    lookup: i64,
    wait_type: i64,
    nodeid: i64,
) {
    ri.lkb_count += 1;
    if status == GRANTED {
        queue_lock(out, "Granted", &mut ri.print_granted, &mut ri.lkb_granted);
    }
    if status == CONVERT {
        queue_lock(out, "Convert", &mut ri.print_convert, &mut ri.lkb_convert);
    }
    if status == WAITING {
        queue_lock(out, "Waiting", &mut ri.print_waiting, &mut ri.lkb_waiting);
    }
    if lookup != 0 {
        queue_lock(out, "Lookup", &mut ri.print_lookup, &mut ri.lkb_lookup);
    }
    if wait_type != 0 {
        ri.lkb_wait_msg += 1;
    }
    if ri.nodeid == 0 {
        if nodeid != 0 {
            ri.lkb_master_copy += 1;
        } else {
            ri.lkb_local_copy += 1;
        }
    } else {
        ri.lkb_process_copy += 1;
    }
}

/// One more lock of a queue: its heading before the first, and the queue's two counts.
fn queue_lock(out: &mut String, heading: &str, printed: &mut u32, count: &mut u32) {
    if *printed == 0 {
        out.push_str(heading);
        out.push('\n');
    }
    *printed += 1;
    *count += 1;
}

/// `print_rsb_toss`.
fn print_rsb_toss(out: &mut String, err: &mut String, line: &str) -> bool {
    let (rv, n, s) = scan(line, "ssddddsuus");
    let body = line.strip_suffix('\n').unwrap_or(line);
    let ok = rv == 10
        && line.ends_with('\n')
        && name_after(body, &s[3]).is_some_and(|name| pr_name(out, n[8], &s[3], &name));
    if !ok {
        let _ = writeln!(
            err,
            "print_rsb_toss error rv {rv} line \"{}\"",
            line.trim_end_matches('\n')
        );
        return false;
    }
    let (res, master, dir, our) = (n[2], n[3], n[4], n[5]);
    if master == our {
        out.push_str("Master");
    } else {
        let _ = write!(out, "Master:{master}");
    }
    if dir == our {
        out.push_str(" Dir");
    } else {
        let _ = write!(out, " Dir:{dir}");
    }
    if master == our && res != 0 {
        let _ = write!(out, " res_nodeid {res}");
    }
    out.push('\n');
    true
}

/// The texts `do_lockdebug` reads: `<ls>_all` (or the old `<ls>` file), `_toss`,
/// `_waiters` (absent ones `None`).
#[derive(Debug, Default)]
pub(crate) struct DebugFiles {
    /// `<ls>_all`
    pub(crate) all: Option<String>,
    /// `<ls>` (old kernels, printed raw)
    pub(crate) old: Option<String>,
    /// `<ls>_toss`
    pub(crate) toss: Option<String>,
    /// `<ls>_waiters`
    pub(crate) waiters: Option<String>,
}

/// `do_lockdebug`: (stdout, stderr).
pub(crate) fn lockdebug(f: &DebugFiles, o: DebugOpts) -> (String, String) {
    let mut out = String::new();
    let mut err = String::new();
    let mut s = Summary::default();
    let mut ri = Rinfo::default();
    let (text, old) = match (&f.all, &f.old) {
        (Some(t), _) => (t.as_str(), false),
        (None, Some(t)) => (t.as_str(), true),
        (None, None) => return (out, err),
    };
    for line in text.split_inclusive('\n') {
        if old {
            out.push_str(line);
            continue;
        }
        if line.starts_with("version") {
            continue;
        }
        if line.starts_with("rsb") {
            count_rinfo(&mut out, &mut s, &ri);
            ri = Rinfo::cleared();
            out.push('\n');
            print_rsb(&mut out, &mut err, line, &mut ri);
            continue;
        }
        if line.starts_with("lvb") {
            print_lvb(&mut out, &mut err, line, o.wide);
            ri.lvb = true;
            continue;
        }
        if line.starts_with("lkb") {
            print_lkb(&mut out, line, &mut ri, o);
            continue;
        }
        out.push_str(line);
    }
    count_rinfo(&mut out, &mut s, &ri);
    out.push('\n');
    if let Some(t) = &f.toss {
        print_toss(&mut out, &mut err, &mut s, t);
    }
    if let Some(t) = &f.waiters {
        print_waiters(&mut out, &mut s, t);
    }
    if o.summarize {
        print_summary(&mut out, &s);
    }
    (out, err)
}

/// The toss list (`_toss`): each inactive rsb, counted.
fn print_toss(out: &mut String, err: &mut String, s: &mut Summary, t: &str) {
    for line in t.split_inclusive('\n') {
        if line.starts_with("rsb") {
            print_rsb_toss(out, err, line);
            s.toss_total += 1;
            out.push('\n');
        }
    }
}

/// The replies this node expects (`_waiters`), counted.
fn print_waiters(out: &mut String, s: &mut Summary, t: &str) {
    let mut header = false;
    for line in t.split_inclusive('\n') {
        if !header {
            out.push_str("\nExpecting reply\n");
            header = true;
        }
        let (rv, n, _) = scan(line, "xdd");
        if rv != 3 {
            let _ = write!(out, "waiters: {line}");
            continue;
        }
        let body = line.strip_suffix('\n').unwrap_or(line);
        let rname: String = body
            .splitn(4, ' ')
            .nth(3)
            .unwrap_or("")
            .chars()
            .take(64)
            .collect();
        let _ = writeln!(
            out,
            "nodeid {:2} msg {} lkid {:08x} resource \"{rname}\"",
            n[2],
            msg_str(n[1]),
            n[0] & 0xffff_ffff
        );
        s.expect_replies += 1;
    }
}

/// `-s`: the counts of every kind.
fn print_summary(out: &mut String, s: &Summary) {
    let _ = write!(
        out,
        "\nrsb\n  active        {}\n  master        {}\n  remote master {}\n  lookup master {}\n  with lvb      {}\n  with no locks {}\n  nodeid error  {}\n  inactive      {}\n\nlkb\n  total         {}\n  granted       {}\n  convert       {}\n  waiting       {}\n  local copy    {}\n  master copy   {}\n  process copy  {}\n  rsb lookup    {}\n  wait message  {}\n  expect reply  {}\n",
        s.rsb_total,
        s.rsb_master,
        s.rsb_local,
        s.rsb_lookup,
        s.rsb_with_lvb,
        s.rsb_no_locks,
        s.rsb_nodeid_error,
        s.toss_total,
        s.lkb_count,
        s.lkb_granted,
        s.lkb_convert,
        s.lkb_waiting,
        s.lkb_local_copy,
        s.lkb_master_copy,
        s.lkb_process_copy,
        s.lkb_lookup,
        s.lkb_wait_msg,
        s.expect_replies
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `print_lkb`: each queue's heading once, before its first lock; the counts per queue
    /// and per copy kind.
    #[test]
    fn each_queue_is_headed_once_and_counted() {
        let mut out = String::new();
        let mut ri = Rinfo::default();
        count_lkb(&mut out, &mut ri, GRANTED, 0, 0, 0);
        count_lkb(&mut out, &mut ri, GRANTED, 0, 0, 2);
        count_lkb(&mut out, &mut ri, WAITING, 1, 3, 0);
        count_lkb(&mut out, &mut ri, CONVERT, 0, 0, 0);
        assert_eq!(out, "Granted\nWaiting\nLookup\nConvert\n");
        assert_eq!(
            (ri.lkb_count, ri.lkb_granted, ri.lkb_waiting, ri.lkb_convert),
            (4, 2, 1, 1)
        );
        assert_eq!((ri.lkb_lookup, ri.lkb_wait_msg), (1, 1));
        assert_eq!((ri.lkb_master_copy, ri.lkb_local_copy), (1, 3));
    }
}
