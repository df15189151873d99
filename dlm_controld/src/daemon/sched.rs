//! How the clients thread is scheduled. A `dlm_tool ls` connection wakes it on cores that
//! plock work (and corosync, real-time) keeps busy; as an ordinary thread it waited for the
//! running thread's slice to end, seen at the next tick of a kernel without preemption
//! (docs/BENCHMARKS.md, "Settings chosen by measurement"). Under `SCHED_DEADLINE` it runs at
//! once, and the kernel keeps it within its budget (`clients_cpu_budget_us` of every
//! [`PERIOD`]): a flood of queries from local users can take no more than that share of
//! one CPU from plock work, less than an ordinary thread could. Where the kernel refuses
//! it (no `CAP_SYS_NICE`, an affinity narrower than the machine, a full deadline
//! bandwidth), or with a budget of 0, the thread asks for the shortest slice instead
//! (EEVDF, Linux 6.12 and later, lets a woken thread with a shorter slice preempt; older
//! kernels take the call and ignore it). Threads it starts are ordinary again
//! (`SCHED_FLAG_RESET_ON_FORK`): a deadline thread may not fork otherwise.

use std::io;
use std::time::Duration;

/// The period of the clients thread's budget.
pub(crate) const PERIOD: Duration = Duration::from_millis(10);

/// The slice asked for without a deadline: the kernel's least.
const SHORT_SLICE: Duration = Duration::from_micros(100);

/// How the clients thread ended up scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheduled {
    /// `SCHED_DEADLINE` with this budget per [`PERIOD`].
    Deadline(Duration),
    /// `SCHED_OTHER` with the short slice (the kernel may ignore it).
    ShortSlice,
    /// Neither was taken; the thread stays as it was.
    Unchanged,
}

/// Schedules the calling thread (the clients thread): `budget` of every [`PERIOD`] under
/// `SCHED_DEADLINE`, or the short slice when `budget` is zero or the deadline is refused.
/// The errors met are returned with the outcome, for the log.
pub(crate) fn clients_thread(budget: Duration) -> (Scheduled, Vec<io::Error>) {
    let mut errors = Vec::new();
    if !budget.is_zero() {
        match set(&SchedAttr::deadline(budget, PERIOD)) {
            Ok(()) => return (Scheduled::Deadline(budget.min(PERIOD)), errors),
            Err(e) => errors.push(e),
        }
    }
    match short_slice() {
        Ok(()) => (Scheduled::ShortSlice, errors),
        Err(e) => {
            errors.push(e);
            (Scheduled::Unchanged, errors)
        }
    }
}

/// `struct sched_attr` as of Linux 3.14 (`SCHED_ATTR_SIZE_VER0`).
#[repr(C)]
#[derive(Debug, Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    /// `SCHED_DEADLINE`: the budget; `SCHED_OTHER`: the slice (Linux 6.12 and later).
    runtime: u64,
    deadline: u64,
    period: u64,
}

const SCHED_ATTR_SIZE_VER0: u32 = 48;
/// `SCHED_DEADLINE` (not among the libc crate's constants).
const SCHED_DEADLINE: u32 = 6;
/// `SCHED_FLAG_RESET_ON_FORK`.
const RESET_ON_FORK: u64 = 0x01;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl SchedAttr {
    fn deadline(budget: Duration, period: Duration) -> Self {
        Self {
            size: SCHED_ATTR_SIZE_VER0,
            policy: SCHED_DEADLINE,
            flags: RESET_ON_FORK,
            runtime: nanos(budget.min(period)),
            deadline: nanos(period),
            period: nanos(period),
            ..Self::default()
        }
    }
}

/// The short slice, keeping the thread's policy and nice value; a thread not under
/// `SCHED_OTHER` is left as it is.
fn short_slice() -> io::Result<()> {
    let mut attr = get()?;
    if attr.policy != libc::SCHED_OTHER as u32 {
        return Ok(());
    }
    attr.size = SCHED_ATTR_SIZE_VER0;
    attr.runtime = nanos(SHORT_SLICE);
    set(&attr)
}

/// `sched_getattr` of the calling thread.
fn get() -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is a writable sched_attr of the size passed; tid 0 is this thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            SCHED_ATTR_SIZE_VER0,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

/// `sched_setattr` of the calling thread.
fn set(attr: &SchedAttr) -> io::Result<()> {
    // SAFETY: `attr` is an initialized sched_attr whose size field says its size; tid 0 is
    // this thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, attr as *const SchedAttr, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_attr_is_the_kernels_first_layout() {
        assert_eq!(size_of::<SchedAttr>(), SCHED_ATTR_SIZE_VER0 as usize);
    }

    #[test]
    fn a_budget_is_capped_at_its_period() {
        let a = SchedAttr::deadline(Duration::from_millis(50), PERIOD);
        assert_eq!(
            (a.runtime, a.deadline, a.period),
            (10_000_000, 10_000_000, 10_000_000)
        );
        assert_eq!((a.policy, a.flags), (SCHED_DEADLINE, RESET_ON_FORK));
    }

    /// In a thread of its own (the harness's threads are left alone): the deadline when the
    /// kernel grants it (root here), else the short slice; a thread it starts is ordinary.
    #[test]
    fn the_clients_thread_gets_a_deadline_or_the_short_slice() {
        std::thread::spawn(|| {
            let before = get().expect("sched_getattr");
            let (got, errors) = clients_thread(Duration::from_millis(1));
            let now = get().expect("sched_getattr");
            match got {
                Scheduled::Deadline(b) => {
                    assert_eq!(b, Duration::from_millis(1));
                    assert!(errors.is_empty());
                    assert_eq!(now.policy, SCHED_DEADLINE);
                    assert_eq!((now.runtime, now.period), (1_000_000, 10_000_000));
                }
                Scheduled::ShortSlice => {
                    assert_eq!(errors.len(), 1, "the deadline's refusal is reported");
                    assert_eq!((now.policy, now.nice), (before.policy, before.nice));
                }
                Scheduled::Unchanged => panic!("sched_setattr refused both: {errors:?}"),
            }
            let child = std::thread::spawn(|| get().expect("sched_getattr").policy)
                .join()
                .expect("child thread");
            assert_eq!(child, libc::SCHED_OTHER as u32);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn no_budget_asks_for_the_short_slice_alone() {
        std::thread::spawn(|| {
            let before = get().expect("sched_getattr");
            let (got, errors) = clients_thread(Duration::ZERO);
            assert_eq!(got, Scheduled::ShortSlice, "{errors:?}");
            assert!(errors.is_empty());
            let now = get().expect("sched_getattr");
            assert_eq!((now.policy, now.nice), (before.policy, before.nice));
            // Linux 6.12 and later report the slice of a SCHED_OTHER thread
            if kernel_at_least(6, 12) {
                assert_eq!(now.runtime, nanos(SHORT_SLICE));
            }
        })
        .join()
        .expect("thread");
    }

    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|p| p.parse::<u32>().ok());
        let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        have >= (major, minor)
    }
}
