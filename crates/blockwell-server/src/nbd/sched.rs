//! The scheduling policy of the connection threads ([`super::Scheduling`]).

use std::io;

/// Puts the calling thread under `SCHED_BATCH`: same CPU share as `SCHED_OTHER`, but its wake-ups do not
/// preempt the running task. Threads it starts inherit the policy.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn set_batch() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler only reads the sched_param behind the pointer, which points to a live local
    // for the duration of the call; pid 0 is the calling thread. It touches no other memory of this process.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_batch() -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "SCHED_BATCH is Linux-only"))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The policy of the calling thread, from /proc (field 41 of stat: 0 SCHED_OTHER, 3 SCHED_BATCH).
    fn policy() -> u32 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // Fields after the command name, which is in parentheses and may contain spaces.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split(' ').nth(41 - 3).unwrap().parse().unwrap()
    }

    #[test]
    fn set_batch_changes_only_the_calling_thread_and_its_children() {
        std::thread::spawn(|| {
            assert_eq!(policy(), 0, "threads start under SCHED_OTHER");
            super::set_batch().unwrap();
            assert_eq!(policy(), 3);
            assert_eq!(std::thread::spawn(policy).join().unwrap(), 3, "a thread it starts inherits the policy");
        })
        .join()
        .unwrap();
        assert_eq!(policy(), 0, "other threads keep theirs");
    }
}
