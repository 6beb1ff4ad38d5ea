//! Asking the processor to load a cache line ahead of its use.
//!
//! A simulation knows much of what it will read before it reads it: the coming requests of a trace (through
//! [`crate::Policy::hint`]) and, for the policies that replay libCacheSim's generator, the buckets of the next
//! random draws. Starting those loads early lets them overlap the work in between instead of stalling it. A
//! prefetch changes no state and no result; on targets without one it is nothing.

/// Starts loading the cache line of `x` (a hint: nothing is read through it, nothing can fault).
#[inline(always)]
#[allow(unsafe_code)]
pub(crate) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` only hints the cache hierarchy: it neither reads nor writes memory as far as the
    // program can observe, and cannot fault. The pointer comes from a live reference. SSE, which the intrinsic
    // needs, is part of the x86_64 baseline, so the instruction exists on every x86_64 target.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>((x as *const T).cast::<i8>())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefetch_changes_nothing() {
        let v = vec![7u64; 1024];
        for x in &v {
            super::prefetch(x);
        }
        assert!(v.iter().all(|&x| x == 7));
    }
}
