//! Waking a reader that waits for data: a hint beside the buffer's protocol, not part of it.
//!
//! A consumer with nothing to do used to sleep a fixed 2 ms and look again. On a VM each wake-up
//! of an idle vCPU is dear (issue 20, `perf` of `weir record` on the AMD EPYC VM: ≈ 30 % of the
//! process's samples were the recorder's sleep/wake-ups, ≈ 500 a second, most of them finding
//! nothing new, because capture threads hand over whole ring blocks every ≈ 10 ms). Instead a
//! reader arms its doorbell with the offset it wants `reserved` to reach (a few hundred KiB past
//! what it has seen) and waits on a futex with a timeout; a writer, after each batch it commits,
//! rings the doorbells whose offset it has passed.
//!
//! Nothing depends on a ring for correctness: a wake-up missed (the reader arms just after a
//! writer looked) costs at most the reader's timeout, and a reader woken early simply finds
//! less. The only ordering that matters, so that the common case does not miss: the reader
//! stores its arm then loads `reserved`, the writer adds to `reserved` then loads the arm, each
//! with a `SeqCst` fence between (the store-buffering pattern): one of them sees the other.
//!
//! Another thread can also end a wait at once ([`Doorbell::wake`], `Reader::waker`): a consumer
//! asked to stop, or to answer a request, while it waits up to its next timer. That wake is
//! sticky: one that comes before the wait is consumed by it (the wait returns at once), so it is
//! never lost.
//!
//! The atomics here are `std`'s even under loom: they order nothing the model checks.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Low bit of [`Doorbell::armed`]: a reader waits (offsets are multiples of 8, so the bit is
/// free); the rest is the offset it waits for.
const ARMED: u64 = 1;

/// One reader's doorbell.
#[derive(Debug, Default)]
pub(crate) struct Doorbell {
    /// `offset | ARMED` while the reader waits for `reserved` to reach `offset`; 0 otherwise.
    armed: AtomicU64,
    /// The futex word: bumped by each ring.
    seq: AtomicU32,
    /// Set by [`wake`](Self::wake), consumed by the wait it ends (or the next one).
    woken: AtomicBool,
}

impl Doorbell {
    /// Waits until a writer rings for `until`, at most `timeout`, unless `reserved()` (called
    /// after arming) already reached it. Returns whether it was rung (or had reached it).
    pub(crate) fn wait(&self, until: u64, timeout: Duration, reserved: impl Fn() -> u64) -> bool {
        let seq = self.seq.load(Ordering::Acquire);
        self.armed.store((until & !7) | ARMED, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.woken.swap(false, Ordering::AcqRel) || crate::dist(reserved(), until) >= 0 {
            self.armed.store(0, Ordering::Relaxed);
            return true;
        }
        futex_wait(&self.seq, seq, timeout);
        self.armed.store(0, Ordering::Relaxed);
        // a wake during the wait is consumed here (its `seq` bump ended the futex wait)
        self.woken.swap(false, Ordering::AcqRel) || self.seq.load(Ordering::Acquire) != seq
    }

    /// Ends the reader's wait in progress at once, or, when it is not waiting, its next wait
    /// (which then returns at once): the flag is set before `seq` moves, so a wait that loaded
    /// `seq` before the bump fails its futex compare or is woken, and one that loads it after
    /// sees the flag.
    pub(crate) fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.seq.fetch_add(1, Ordering::Release);
        futex_wake(&self.seq);
    }

    /// Rings when a reader waits for an offset `reserved` (the writer's view, after its last
    /// commit) has reached. One `SeqCst` fence and a load when nobody waits.
    pub(crate) fn ring_if_reached(&self, reserved: u64) {
        fence(Ordering::SeqCst);
        let a = self.armed.load(Ordering::Relaxed);
        if a & ARMED == 0 || crate::dist(reserved, a & !ARMED) < 0 {
            return;
        }
        // One writer rings (another may be looking at the same arm).
        if self
            .armed
            .compare_exchange(a, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.seq.fetch_add(1, Ordering::Release);
            futex_wake(&self.seq);
        }
    }
}

/// `FUTEX_WAIT_PRIVATE` on `word` while it holds `expected`, at most `timeout`. Returns on a
/// wake, a timeout, a signal, or at once when the word already moved: the caller rechecks.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned u32 for the duration of the call (borrowed); the kernel
    // only reads it and `ts`, a valid timespec on our stack. Errors (EAGAIN, ETIMEDOUT, EINTR)
    // all mean "look again", which the caller does.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes the waiters on `word` (`FUTEX_WAKE_PRIVATE`).
fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not dereference anything else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_ring_past_the_offset_wakes_the_waiter_and_one_before_it_does_not() {
        let bell = Arc::new(Doorbell::default());
        let reserved = Arc::new(AtomicU64::new(0));
        let (b, r) = (bell.clone(), reserved.clone());
        let waiter = std::thread::spawn(move || {
            b.wait(4096, Duration::from_secs(30), || r.load(Ordering::SeqCst))
        });
        // Until the waiter is armed, nothing to ring; then a ring short of its offset is not
        // one (it stays armed).
        while bell.armed.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        reserved.store(4088, Ordering::SeqCst);
        bell.ring_if_reached(4088);
        assert_ne!(bell.armed.load(Ordering::SeqCst), 0);
        reserved.store(4096, Ordering::SeqCst);
        bell.ring_if_reached(4096);
        // Woken by the ring (the futex word moved), not by the 30 s timeout.
        assert!(waiter.join().unwrap());
        assert_eq!(bell.armed.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_wake_ends_a_wait_in_progress_and_one_before_the_wait_is_not_lost() {
        let bell = Arc::new(Doorbell::default());
        let b = bell.clone();
        // nothing reserved: only the wake can end this 30 s wait early
        let waiter = std::thread::spawn(move || b.wait(4096, Duration::from_secs(30), || 0));
        while bell.armed.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        bell.wake();
        assert!(waiter.join().unwrap());
        assert!(!bell.woken.load(Ordering::SeqCst), "the wake was consumed");
        // a wake with nobody waiting makes the next wait return at once, woken, then is gone
        bell.wake();
        assert!(bell.wait(4096, Duration::from_secs(30), || 0));
        assert!(!bell.wait(4096, Duration::from_millis(1), || 0));
    }

    #[test]
    fn a_wait_returns_at_once_when_reserved_is_already_there_and_times_out_otherwise() {
        let bell = Doorbell::default();
        assert!(bell.wait(64, Duration::from_secs(30), || 128));
        assert!(!bell.wait(256, Duration::from_millis(1), || 128));
        assert_eq!(bell.armed.load(Ordering::SeqCst), 0);
    }
}
