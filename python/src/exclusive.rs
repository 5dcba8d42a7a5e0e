//! One native object, many Python threads: each call has the object to itself.
//!
//! A machine, a stream decoder or a retry budget may be reached from several threads (a
//! retry budget is meant to be: one per process, shared by every machine). A call takes the
//! object for its whole length, and a call from another thread waits for it with the GIL
//! released, so the two run one after the other, never interleaved. Python code that runs
//! inside a call (a `__del__` the garbage collector starts while the call builds its
//! result) and calls the same object again would wait for itself: that call raises
//! [`ReentrantCallError`] instead.

use crate::errors::ReentrantCallError;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// A value that one call at a time may use.
pub(crate) struct Exclusive<T> {
    value: Mutex<T>,
    /// The thread whose call holds the value ([`thread_token`]), 0 when none does.
    holder: AtomicUsize,
    /// What the value is, for the error of a reentrant call (`"this machine"`).
    name: &'static str,
}

impl<T: Send> Exclusive<T> {
    /// `value`, named `name` in errors.
    pub(crate) fn new(value: T, name: &'static str) -> Self {
        Exclusive {
            value: Mutex::new(value),
            holder: AtomicUsize::new(0),
            name,
        }
    }

    /// Runs `f` with the value to itself, waiting (GIL released) while a call on another
    /// thread has it.
    pub(crate) fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut T) -> PyResult<R>,
    ) -> PyResult<R> {
        let mut guard = self.take(py)?;
        let result = f(&mut guard);
        self.holder.store(0, Ordering::Release);
        result
    }

    fn take(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, T>> {
        let me = thread_token();
        loop {
            let guard = match self.value.try_lock() {
                Ok(guard) => guard,
                // A panic inside a call (a bug, raised as PanicException) left the value as
                // it was when the panic struck; the next call goes on with it.
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    if self.holder.load(Ordering::Acquire) == me {
                        return Err(ReentrantCallError::new_err(format!(
                            "{} was called again from inside one of its own calls (Python \
                             code such as a __del__ ran while it worked); the inner call was \
                             refused and the outer one goes on",
                            self.name
                        )));
                    }
                    py.detach(|| drop(self.value.lock()));
                    continue;
                }
            };
            self.holder.store(me, Ordering::Release);
            return Ok(guard);
        }
    }
}

/// A number no two live threads share: the address of a thread-local.
fn thread_token() -> usize {
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    TOKEN.with(|t| std::ptr::from_ref(t) as usize)
}
