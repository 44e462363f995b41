/* The tensor queue (tensor_queue.h): one lock, two hash indexes (by in-flight name, by
 * handle), a FIFO of entries not yet taken, and a condition variable for waiters that have
 * nothing to drive themselves. */
#include "controller/tensor_queue.h"

#include <hvd/hvd.h>

#include "common/error.h"
#include "wire/negotiate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hvd_tq {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    hvd_entry_t **by_name, **by_handle; /* buckets */
    size_t nbuckets, count, in_flight;
    hvd_entry_t *new_head, *new_tail;
    int has_new; /* new_head != NULL, for hvd__tq_has_new (written under lock, read without) */
    hvd_handle_t next_handle;
    int shut_down;
    hvd_status_t shutdown_status;
    char shutdown_message[512];
};

static size_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

static size_t hash_handle(hvd_handle_t h) {
    return (size_t)((uint64_t)h * 0x9e3779b97f4a7c15ull >> 16);
}

hvd_status_t hvd__tq_create(hvd_tq_t **q_p) {
    hvd_tq_t *q = calloc(1, sizeof *q);
    if (!q)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the tensor queue");
    q->nbuckets = 256;
    q->by_name = calloc(q->nbuckets, sizeof *q->by_name);
    q->by_handle = calloc(q->nbuckets, sizeof *q->by_handle);
    if (!q->by_name || !q->by_handle) {
        free(q->by_name);
        free(q->by_handle);
        free(q);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the tensor queue");
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    q->next_handle = 1;
    *q_p = q;
    return HVD_OK;
}

static void entry_free(hvd_entry_t *e) {
    free(e->splits);
    free(e->name);
    free(e->key);
    free(e);
}

void hvd__tq_destroy(hvd_tq_t *q) {
    if (!q)
        return;
    for (size_t b = 0; b < q->nbuckets; b++) {
        for (hvd_entry_t *e = q->by_handle[b], *next; e; e = next) {
            next = e->chain_handle;
            entry_free(e);
        }
    }
    free(q->by_name);
    free(q->by_handle);
    pthread_cond_destroy(&q->done_cv);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

/* ---- the indexes (locked) ---- */

static hvd_entry_t *find_name(hvd_tq_t *q, const char *name) {
    for (hvd_entry_t *e = q->by_name[hash_name(name) & (q->nbuckets - 1)]; e; e = e->chain_name)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

static hvd_entry_t *find_handle(hvd_tq_t *q, hvd_handle_t h) {
    for (hvd_entry_t *e = q->by_handle[hash_handle(h) & (q->nbuckets - 1)]; e; e = e->chain_handle)
        if (e->handle == h)
            return e;
    return NULL;
}

static void unlink_name(hvd_tq_t *q, hvd_entry_t *e) {
    hvd_entry_t **pp = &q->by_name[hash_name(e->name) & (q->nbuckets - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->chain_name;
    if (*pp)
        *pp = e->chain_name;
    e->chain_name = NULL;
}

static void unlink_handle(hvd_tq_t *q, hvd_entry_t *e) {
    hvd_entry_t **pp = &q->by_handle[hash_handle(e->handle) & (q->nbuckets - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->chain_handle;
    if (*pp)
        *pp = e->chain_handle;
    e->chain_handle = NULL;
}

/* Double the buckets when the table gets crowded, so lookups stay O(1) for models with
 * thousands of tensors. On allocation failure the table just stays denser. */
static void maybe_grow(hvd_tq_t *q) {
    if (q->count < 2 * q->nbuckets)
        return;
    size_t n = 2 * q->nbuckets;
    hvd_entry_t **bn = calloc(n, sizeof *bn), **bh = calloc(n, sizeof *bh);
    if (!bn || !bh) {
        free(bn);
        free(bh);
        return;
    }
    for (size_t b = 0; b < q->nbuckets; b++) {
        for (hvd_entry_t *e = q->by_handle[b], *next; e; e = next) {
            next = e->chain_handle;
            size_t i = hash_handle(e->handle) & (n - 1);
            e->chain_handle = bh[i];
            bh[i] = e;
        }
        for (hvd_entry_t *e = q->by_name[b], *next; e; e = next) {
            next = e->chain_name;
            size_t i = hash_name(e->name) & (n - 1);
            e->chain_name = bn[i];
            bn[i] = e;
        }
    }
    free(q->by_name);
    free(q->by_handle);
    q->by_name = bn;
    q->by_handle = bh;
    q->nbuckets = n;
}

/* ---- the operations ---- */

/* A detached copy of *tmpl (its name, key and splits copied), or NULL. */
static hvd_entry_t *entry_copy(const hvd_entry_t *tmpl) {
    hvd_entry_t *e = malloc(sizeof *e);
    char *name = tmpl->name ? strdup(tmpl->name) : NULL;
    char *key = tmpl->key ? strdup(tmpl->key) : NULL;
    size_t *splits = NULL;
    if (tmpl->splits && tmpl->nsplits > 0 &&
        (splits = malloc((size_t)tmpl->nsplits * sizeof *splits)) != NULL)
        memcpy(splits, tmpl->splits, (size_t)tmpl->nsplits * sizeof *splits);
    if (!e || !name || (tmpl->key && !key) || (tmpl->splits && tmpl->nsplits > 0 && !splits)) {
        free(e);
        free(name);
        free(key);
        free(splits);
        return NULL;
    }
    *e = *tmpl;
    e->name = name;
    e->key = key;
    e->splits = splits;
    e->done = 0;
    e->status = HVD_OK;
    e->error[0] = '\0';
    e->in_flight = 1;
    e->taken = 0;
    e->waited = 0;
    e->done_fn = NULL;
    e->done_user = NULL;
    e->next_new = e->chain_name = e->chain_handle = e->next_done = NULL;
    return e;
}

/* Index e and append it to the FIFO (locked). */
static void insert_locked(hvd_tq_t *q, hvd_entry_t *e) {
    maybe_grow(q);
    e->handle = q->next_handle++;
    size_t bn = hash_name(e->name) & (q->nbuckets - 1),
           bh = hash_handle(e->handle) & (q->nbuckets - 1);
    e->chain_name = q->by_name[bn];
    q->by_name[bn] = e;
    e->chain_handle = q->by_handle[bh];
    q->by_handle[bh] = e;
    if (q->new_tail)
        q->new_tail->next_new = e;
    else
        q->new_head = e;
    q->new_tail = e;
    __atomic_store_n(&q->has_new, 1, __ATOMIC_RELEASE);
    q->count++;
    q->in_flight++;
}

hvd_status_t hvd__tq_push(hvd_tq_t *q, const hvd_entry_t *tmpl, hvd_handle_t *handle_p) {
    return hvd__tq_push_many(q, tmpl, 1, handle_p);
}

hvd_status_t hvd__tq_push_many(hvd_tq_t *q, const hvd_entry_t *tmpls, size_t n,
                               hvd_handle_t *handles) {
    hvd_entry_t **es = calloc(n ? n : 1, sizeof *es);
    hvd_status_t st = es ? HVD_OK : HVD_ERR_NO_MEMORY;
    for (size_t i = 0; st == HVD_OK && i < n; i++)
        if (!(es[i] = entry_copy(&tmpls[i])))
            st = HVD_ERR_NO_MEMORY;
    if (st != HVD_OK) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory enqueueing %s",
                            n && tmpls[0].name ? tmpls[0].name : "a tensor");
        goto out;
    }
    pthread_mutex_lock(&q->lock);
    for (size_t i = 0; st == HVD_OK && i < n; i++) {
        int twice = 0;
        for (size_t j = 0; j < i && !twice; j++)
            twice = strcmp(es[j]->name, es[i]->name) == 0;
        if (q->shut_down)
            st = hvd__error_set(q->shutdown_status, "%s: cannot enqueue: %s", es[i]->name,
                                q->shutdown_message);
        else if (twice || find_name(q, es[i]->name))
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "a tensor named '%s' is already being processed; wait for it or "
                                "use another name",
                                es[i]->name);
    }
    if (st == HVD_OK) {
        for (size_t i = 0; i < n; i++) {
            insert_locked(q, es[i]);
            handles[i] = es[i]->handle;
            es[i] = NULL;
        }
    }
    pthread_mutex_unlock(&q->lock);
out:
    for (size_t i = 0; es && i < n; i++) {
        if (es[i])
            entry_free(es[i]);
    }
    free(es);
    return st;
}

size_t hvd__tq_take(hvd_tq_t *q, hvd_entry_t **out, size_t max) {
    pthread_mutex_lock(&q->lock);
    size_t n = 0;
    while (q->new_head && n < max) {
        q->new_head->taken = 1;
        out[n++] = q->new_head;
        q->new_head = q->new_head->next_new;
    }
    if (!q->new_head) {
        q->new_tail = NULL;
        __atomic_store_n(&q->has_new, 0, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&q->lock);
    return n;
}

hvd_entry_t *hvd__tq_find(hvd_tq_t *q, const char *name) {
    pthread_mutex_lock(&q->lock);
    hvd_entry_t *e = find_name(q, name);
    pthread_mutex_unlock(&q->lock);
    return e;
}

/* Complete e (locked). An entry with a done_fn leaves the queue here and goes on *due, for
 * run_due once the lock is let go (the callback may enqueue again). */
static void complete_locked(hvd_tq_t *q, hvd_entry_t *e, hvd_status_t status, const char *message,
                            hvd_entry_t **due) {
    if (!e->in_flight)
        return;
    e->status = status;
    if (message && *message) /* (most complete with no message: no snprintf for them) */
        snprintf(e->error, sizeof e->error, "%s", message);
    else
        e->error[0] = '\0';
    e->in_flight = 0;
    unlink_name(q, e);
    q->in_flight--;
    if (e->done_fn) {
        e->next_done = *due;
        *due = e;
    }
    __atomic_store_n(&e->done, 1, __ATOMIC_RELEASE);
}

/* Drop e from the handle index (locked): its handle is gone. */
static void release_locked(hvd_tq_t *q, hvd_entry_t *e) {
    unlink_handle(q, e);
    q->count--;
}

/* Call the callbacks of the entries on due (unlocked) and free them. */
static void run_due(hvd_tq_t *q, hvd_entry_t *due) {
    if (!due)
        return;
    pthread_mutex_lock(&q->lock);
    for (hvd_entry_t *e = due; e; e = e->next_done)
        release_locked(q, e);
    pthread_mutex_unlock(&q->lock);
    while (due) {
        hvd_entry_t *e = due;
        due = e->next_done;
        e->done_fn(e->done_user, e->status, e->status == HVD_OK ? NULL : e->error);
        entry_free(e);
    }
}

void hvd__tq_complete(hvd_tq_t *q, hvd_entry_t *e, hvd_status_t status, const char *message) {
    hvd_entry_t *due = NULL;
    pthread_mutex_lock(&q->lock);
    complete_locked(q, e, status, message, &due);
    pthread_cond_broadcast(&q->done_cv);
    pthread_mutex_unlock(&q->lock);
    run_due(q, due);
}

void hvd__tq_fail_all(hvd_tq_t *q, hvd_status_t status, const char *message, int shutdown) {
    hvd_entry_t *due = NULL;
    pthread_mutex_lock(&q->lock);
    for (size_t b = 0; b < q->nbuckets; b++)
        for (hvd_entry_t *e = q->by_handle[b]; e; e = e->chain_handle)
            complete_locked(q, e, status, message, &due);
    q->new_head = q->new_tail = NULL;
    __atomic_store_n(&q->has_new, 0, __ATOMIC_RELAXED);
    if (shutdown && !q->shut_down) {
        q->shut_down = 1;
        q->shutdown_status = status;
        snprintf(q->shutdown_message, sizeof q->shutdown_message, "%s", message ? message : "");
    }
    pthread_cond_broadcast(&q->done_cv);
    pthread_mutex_unlock(&q->lock);
    run_due(q, due);
}

hvd_status_t hvd__tq_on_done(hvd_tq_t *q, hvd_handle_t h,
                             void (*fn)(void *user, hvd_status_t status, const char *message),
                             void *user) {
    if (!fn)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_on_done: fn is NULL");
    pthread_mutex_lock(&q->lock);
    hvd_entry_t *e = find_handle(q, h);
    int busy = e && e->waited;
    hvd_entry_t *due = NULL;
    if (e && !busy) {
        e->waited = 1;
        e->done_fn = fn;
        e->done_user = user;
        if (e->done)
            due = e;
    }
    pthread_mutex_unlock(&q->lock);
    if (!e || busy)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_on_done: %s handle %lld",
                              e ? "a thread already waits for" : "unknown", (long long)h);
    run_due(q, due);
    return HVD_OK;
}

int hvd__tq_poll(hvd_tq_t *q, hvd_handle_t h) {
    pthread_mutex_lock(&q->lock);
    hvd_entry_t *e = find_handle(q, h);
    int r = e ? e->done : -1;
    pthread_mutex_unlock(&q->lock);
    return r;
}

hvd_status_t hvd__tq_wait(hvd_tq_t *q, hvd_handle_t h, hvd_tq_progress_fn progress, void *arg) {
    pthread_mutex_lock(&q->lock);
    hvd_entry_t *e = find_handle(q, h);
    int busy = e && e->waited;
    if (e)
        e->waited = 1; /* only this thread may release it now */
    pthread_mutex_unlock(&q->lock);
    if (!e || busy)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s handle %lld",
                              e ? "another thread is already waiting for" : "unknown",
                              (long long)h);
    /* Drive progress ourselves while the entry is pending: no hand-off to another thread on
     * the critical path. A progress failure fails everything in flight, this entry too. */
    while (!__atomic_load_n(&e->done, __ATOMIC_ACQUIRE)) {
        if (!progress) {
            pthread_mutex_lock(&q->lock);
            while (!e->done)
                pthread_cond_wait(&q->done_cv, &q->lock);
            pthread_mutex_unlock(&q->lock);
            break;
        }
        hvd_status_t st = progress(arg);
        if (st != HVD_OK)
            hvd__tq_fail_all(q, st, hvd_last_error(), 0);
    }
    pthread_mutex_lock(&q->lock);
    hvd_status_t st = e->status;
    char message[sizeof e->error];
    memcpy(message, e->error, sizeof message);
    release_locked(q, e);
    pthread_mutex_unlock(&q->lock);
    entry_free(e);
    if (st != HVD_OK)
        return hvd__error_set(st, "%s", message);
    return HVD_OK;
}

int hvd__tq_has_new(hvd_tq_t *q) {
    return __atomic_load_n(&q->has_new, __ATOMIC_ACQUIRE);
}

size_t hvd__tq_in_flight(hvd_tq_t *q) {
    pthread_mutex_lock(&q->lock);
    size_t n = q->in_flight;
    pthread_mutex_unlock(&q->lock);
    return n;
}

int hvd__tq_in_flight_name(hvd_tq_t *q, char *buf, size_t size) {
    pthread_mutex_lock(&q->lock);
    int found = 0;
    /* (by name: only in-flight entries are indexed there) */
    for (size_t b = 0; b < q->nbuckets && !found; b++) {
        for (const hvd_entry_t *e = q->by_name[b]; e && !found; e = e->chain_name) {
            if (e->taken && e->type != HVD_REQ_JOIN) {
                snprintf(buf, size, "%s", e->name);
                found = 1;
            }
        }
    }
    pthread_mutex_unlock(&q->lock);
    return found;
}
