//! Locking the server's mutexes so that a panicking handler cannot wedge the server.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering from poisoning (a panicking handler must not wedge the server).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
