/* Clocks shared by the multi-rank check programs. */
#ifndef HVD_TESTS_MRANK_CHECK_CLOCK_H
#define HVD_TESTS_MRANK_CHECK_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Nanoseconds since the epoch (comparable across processes of one host). */
static inline long long real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#endif
