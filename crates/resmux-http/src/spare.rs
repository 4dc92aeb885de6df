//! Per-thread spares: what a written response gives back (its header map, its head's buffer),
//! emptied but with its allocation, for the next response made on the same thread. A cached
//! hit allocated and freed both every time. A few are kept per thread, so nothing is held per
//! connection (an idle keep-alive connection costs what it did) and the memory is bounded by
//! the number of threads.

use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread's spares of one kind.
pub(crate) type Spares<T> = RefCell<Vec<T>>;

/// A spare from `pool`, or a new (empty) one.
pub(crate) fn take<T: Default>(pool: &'static LocalKey<Spares<T>>) -> T {
    pool.with_borrow_mut(Vec::pop).unwrap_or_default()
}

/// Keeps `item` (emptied by the caller) in `pool` for the thread's next [`take`], unless `max`
/// are kept already.
pub(crate) fn give<T>(pool: &'static LocalKey<Spares<T>>, item: T, max: usize) {
    pool.with_borrow_mut(|spares| {
        if spares.len() < max {
            if spares.capacity() == 0 {
                spares.reserve_exact(max);
            }
            spares.push(item);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static POOL: Spares<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    /// What is given is what is taken next, up to `max` kept, and the pool's own vector is
    /// allocated once.
    #[test]
    fn spares_are_taken_back_and_bounded() {
        assert!(take(&POOL).is_empty(), "a new one while none is kept");
        let kept = Vec::<u8>::with_capacity(100);
        let at = kept.as_ptr();
        give(&POOL, kept, 3);
        let taken = take(&POOL);
        assert_eq!(taken.as_ptr(), at, "the one given back");
        for _ in 0..10 {
            give(&POOL, Vec::with_capacity(8), 3);
        }
        assert_eq!(POOL.with_borrow(|p| (p.len(), p.capacity())), (3, 3));
    }
}
