/* What the multi-rank check programs share (async_check.c, p2p_check.c, adasum_check.c): the
 * failing macros, which name the program, the scenario and the rank, and exit the rank at once,
 * and small helpers. Define RANK_CHECK_PROGRAM (the program's name) before including. */
#ifndef HVD_TESTS_MRANK_RANK_CHECK_H
#define HVD_TESTS_MRANK_RANK_CHECK_H

#include <hvd/hvd.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *g_scn = "?"; /* the scenario being run */
static int g_rank = -1, g_size = 0;

__attribute__((format(printf, 2, 3), noreturn)) static void fail_at(int line, const char *fmt,
                                                                    ...) {
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL %s %s [rank %d of %d] line %d: %s\n", RANK_CHECK_PROGRAM, g_scn, g_rank,
            g_size, line, buf);
    fflush(stderr);
    fflush(stdout);
    _exit(1);
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail_at(__LINE__, __VA_ARGS__);                                                        \
    } while (0)

#define OK(call)                                                                                   \
    do {                                                                                           \
        hvd_status_t st_ = (call);                                                                 \
        if (st_ != HVD_OK)                                                                         \
            fail_at(__LINE__, "%s returned %s: %s", #call, hvd_status_str(st_), hvd_last_error()); \
    } while (0)

/* The call must return status want; its message is then in hvd_last_error(). */
#define EXPECT(want, call)                                                                         \
    do {                                                                                           \
        hvd_status_t st_ = (call);                                                                 \
        if (st_ != (want))                                                                         \
            fail_at(__LINE__, "%s returned %s, expected %s: %s", #call, hvd_status_str(st_),       \
                    hvd_status_str(want), st_ == HVD_OK ? "" : hvd_last_error());                  \
    } while (0)

/* msg must contain sub. */
#define HAS(msg, sub)                                                                              \
    do {                                                                                           \
        const char *m_ = (msg), *s_ = (sub);                                                       \
        if (!strstr(m_, s_))                                                                       \
            fail_at(__LINE__, "[%s] not found in the message: %s", s_, m_);                        \
    } while (0)

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static inline void *xmalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1); /* zeroed: nothing is ever read uninitialised */
    CHECK(p, "out of memory for %zu bytes", n);
    return p;
}

/* Exact half types: the bits of a value that each represents exactly (a CHECK fails
 * otherwise), and the value of any bits. */
/* float16 bits of v, which must be exactly representable (and normal or zero). */
static inline uint16_t f16_of(double v) {
    float f = (float)v;
    CHECK((double)f == v, "%g is not exact in float32", v);
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if ((x & 0x7fffffffu) == 0)
        return sign;
    int e = (int)((x >> 23) & 0xffu) - 127 + 15;
    CHECK(e >= 1 && e <= 30 && (x & 0x1fffu) == 0, "%g is not exact in float16", v);
    return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)((x >> 13) & 0x3ffu));
}

static inline double f16_val(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(m + 1024), e - 25);
    return (h & 0x8000u) ? -v : v;
}

static inline uint16_t bf16_of(double v) {
    float f = (float)v;
    uint32_t x;
    memcpy(&x, &f, 4);
    CHECK((double)f == v && (x & 0xffffu) == 0, "%g is not exact in bfloat16", v);
    return (uint16_t)(x >> 16);
}

static inline double bf16_val(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

#endif
