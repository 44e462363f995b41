/* The tensor queue: push order, duplicate names rejected while in flight and accepted
 * again after completion, poll and wait states, errors carried to the waiter, fail-all
 * with shutdown, thousands of names (index growth), and several threads enqueueing while
 * an engine thread completes and waiters either block or drive progress themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "controller/tensor_queue.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static hvd_entry_t named(const char *name) {
    hvd_entry_t e;
    memset(&e, 0, sizeof e);
    e.name = (char *)name;
    e.dtype = HVD_FLOAT32;
    e.count = 4;
    return e;
}

static void test_order_duplicates_and_states(void **state) {
    (void)state;
    hvd_tq_t *q;
    assert_int_equal(hvd__tq_create(&q), HVD_OK);
    hvd_handle_t a, b, c;
    hvd_entry_t ea = named("a"), eb = named("b");
    assert_int_equal(hvd__tq_push(q, &ea, &a), HVD_OK);
    assert_int_equal(hvd__tq_push(q, &eb, &b), HVD_OK);
    assert_int_equal(hvd__tq_push(q, &ea, &c), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "'a' is already being processed"));
    assert_int_equal(hvd__tq_in_flight(q), 2);
    hvd_entry_t *got[4];
    assert_int_equal(hvd__tq_take(q, got, 4), 2);
    assert_string_equal(got[0]->name, "a");
    assert_string_equal(got[1]->name, "b");
    assert_int_equal(hvd__tq_take(q, got, 4), 0);
    assert_ptr_equal(hvd__tq_find(q, "b"), got[1]);
    assert_int_equal(hvd__tq_poll(q, a), 0);
    hvd__tq_complete(q, got[0], HVD_OK, NULL);
    hvd__tq_complete(q, got[1], HVD_ERR_MISMATCH, "ranks 0 and 1 disagree");
    assert_int_equal(hvd__tq_poll(q, a), 1);
    assert_null(hvd__tq_find(q, "a"));
    /* the name is free again while the old handle is still unreleased */
    assert_int_equal(hvd__tq_push(q, &ea, &c), HVD_OK);
    assert_true(c != a);
    assert_int_equal(hvd__tq_wait(q, a, NULL, NULL), HVD_OK);
    assert_int_equal(hvd__tq_wait(q, b, NULL, NULL), HVD_ERR_MISMATCH);
    assert_string_equal(hvd_last_error(), "ranks 0 and 1 disagree");
    assert_int_equal(hvd__tq_wait(q, a, NULL, NULL), HVD_ERR_INVALID_ARG);
    assert_true(hvd__tq_poll(q, a) < 0);
    hvd__tq_destroy(q); /* c is still pending: destroy frees it */
}

static void test_fail_all_and_shutdown(void **state) {
    (void)state;
    hvd_tq_t *q;
    assert_int_equal(hvd__tq_create(&q), HVD_OK);
    hvd_handle_t a, b;
    hvd_entry_t ea = named("a"), eb = named("b");
    assert_int_equal(hvd__tq_push(q, &ea, &a), HVD_OK);
    hvd_entry_t *got[1];
    assert_int_equal(hvd__tq_take(q, got, 1), 1);
    assert_int_equal(hvd__tq_push(q, &eb, &b), HVD_OK); /* not taken yet */
    hvd__tq_fail_all(q, HVD_ERR_PEER_LOST, "rank 3 (host h) closed the connection", 1);
    assert_int_equal(hvd__tq_wait(q, a, NULL, NULL), HVD_ERR_PEER_LOST);
    assert_int_equal(hvd__tq_wait(q, b, NULL, NULL), HVD_ERR_PEER_LOST);
    assert_non_null(strstr(hvd_last_error(), "rank 3"));
    assert_int_equal(hvd__tq_take(q, got, 1), 0);
    hvd_handle_t c;
    assert_int_equal(hvd__tq_push(q, &ea, &c), HVD_ERR_PEER_LOST);
    assert_non_null(strstr(hvd_last_error(), "cannot enqueue"));
    hvd__tq_destroy(q);
}

/* hvd__tq_on_done: the callback runs once, on the completing thread, with the status and
 * message; at once when registered after completion; the handle is gone afterwards; fail_all
 * calls the pending ones; a callback may push again (no lock held). */
typedef struct {
    hvd_tq_t *q;
    int calls;
    hvd_status_t status;
    char message[64];
    int repush; /* push "again" from the callback */
    hvd_status_t repush_status;
} done_rec_t;

static void on_done(void *user, hvd_status_t status, const char *message) {
    done_rec_t *r = user;
    r->calls++;
    r->status = status;
    snprintf(r->message, sizeof r->message, "%s", message ? message : "(null)");
    if (r->repush) {
        hvd_entry_t e = named("again");
        hvd_handle_t h;
        r->repush_status = hvd__tq_push(r->q, &e, &h);
    }
}

static void test_on_done(void **state) {
    (void)state;
    hvd_tq_t *q;
    assert_int_equal(hvd__tq_create(&q), HVD_OK);
    hvd_handle_t a, b, c;
    hvd_entry_t ea = named("a"), eb = named("b"), ec = named("c");
    assert_int_equal(hvd__tq_push(q, &ea, &a), HVD_OK);
    assert_int_equal(hvd__tq_push(q, &eb, &b), HVD_OK);
    assert_int_equal(hvd__tq_push(q, &ec, &c), HVD_OK);
    done_rec_t ra = {.q = q, .repush = 1}, rb = {.q = q}, rc = {.q = q};
    assert_int_equal(hvd__tq_on_done(q, a, on_done, &ra), HVD_OK);
    assert_int_equal(hvd__tq_on_done(q, a, on_done, &ra), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__tq_on_done(q, 12345, on_done, &ra), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__tq_on_done(q, b, NULL, &rb), HVD_ERR_INVALID_ARG);
    hvd_entry_t *got[4];
    assert_int_equal(hvd__tq_take(q, got, 4), 3);
    assert_int_equal(ra.calls, 0);
    hvd__tq_complete(q, got[0], HVD_OK, NULL);
    assert_int_equal(ra.calls, 1);
    assert_int_equal(ra.status, HVD_OK);
    assert_string_equal(ra.message, "(null)");
    assert_int_equal(ra.repush_status, HVD_OK); /* pushed from the callback */
    assert_int_equal(hvd__tq_poll(q, a), -1);   /* released */
    /* completed before the callback is registered: called at once */
    hvd__tq_complete(q, got[1], HVD_ERR_MISMATCH, "shapes differ");
    assert_int_equal(hvd__tq_on_done(q, b, on_done, &rb), HVD_OK);
    assert_int_equal(rb.calls, 1);
    assert_int_equal(rb.status, HVD_ERR_MISMATCH);
    assert_string_equal(rb.message, "shapes differ");
    assert_int_equal(hvd__tq_poll(q, b), -1);
    /* fail_all completes the rest, each callback once */
    assert_int_equal(hvd__tq_on_done(q, c, on_done, &rc), HVD_OK);
    hvd__tq_fail_all(q, HVD_ERR_PEER_LOST, "rank 1 on h2 was lost", 1);
    hvd__tq_fail_all(q, HVD_ERR_PEER_LOST, "again", 1);
    assert_int_equal(rc.calls, 1);
    assert_int_equal(rc.status, HVD_ERR_PEER_LOST);
    assert_string_equal(rc.message, "rank 1 on h2 was lost");
    assert_int_equal(ra.calls, 1);
    assert_int_equal(hvd__tq_in_flight(q), 0);
    hvd__tq_destroy(q);
}

static void test_many_names(void **state) {
    (void)state;
    hvd_tq_t *q;
    assert_int_equal(hvd__tq_create(&q), HVD_OK);
    enum { N = 5000 };
    static hvd_handle_t h[N];
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "grad.%d", i);
        hvd_entry_t e = named(name);
        assert_int_equal(hvd__tq_push(q, &e, &h[i]), HVD_OK);
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "grad.%d", i);
        hvd_entry_t *e = hvd__tq_find(q, name);
        assert_non_null(e);
        assert_true(e->handle == h[i]);
        hvd__tq_complete(q, e, i % 2 ? HVD_OK : HVD_ERR_TIMEOUT, NULL);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(hvd__tq_wait(q, h[i], NULL, NULL), i % 2 ? HVD_OK : HVD_ERR_TIMEOUT);
    assert_int_equal(hvd__tq_in_flight(q), 0);
    hvd__tq_destroy(q);
}

/* ---- threads ---- */

enum { THREADS = 4, PER_THREAD = 2000 };

typedef struct {
    hvd_tq_t *q;
    int id;
    int drive; /* waiters run the engine themselves */
    int failures;
} worker_t;

static pthread_mutex_t engine_lock = PTHREAD_MUTEX_INITIALIZER;

/* One engine step: complete whatever was taken, with status = HVD_OK. */
static hvd_status_t engine_step(void *arg) {
    hvd_tq_t *q = arg;
    hvd_entry_t *got[64];
    pthread_mutex_lock(&engine_lock);
    size_t n = hvd__tq_take(q, got, 64);
    for (size_t i = 0; i < n; i++)
        hvd__tq_complete(q, got[i], got[i]->count == 7 ? HVD_OK : HVD_ERR_PROTOCOL, NULL);
    pthread_mutex_unlock(&engine_lock);
    return HVD_OK;
}

static void *worker(void *arg) {
    worker_t *w = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d.%d", w->id, i % 17);
        hvd_entry_t e = named(name);
        e.count = 7;
        hvd_handle_t h;
        if (hvd__tq_push(w->q, &e, &h) != HVD_OK ||
            hvd__tq_wait(w->q, h, w->drive ? engine_step : NULL, w->drive ? w->q : NULL) != HVD_OK)
            w->failures++;
    }
    return NULL;
}

static int engine_stop; /* atomic builtins: the engine thread reads it */

static void *engine(void *arg) {
    while (!__atomic_load_n(&engine_stop, __ATOMIC_ACQUIRE))
        engine_step(arg);
    return NULL;
}

static void run_threads(int drive) {
    hvd_tq_t *q;
    assert_int_equal(hvd__tq_create(&q), HVD_OK);
    pthread_t eng, th[THREADS];
    worker_t w[THREADS];
    __atomic_store_n(&engine_stop, 0, __ATOMIC_RELEASE);
    if (!drive)
        pthread_create(&eng, NULL, engine, q);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_t){.q = q, .id = i, .drive = drive};
        pthread_create(&th[i], NULL, worker, &w[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    __atomic_store_n(&engine_stop, 1, __ATOMIC_RELEASE);
    if (!drive)
        pthread_join(eng, NULL);
    assert_int_equal(hvd__tq_in_flight(q), 0);
    hvd__tq_destroy(q);
}

static void test_threads_engine_thread(void **state) {
    (void)state;
    run_threads(0);
}

static void test_threads_waiters_drive(void **state) {
    (void)state;
    run_threads(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_duplicates_and_states),
        cmocka_unit_test(test_fail_all_and_shutdown),
        cmocka_unit_test(test_on_done),
        cmocka_unit_test(test_many_names),
        cmocka_unit_test(test_threads_engine_thread),
        cmocka_unit_test(test_threads_waiters_drive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
