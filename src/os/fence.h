/* An asymmetric memory fence between processes: the frequent side (a rank publishing a step
 * in the host arena, many times a millisecond) orders its store before its next load with a
 * compiler barrier only, and the rare side (a rank about to sleep on a futex) pays for both
 * with membarrier(2), which makes every CPU running a registered process pass a full fence.
 * A full fence (a locked instruction) on every publish cost an 8-byte allreduce between two
 * ranks one more transfer of a cache line between cores: the store had to own its line
 * before the rank could go on to read its peer's. */
#ifndef HVD_OS_FENCE_H
#define HVD_OS_FENCE_H

/* 1 when this process is registered for the heavy side's fence (done once, at the first
 * call), so that it may publish with hvd__fence_light; 0 when the kernel or a seccomp filter
 * does not allow membarrier's global expedited commands: then publish with a full fence. */
int hvd__fence_light_ok(void);

/* The frequent side's half: keeps the compiler from moving memory accesses across it. */
static inline void hvd__fence_light(void) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* The rare side's half: every registered process's running threads pass a full fence
 * before this returns. 0, or -1 when it could not be done (the caller must then not rely on
 * seeing a light publisher's store, and bounds how long it waits without it). */
int hvd__fence_heavy(void);

#endif
