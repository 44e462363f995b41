/* The stall inspector (stall.h). Pending names live in a small list: a stall is the
 * exception, and the list holds only names some rank is waiting on. */
#include "controller/stall.h"

#include "common/appendf.h"
#include "common/error.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pending {
    char *name;
    char *key; /* or NULL */
    int64_t since_ms;
    uint8_t *ready; /* one flag per rank; set up front for ranks outside its process set */
    int nready;
    struct pending *next;
} pending_t;

struct hvd_stall {
    int size, warn_s, shutdown_s;
    char **hosts;
    pending_t *head;
    int64_t last_check_ms;
    hvd_pset_member_fn member;
    void *member_arg;
    hvd_stall_describe_fn describe;
    void *describe_arg;
    int missing[HVD_STALL_MISSING_MAX], nmissing; /* the last report's first missing ranks */
};

void hvd__stall_set_describer(hvd_stall_t *s, hvd_stall_describe_fn fn, void *arg) {
    s->describe = fn;
    s->describe_arg = arg;
}

int hvd__stall_missing(const hvd_stall_t *s, int *ranks, int max) {
    int n = s->nmissing < max ? s->nmissing : max;
    memcpy(ranks, s->missing, (size_t)(n > 0 ? n : 0) * sizeof *ranks);
    return n;
}

void hvd__stall_set_members(hvd_stall_t *s, hvd_pset_member_fn fn, void *arg) {
    s->member = fn;
    s->member_arg = arg;
}

/* A new name of process set pset waits for its members only: the others count as ready. */
static void expect_members(hvd_stall_t *s, pending_t *p, int pset) {
    if (!pset || !s->member)
        return;
    memset(p->ready, 1, (size_t)s->size);
    p->nready = s->size;
    for (int i = 0; i < s->size; i++) {
        int g = s->member(s->member_arg, pset, i);
        if (g < 0 || g >= s->size)
            break;
        if (p->ready[g]) {
            p->ready[g] = 0;
            p->nready--;
        }
    }
}

hvd_status_t hvd__stall_create(int size, const char *const *hosts, int warn_s, int shutdown_s,
                               hvd_stall_t **s_p) {
    if (size < 1 || warn_s < 1 || shutdown_s < 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "stall inspector: bad size or times");
    hvd_stall_t *s = calloc(1, sizeof *s);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the stall inspector");
    if (shutdown_s > 0 && shutdown_s < warn_s)
        HVD_LOG_W("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is less than "
                  "HOROVOD_STALL_CHECK_TIME_SECONDS, will not shutdown.");
    s->size = size;
    s->warn_s = warn_s;
    s->shutdown_s = shutdown_s;
    if (hosts) {
        s->hosts = calloc((size_t)size, sizeof *s->hosts);
        for (int r = 0; s->hosts && r < size; r++)
            s->hosts[r] = strdup(hosts[r] ? hosts[r] : "?");
    }
    *s_p = s;
    return HVD_OK;
}

static void pending_free(pending_t *p) {
    free(p->name);
    free(p->key);
    free(p->ready);
    free(p);
}

void hvd__stall_destroy(hvd_stall_t *s) {
    if (!s)
        return;
    for (pending_t *p = s->head, *n; p; p = n) {
        n = p->next;
        pending_free(p);
    }
    for (int r = 0; s->hosts && r < s->size; r++)
        free(s->hosts[r]);
    free(s->hosts);
    free(s);
}

/* A new name that only ranks[0..n) take part in: the others count as ready. */
static void expect_ranks(hvd_stall_t *s, pending_t *p, const int *ranks, int n) {
    memset(p->ready, 1, (size_t)s->size);
    p->nready = s->size;
    for (int i = 0; i < n; i++) {
        if (ranks[i] >= 0 && ranks[i] < s->size && p->ready[ranks[i]]) {
            p->ready[ranks[i]] = 0;
            p->nready--;
        }
    }
}

/* Record rank as ready for name, creating its entry (expecting the members of pset, or
 * ranks[0..n) when ranks is set) at its first report. */
static hvd_status_t ready(hvd_stall_t *s, const char *name, int pset, const int *ranks, int n,
                          int rank, int64_t now_ms) {
    if (rank < 0 || rank >= s->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "stall inspector: rank %d", rank);
    pending_t *p = s->head;
    while (p && strcmp(p->name, name) != 0)
        p = p->next;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (p) {
            p->name = strdup(name);
            p->ready = calloc((size_t)s->size, 1);
        }
        if (!p || !p->name || !p->ready) {
            if (p)
                pending_free(p);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the stall inspector");
        }
        p->since_ms = now_ms;
        if (ranks)
            expect_ranks(s, p, ranks, n);
        else
            expect_members(s, p, pset);
        p->next = s->head;
        s->head = p;
    }
    if (!p->ready[rank]) {
        p->ready[rank] = 1;
        p->nready++;
    }
    return HVD_OK;
}

hvd_status_t hvd__stall_ready(hvd_stall_t *s, const char *name, int pset, int rank,
                              int64_t now_ms) {
    return ready(s, name, pset, NULL, 0, rank, now_ms);
}

hvd_status_t hvd__stall_ready_among(hvd_stall_t *s, const char *name, const int *ranks, int n,
                                    int rank, int64_t now_ms) {
    return ready(s, name, 0, ranks, n, rank, now_ms);
}

void hvd__stall_key(hvd_stall_t *s, const char *name, const char *key) {
    pending_t *p = s->head;
    while (p && strcmp(p->name, name) != 0)
        p = p->next;
    if (p && !p->key && key && *key)
        p->key = strdup(key); /* (without it, only the report's detail is lost) */
}

void hvd__stall_done(hvd_stall_t *s, const char *name) {
    for (pending_t **pp = &s->head; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->name, name) == 0) {
            pending_t *p = *pp;
            *pp = p->next;
            pending_free(p);
            return;
        }
    }
}

int hvd__stall_idle(const hvd_stall_t *s) {
    return !s->head;
}

int hvd__stall_check(hvd_stall_t *s, int64_t now_ms, char *msg, size_t msg_size, int *shutdown_p) {
    *shutdown_p = 0;
    if (msg_size)
        msg[0] = '\0';
    if (s->last_check_ms && now_ms - s->last_check_ms < (int64_t)s->warn_s * 1000)
        return 0;
    s->last_check_ms = now_ms;
    s->nmissing = 0;
    int64_t warn_ms = (int64_t)s->warn_s * 1000, shut_ms = (int64_t)s->shutdown_s * 1000;
    int may_shut = s->shutdown_s > 0 && s->shutdown_s >= s->warn_s;
    size_t n = 0;
    int any = 0;
    for (int r = 0; r < s->size; r++) {
        int listed = 0;
        int64_t oldest = 0;
        char names[512];
        size_t nn = 0;
        names[0] = '\0';
        for (pending_t *p = s->head; p; p = p->next) {
            int64_t age = now_ms - p->since_ms;
            if (p->ready[r] || age < warn_ms)
                continue;
            oldest = age > oldest ? age : oldest;
            if (listed < 6)
                hvd__appendf(names, sizeof names, &nn, "%s%s%s%s%s", listed ? ", " : "", p->name,
                             p->key ? " (at '" : "", p->key ? p->key : "", p->key ? "')" : "");
            listed++;
        }
        if (!listed)
            continue;
        if (!any)
            hvd__appendf(
                msg, msg_size, &n,
                "One or more tensors were submitted to be reduced, gathered or broadcasted by "
                "subset of ranks and are waiting for remainder of ranks for more than %d "
                "seconds. This may indicate that different ranks are trying to submit "
                "different tensors or that only subset of ranks is submitting tensors, which "
                "will cause deadlock.\nMissing ranks:",
                s->warn_s);
        any = 1;
        int marked = may_shut && oldest >= shut_ms;
        *shutdown_p |= marked;
        hvd__appendf(msg, msg_size, &n, "\n%d%s", r, marked ? "!" : "");
        if (s->hosts && s->hosts[r])
            hvd__appendf(msg, msg_size, &n, " (host %s, missing for %lld s)", s->hosts[r],
                         (long long)(oldest / 1000));
        hvd__appendf(msg, msg_size, &n, ": [%s%s]", names, listed > 6 ? " ..." : "");
        if (s->describe) {
            char what[1024];
            s->describe(s->describe_arg, r, now_ms, what, sizeof what);
            if (what[0])
                hvd__appendf(msg, msg_size, &n, "; %s", what);
        }
        if (s->nmissing < HVD_STALL_MISSING_MAX)
            s->missing[s->nmissing++] = r;
    }
    if (*shutdown_p && msg_size) {
        /* First: it ends the job, and the report after it may be cut short where the
         * message travels as an error. */
        char head[160];
        int h = snprintf(head, sizeof head,
                         "One or more rank (marked by \"!\") is stalled for longer than %d "
                         "seconds. Will shutdown.\n",
                         s->shutdown_s);
        size_t hl = h > 0 && (size_t)h < msg_size ? (size_t)h : 0;
        size_t keep = n + hl < msg_size ? n : msg_size - 1 - hl;
        memmove(msg + hl, msg, keep);
        memcpy(msg, head, hl);
        msg[hl + keep] = '\0';
    }
    return any;
}
