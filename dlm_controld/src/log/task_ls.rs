//! The lockspace a task works for, named to the log layer while the task is polled: what
//! a `lockspace` span entered at every poll gave, without the span registry's work per
//! poll (a span's enter and exit at every poll cost a busy lockspace task CPU on every
//! delivered message).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

thread_local! {
    /// The lockspace whose task this thread is polling, if any.
    static POLLED: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// The lockspace of the task being polled on this thread (for events with no `ls` field
/// and no `lockspace` span).
pub(crate) fn current() -> Option<String> {
    POLLED.with(|p| p.borrow().as_deref().map(str::to_owned))
}

/// `fut`, whose events name lockspace `name`.
pub fn in_lockspace<F: Future>(name: Arc<str>, fut: F) -> InLockspace<F> {
    InLockspace {
        name: Some(name),
        inner: Box::pin(fut),
    }
}

/// `f`, whose events name lockspace `name` (the plock device's reader performing a
/// request of that lockspace in place, outside its task); the name before is put back.
pub fn named<T>(name: Arc<str>, f: impl FnOnce() -> T) -> T {
    let before = POLLED.with(|p| p.replace(Some(name)));
    let _named = Restore(before);
    f()
}

/// Puts back the name a [`named`] call found, even by a panic.
struct Restore(Option<Arc<str>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let before = self.0.take();
        POLLED.with(|p| p.replace(before));
    }
}

/// A future polled with its lockspace named (see [`in_lockspace`]).
pub struct InLockspace<F> {
    /// Out while the inner future is polled (moved, not cloned: no atomic per poll).
    name: Option<Arc<str>>,
    inner: Pin<Box<F>>,
}

impl<F> std::fmt::Debug for InLockspace<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InLockspace")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Puts the name back where it was when the poll ends, even by a panic.
struct Named<'a> {
    slot: &'a mut Option<Arc<str>>,
    before: Option<Arc<str>>,
}

impl Drop for Named<'_> {
    fn drop(&mut self) {
        let before = self.before.take();
        *self.slot = POLLED.with(|p| p.replace(before));
    }
}

impl<F: Future> Future for InLockspace<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Unpin: the inner future is boxed
        let this = self.get_mut();
        let before = POLLED.with(|p| p.replace(this.name.take()));
        let _named = Named {
            slot: &mut this.name,
            before,
        };
        this.inner.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(f).poll(&mut cx)
    }

    #[test]
    fn named_while_polled_and_restored_after() {
        let mut seen = Vec::new();
        let mut inner_ready = false;
        let mut f = in_lockspace(
            Arc::from("ls1"),
            std::future::poll_fn(|_| {
                seen.push(current());
                if std::mem::replace(&mut inner_ready, true) {
                    Poll::Ready(7)
                } else {
                    Poll::Pending
                }
            }),
        );
        assert_eq!(current(), None);
        assert_eq!(poll_once(&mut f), Poll::Pending);
        assert_eq!(current(), None, "not named between polls");
        assert_eq!(poll_once(&mut f), Poll::Ready(7));
        drop(f);
        assert_eq!(seen, [Some("ls1".to_owned()), Some("ls1".to_owned())]);
    }

    #[test]
    fn a_call_is_named_and_the_name_before_restored() {
        assert_eq!(current(), None);
        let ls: Arc<str> = Arc::from("ls2");
        assert_eq!(named(ls.clone(), current), Some("ls2".to_owned()));
        assert_eq!(current(), None);
        let outer: Arc<str> = Arc::from("outer");
        let inner = named(outer, || (named(ls, current), current()));
        assert_eq!(inner, (Some("ls2".to_owned()), Some("outer".to_owned())));
        assert_eq!(current(), None);
    }

    #[test]
    fn nested_tasks_restore_the_outer_name() {
        let mut inner = in_lockspace(
            Arc::from("inner"),
            std::future::poll_fn(|_| Poll::Ready(current())),
        );
        let mut outer = in_lockspace(
            Arc::from("outer"),
            std::future::poll_fn(move |cx| {
                let Poll::Ready(i) = Pin::new(&mut inner).poll(cx) else {
                    return Poll::Pending;
                };
                Poll::Ready((i, current()))
            }),
        );
        assert_eq!(
            poll_once(&mut outer),
            Poll::Ready((Some("inner".to_owned()), Some("outer".to_owned())))
        );
        assert_eq!(current(), None);
    }

    #[test]
    fn a_panicking_poll_leaves_no_name_behind() {
        let mut f = in_lockspace(
            Arc::from("boom"),
            std::future::poll_fn(|_| -> Poll<()> { panic!("a task's bug") }),
        );
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_once(&mut f)));
        assert!(r.is_err());
        assert_eq!(current(), None);
    }
}
