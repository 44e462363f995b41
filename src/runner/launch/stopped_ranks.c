/* Ranks left behind once the others have exited; see stopped_ranks.h. */
#include "runner/launch/stopped_ranks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Remaining ranks are looked at no more often than this (each look reads /proc once per
 * local rank); the event loop steps far more often while output flows. */
#define LOOK_MS 250
/* Ranks named in the "waiting for" line; the rest are counted. */
#define NAMED_MAX 8

void hvd__stopped_ranks_init(hvd_stopped_ranks_t *s, int timeout_s) {
    memset(s, 0, sizeof *s);
    s->timeout_ms = (int64_t)timeout_s * 1000;
}

void hvd__stopped_ranks_fini(hvd_stopped_ranks_t *s) {
    free(s->since);
    s->since = NULL;
    s->cap = 0;
}

/* The since slot of worker id, grown on demand; NULL when out of memory. */
static int64_t *since_of(hvd_stopped_ranks_t *s, size_t id) {
    if (id >= s->cap) {
        size_t cap = s->cap ? s->cap : 16;
        while (cap <= id)
            cap *= 2;
        int64_t *grown = realloc(s->since, cap * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + s->cap, 0, (cap - s->cap) * sizeof *grown);
        s->since = grown;
        s->cap = cap;
    }
    return &s->since[id];
}

/* "every other rank has exited" or "3 of 4 ranks have exited". */
static void describe_exits(size_t remaining, size_t exited, size_t n, char *out, size_t size) {
    if (remaining == 1 && exited + 1 == n)
        snprintf(out, size, "every other rank has exited");
    else
        snprintf(out, size, "%zu of %zu ranks have exited", exited, n);
}

static void say(const hvd_stopped_ranks_ops_t *ops, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const hvd_stopped_ranks_ops_t *ops, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    ops->say(ops->arg, line);
}

long hvd__stopped_ranks_check(hvd_stopped_ranks_t *s, const hvd_stopped_ranks_ops_t *ops,
                              const size_t *ids, size_t n, size_t exited, size_t total,
                              int64_t now_ms) {
    if (exited == 0)
        return -1;
    if (!s->watching) {
        s->watching = 1;
        s->next_report_ms = now_ms + HVD_STOPPED_RANKS_REPORT_MS;
    } else if (now_ms - s->last_look_ms < LOOK_MS) {
        return -1;
    }
    s->last_look_ms = now_ms;
    size_t remaining = 0;
    for (size_t i = 0; i < n; i++)
        remaining += ops->running(ops->arg, ids ? ids[i] : i) != 0;
    if (remaining == 0)
        return -1;
    char exits[64];
    describe_exits(remaining, exited, total, exits, sizeof exits);
    long killed = -1;
    char named[NAMED_MAX * 48] = "";
    size_t nnamed = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t id = ids ? ids[i] : i;
        int64_t *since = since_of(s, id);
        if (!since || !ops->running(ops->arg, id))
            continue;
        const hvd_slot_t *slot = ops->slot(ops->arg, id);
        if (nnamed < NAMED_MAX) {
            int w = snprintf(named + used, sizeof named - used, "%s%d (host %s)",
                             nnamed ? ", " : "", slot->rank, slot->host);
            if (w > 0 && (size_t)w < sizeof named - used)
                used += (size_t)w;
            nnamed++;
        }
        long pid = 0;
        int stopped = ops->stopped(ops->arg, id, &pid);
        if (!stopped) {
            if (*since)
                say(ops, "rank %d (host %s, pid %ld) continued; waiting for it to end", slot->rank,
                    slot->host, pid);
            *since = 0;
            continue;
        }
        if (!*since) {
            *since = now_ms;
            say(ops,
                "rank %d (host %s, pid %ld) is stopped; %s: it is killed in %lld s unless it "
                "continues (HOROVOD_GLOO_TIMEOUT_SECONDS)",
                slot->rank, slot->host, pid, exits, (long long)(s->timeout_ms / 1000));
        } else if (now_ms - *since >= s->timeout_ms && killed < 0) {
            say(ops,
                "rank %d (host %s, pid %ld) stayed stopped for %lld s after %s: killing it "
                "(HOROVOD_GLOO_TIMEOUT_SECONDS)",
                slot->rank, slot->host, pid, (long long)(s->timeout_ms / 1000),
                remaining == 1 && exited + 1 == total ? "every other rank had exited"
                                                      : "the other ranks had exited");
            ops->kill(ops->arg, id);
            *since = 0;
            killed = (long)id;
        }
    }
    if (now_ms >= s->next_report_ms) {
        s->next_report_ms = now_ms + HVD_STOPPED_RANKS_REPORT_MS;
        char more[48] = "";
        if (remaining > nnamed)
            snprintf(more, sizeof more, " and %zu more", remaining - nnamed);
        say(ops, "waiting for rank%s %s%s: %s", remaining > 1 ? "s" : "", named, more, exits);
    }
    return killed;
}

static int w_running(void *arg, size_t id) {
    return hvd__workers_running(arg, id);
}

static int w_stopped(void *arg, size_t id, long *pid_p) {
    return hvd__workers_stopped(arg, id, pid_p);
}

static const hvd_slot_t *w_slot(void *arg, size_t id) {
    return hvd__workers_slot(arg, id);
}

static void w_say(void *arg, const char *line) {
    hvd__workers_say(arg, "horovodrun: %s\n", line);
}

static void w_kill(void *arg, size_t id) {
    hvd__workers_kill(arg, id);
}

hvd_stopped_ranks_ops_t hvd__stopped_ranks_workers_ops(hvd_workers_t *w) {
    return (hvd_stopped_ranks_ops_t){w_running, w_stopped, w_slot, w_say, w_kill, w};
}
