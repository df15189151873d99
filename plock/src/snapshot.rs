//! State transfer to a joining node, as C's `send_all_plocks_data` / `receive_plocks_data`
//! (plock-spec §3.6, §5.4): for each resource in creation order, messages of at most 24
//! entries, granted locks (list order) before waiters (FIFO order), `RD_CONTINUE` on every
//! message after a resource's first, and one message even for a resource with no entries.
//!
//! [`Snapshot`] is a lazy iterator: O(total entries) in all, O(1) per chunk beyond the
//! entries it yields, and no copy of the table.

use dlm_proto::wire::{MAX_PLOCKS_DATA_ENTRIES, PlockData, RD_CONTINUE, ResourceData};

use crate::effects::RestoreError;
use crate::lockspace::Lockspace;

/// One PLOCKS_DATA message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The resource part (`owner` 0, `flags` 0 or `RD_CONTINUE`).
    pub resource: ResourceData,
    entries: [Option<PlockData>; MAX_PLOCKS_DATA_ENTRIES],
    len: usize,
}

impl Chunk {
    /// The entries of this message.
    pub fn entries(&self) -> impl Iterator<Item = PlockData> + '_ {
        self.entries[..self.len].iter().flatten().copied()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the message carries no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Iterator over the PLOCKS_DATA messages of a whole table.
#[derive(Debug)]
pub struct Snapshot<'a> {
    ls: &'a Lockspace,
    cursor: SnapshotCursor,
}

impl<'a> Snapshot<'a> {
    pub(crate) fn new(ls: &'a Lockspace) -> Self {
        Self {
            ls,
            cursor: SnapshotCursor::new(ls),
        }
    }
}

/// The position in a state transfer stream, owned (no borrow of the table), so a sender can
/// hand out a portion at a time between other work. The table must not change between the
/// cursor's creation and its end: the caller holds back applying messages meanwhile.
#[derive(Debug, Clone)]
pub struct SnapshotCursor {
    resources: Vec<u32>,
    next_resource: usize,
    /// Position inside the current resource: the entries already sent.
    sent: usize,
    /// The current resource, if one is being sent.
    current: Option<u32>,
    /// Its entries, locks (list order) then waiters (FIFO); the buffer is reused for every
    /// resource, so the stream allocates nothing per resource.
    entries: Vec<PlockData>,
}

impl SnapshotCursor {
    fn new(ls: &Lockspace) -> Self {
        Self {
            resources: ls.resources_in_order().collect(),
            next_resource: 0,
            sent: 0,
            current: None,
            entries: Vec::new(),
        }
    }

    /// The next message of the stream of `ls` (the table the cursor was made from,
    /// unchanged since), or `None` at the end.
    pub fn next_chunk(&mut self, ls: &Lockspace) -> Option<Chunk> {
        next_chunk(self, ls)
    }
}

fn entry(
    nodeid: i32,
    start: u64,
    end: u64,
    owner: u64,
    pid: u32,
    ex: bool,
    waiter: bool,
) -> PlockData {
    PlockData {
        start,
        end,
        owner,
        pid,
        nodeid: u32::try_from(nodeid).unwrap_or(0),
        ex,
        waiter,
    }
}

impl Iterator for Snapshot<'_> {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        next_chunk(&mut self.cursor, self.ls)
    }
}

fn next_chunk(c: &mut SnapshotCursor, ls: &Lockspace) -> Option<Chunk> {
    if c.current.is_none() {
        let r = *c.resources.get(c.next_resource)?;
        c.next_resource += 1;
        let locks = ls
            .locks_of(r)
            .map(|(start, end, l)| entry(l.nodeid, start, end, l.owner, l.pid, l.ex, false));
        let waiters = ls.waiters_of(r).map(|w| {
            let w = &w.info;
            entry(w.nodeid, w.start, w.end, w.owner, w.pid, w.ex, true)
        });
        c.entries.clear();
        c.entries.extend(locks.chain(waiters));
        c.current = Some(r);
        c.sent = 0;
    }
    let r = c.current?;
    let total = c.entries.len();
    let mut chunk = Chunk {
        resource: ResourceData {
            number: ls.res(r).number,
            owner: 0,
            flags: if c.sent == 0 { 0 } else { RD_CONTINUE },
        },
        entries: [None; MAX_PLOCKS_DATA_ENTRIES],
        len: 0,
    };
    while chunk.len < MAX_PLOCKS_DATA_ENTRIES && c.sent < total {
        let e = c.entries[c.sent];
        chunk.entries[chunk.len] = Some(e);
        chunk.len += 1;
        c.sent += 1;
    }
    if c.sent >= total {
        c.current = None;
    }
    Some(chunk)
}

impl Lockspace {
    /// The state transfer stream of this table, lazily.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot::new(self)
    }

    /// The same stream as a cursor that does not borrow the table (see [`SnapshotCursor`]).
    pub fn snapshot_cursor(&self) -> SnapshotCursor {
        SnapshotCursor::new(self)
    }

    /// Applies one received PLOCKS_DATA message (`receive_plocks_data`, default mode).
    /// `now` stamps the restored entries' ages.
    pub fn restore(
        &mut self,
        now: u64,
        resource: ResourceData,
        entries: impl IntoIterator<Item = PlockData>,
    ) -> Result<(), RestoreError> {
        if resource.owner != 0 {
            return Err(RestoreError::Owned {
                number: resource.number,
                owner: resource.owner,
            });
        }
        let entries: Vec<PlockData> = entries.into_iter().collect();
        for e in &entries {
            if i32::try_from(e.nodeid).is_err() {
                return Err(RestoreError::NodeId(e.nodeid));
            }
        }
        let r = if resource.flags & RD_CONTINUE != 0 {
            self.find_promoted(resource.number)
                .ok_or(RestoreError::UnknownContinuation(resource.number))?
        } else {
            if self.find(resource.number).is_some() {
                return Err(RestoreError::Duplicate(resource.number));
            }
            self.find_or_create(resource.number)
        };
        for e in &entries {
            let nodeid = i32::try_from(e.nodeid).unwrap_or(i32::MAX);
            self.restore_entry(r, e, nodeid, now);
        }
        // C keeps a resource sent with no entries until some operation frees it; it has no
        // effect but a dump line, so it is not kept here. One lock and no waiter: inline.
        self.settle(r);
        Ok(())
    }
}
