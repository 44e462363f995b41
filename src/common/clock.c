/* Monotonic time and deadlines (clock.h). INT64_MAX stands for "no deadline" throughout (its
 * remaining time reads as INT32_MAX), and sleeps restart after signals. */
#include "common/clock.h"

#include <errno.h>
#include <time.h>

int64_t hvd__clock_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t hvd__clock_deadline_ms(int64_t timeout_ms) {
    if (timeout_ms < 0)
        return INT64_MAX;
    return hvd__clock_now_ms() + timeout_ms;
}

int hvd__clock_remaining_ms(int64_t deadline_ms) {
    if (deadline_ms == INT64_MAX)
        return INT32_MAX;
    int64_t left = deadline_ms - hvd__clock_now_ms();
    if (left < 0)
        return 0;
    return left > INT32_MAX ? INT32_MAX : (int)left;
}

void hvd__clock_sleep_ms(int64_t ms) {
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

struct timespec hvd__clock_abstime(clockid_t clock_id, int64_t ms) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int64_t hvd__clock_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
