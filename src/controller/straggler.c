/* The straggler report (straggler.h). Pending names live in a small array searched by a
 * hash first: a name is pending only between its first arrival and its agreement, so the
 * array holds about one step's names at most. */
#include "controller/straggler.h"

#include "common/appendf.h"
#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PENDING_MAX 4096 /* names tracked at once; more are left out of the window */
#define LISTED 8         /* ranks listed by lateness in a report */

typedef struct {
    char *name;
    uint64_t hash;
    int64_t *arrived_us; /* per rank; -1: not yet */
} pending_t;

struct hvd_straggler {
    int size, steps;
    const char *const *hosts;
    pending_t *pending;
    size_t npending;
    char *marker; /* the first name agreed: a step each time it is agreed again */
    int step;     /* steps in this window */
    /* the window */
    int64_t *late_us; /* per rank: summed lateness */
    int64_t *count;   /* per rank: collectives it arrived at */
    int64_t *last;    /* per rank: collectives it was alone in arriving last at */
    int64_t ops, untracked;
};

static uint64_t hash_of(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static void window_reset(hvd_straggler_t *s) {
    memset(s->late_us, 0, (size_t)s->size * sizeof *s->late_us);
    memset(s->count, 0, (size_t)s->size * sizeof *s->count);
    memset(s->last, 0, (size_t)s->size * sizeof *s->last);
    s->ops = s->untracked = 0;
    s->step = 0;
}

hvd_status_t hvd__straggler_create(int size, const char *const *hosts, int steps,
                                   hvd_straggler_t **s_p) {
    if (size < 1 || steps < 1)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "straggler report: bad size or steps");
    hvd_straggler_t *s = calloc(1, sizeof *s);
    if (s) {
        s->late_us = calloc((size_t)size, sizeof *s->late_us);
        s->count = calloc((size_t)size, sizeof *s->count);
        s->last = calloc((size_t)size, sizeof *s->last);
    }
    if (!s || !s->late_us || !s->count || !s->last) {
        hvd__straggler_destroy(s);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the straggler report");
    }
    s->size = size;
    s->steps = steps;
    s->hosts = hosts;
    *s_p = s;
    return HVD_OK;
}

static void pending_free(pending_t *p) {
    free(p->name);
    free(p->arrived_us);
}

void hvd__straggler_destroy(hvd_straggler_t *s) {
    if (!s)
        return;
    for (size_t i = 0; i < s->npending; i++)
        pending_free(&s->pending[i]);
    free(s->pending);
    free(s->marker);
    free(s->late_us);
    free(s->count);
    free(s->last);
    free(s);
}

static pending_t *find(const hvd_straggler_t *s, const char *name, uint64_t h) {
    for (size_t i = 0; i < s->npending; i++)
        if (s->pending[i].hash == h && strcmp(s->pending[i].name, name) == 0)
            return &s->pending[i];
    return NULL;
}

void hvd__straggler_arrive(hvd_straggler_t *s, const char *name, int rank, int64_t now_us) {
    if (rank < 0 || rank >= s->size)
        return;
    uint64_t h = hash_of(name);
    pending_t *p = find(s, name, h);
    if (!p) {
        if (s->npending == PENDING_MAX) {
            s->untracked++;
            return;
        }
        if (!s->pending && !(s->pending = calloc(PENDING_MAX, sizeof *s->pending)))
            return; /* (only the report's detail is lost) */
        p = &s->pending[s->npending];
        p->name = strdup(name);
        p->arrived_us = malloc((size_t)s->size * sizeof *p->arrived_us);
        if (!p->name || !p->arrived_us) {
            pending_free(p);
            return;
        }
        for (int r = 0; r < s->size; r++)
            p->arrived_us[r] = -1;
        p->hash = h;
        s->npending++;
    }
    if (p->arrived_us[rank] < 0)
        p->arrived_us[rank] = now_us;
}

/* p leaves the pending names (the last one takes its place). */
static void drop(hvd_straggler_t *s, pending_t *p) {
    pending_free(p);
    *p = s->pending[--s->npending];
}

void hvd__straggler_forget(hvd_straggler_t *s, const char *name) {
    pending_t *p = find(s, name, hash_of(name));
    if (p)
        drop(s, p);
}

size_t hvd__straggler_pending(const hvd_straggler_t *s) {
    return s->npending;
}

static double avg_ms(const hvd_straggler_t *s, int r) {
    return s->count[r] ? (double)s->late_us[r] / (double)s->count[r] / 1e3 : 0.0;
}

static void report(const hvd_straggler_t *s, char *msg, size_t n) {
    size_t k = 0;
    int worst = -1;
    for (int r = 0; r < s->size; r++)
        if (s->last[r] && (worst < 0 || s->last[r] > s->last[worst]))
            worst = r;
    hvd__appendf(msg, n, &k, "Stragglers over the last %d steps (%lld collectives): ", s->steps,
                 (long long)s->ops);
    if (worst >= 0)
        hvd__appendf(
            msg, n, &k, "rank %d (host %s) was last in %.0f%% of them, %.1f ms late on average",
            worst, s->hosts && s->hosts[worst] ? s->hosts[worst] : "?",
            100.0 * (double)s->last[worst] / (double)(s->ops ? s->ops : 1), avg_ms(s, worst));
    else
        hvd__appendf(msg, n, &k, "no rank came last alone");
    /* the ranks latest on average, latest first */
    hvd__appendf(msg, n, &k, "; average lateness (ms):");
    char *shown = calloc((size_t)s->size, 1);
    for (int i = 0; shown && i < LISTED && i < s->size; i++) {
        int best = -1;
        for (int r = 0; r < s->size; r++)
            if (!shown[r] && (best < 0 || avg_ms(s, r) > avg_ms(s, best)))
                best = r;
        shown[best] = 1;
        hvd__appendf(msg, n, &k, "%s rank %d %.1f", i ? "," : "", best, avg_ms(s, best));
    }
    if (s->size > LISTED)
        hvd__appendf(msg, n, &k, ", the other %d less", s->size - LISTED);
    if (s->untracked)
        hvd__appendf(msg, n, &k, " (%lld arrivals past %d pending names left out)",
                     (long long)s->untracked, PENDING_MAX);
    free(shown);
}

int hvd__straggler_done(hvd_straggler_t *s, const char *name, char *msg, size_t n) {
    uint64_t h = hash_of(name);
    pending_t *p = find(s, name, h);
    if (p) {
        int64_t first = -1, latest = -1;
        int last = -1, arrived = 0;
        for (int r = 0; r < s->size; r++) {
            int64_t t = p->arrived_us[r];
            if (t < 0)
                continue;
            arrived++;
            if (first < 0 || t < first)
                first = t;
            if (t > latest) {
                latest = t;
                last = r;
            } else if (t == latest) {
                last = -1; /* a tie: no rank alone */
            }
        }
        if (arrived >= 2) {
            s->ops++;
            for (int r = 0; r < s->size; r++) {
                if (p->arrived_us[r] < 0)
                    continue;
                s->late_us[r] += p->arrived_us[r] - first;
                s->count[r]++;
            }
            if (last >= 0 && latest > first)
                s->last[last]++;
        }
        drop(s, p);
    }
    if (!s->marker) {
        s->marker = strdup(name);
        return 0;
    }
    if (strcmp(s->marker, name) != 0 || ++s->step < s->steps)
        return 0;
    report(s, msg, n);
    window_reset(s);
    return 1;
}
