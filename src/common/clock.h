/* Monotonic time and deadlines. Every blocking wait in hvd takes an absolute deadline from
 * here, so nested waits share one budget instead of each restarting its own timeout. */
#ifndef HVD_COMMON_CLOCK_H
#define HVD_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t hvd__clock_now_ms(void);

/* Absolute deadline timeout_ms from now; a negative timeout means "no deadline" (INT64_MAX). */
int64_t hvd__clock_deadline_ms(int64_t timeout_ms);

/* Milliseconds left until deadline, clamped to [0, INT32_MAX] so it fits poll(). */
int hvd__clock_remaining_ms(int64_t deadline_ms);

/* Sleep for ms milliseconds (restarting after signals). */
void hvd__clock_sleep_ms(int64_t ms);

/* The absolute time ms milliseconds from now on clock_id (CLOCK_MONOTONIC, or CLOCK_REALTIME
 * for a condition variable that keeps the default clock), for pthread_cond_timedwait. */
struct timespec hvd__clock_abstime(clockid_t clock_id, int64_t ms);

/* Monotonic microseconds, for the busy-poll budget and idle deadlines of the data plane. */
int64_t hvd__clock_now_us(void);

#endif
