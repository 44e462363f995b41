/* The host arena: processes that map it step together and read each other's slots and boxes
 * (the double buffers keep them unchanged until every member has read them); a wait ends with
 * HVD_ERR_TIMEOUT naming the members that never came, with the check's error at once, and
 * with the first recorded abort's cause (also one recorded by another process while this
 * one sleeps); a header that does not match is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "os/shm.h"
#include "transport/shm_arena.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define DATA 4096

static void *fresh(int n) {
    size_t bytes = hvd__arena_bytes(n, DATA);
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    hvd__arena_format(mem, n, DATA);
    return mem;
}

static void view(hvd_arena_t *a, void *mem, int n, int self, int timeout_ms) {
    assert_int_equal(hvd__arena_attach(a, mem, hvd__arena_bytes(n, DATA), n, self, DATA), HVD_OK);
    a->spin_us = 100;
    a->timeout_ms = timeout_ms;
}

/* Member self of n: STEPS steps, each writing (step, self) into its slot and its box (the
 * box also filled to its end) and checking every other member's values of the same step after
 * the wait; every third step is followed by one more step on the same slot (as a collective
 * that publishes twice per slot does), which changes only the boxes. Returns the number of
 * wrong reads. */
#define STEPS 2000
static int box_wrong(const hvd_arena_t *a, int idx, uint32_t s) {
    const uint8_t *b = hvd__arena_box_in(a, idx);
    uint32_t got[2];
    memcpy(got, b, sizeof got);
    int wrong = got[0] != s || got[1] != (uint32_t)idx;
    for (size_t k = sizeof got; k < HVD_ARENA_BOX_BYTES; k++)
        wrong += b[k] != (uint8_t)(s + idx);
    return wrong;
}

static void box_put(hvd_arena_t *a, int self, uint32_t s) {
    uint8_t *b = hvd__arena_box_out(a);
    uint32_t v[2] = {s, (uint32_t)self};
    memcpy(b, v, sizeof v);
    memset(b + sizeof v, (uint8_t)(s + self), HVD_ARENA_BOX_BYTES - sizeof v);
}

static int run_member(void *mem, int n, int self) {
    hvd_arena_t a;
    view(&a, mem, n, self, 10000);
    int wrong = 0;
    for (uint32_t s = 0; s < STEPS; s++) {
        uint32_t v[2] = {s, (uint32_t)self};
        memcpy(hvd__arena_data(&a, self), v, sizeof v);
        box_put(&a, self, s);
        if (hvd__arena_step(&a) != HVD_OK)
            return -1;
        for (int i = 0; i < n; i++) {
            uint32_t got[2];
            memcpy(got, hvd__arena_data(&a, i), sizeof got);
            wrong += got[0] != s || got[1] != (uint32_t)i;
            wrong += box_wrong(&a, i, s);
        }
        if (s % 3 == 0) {
            box_put(&a, self, s + 7);
            if (hvd__arena_step(&a) != HVD_OK)
                return -1;
            for (int i = 0; i < n; i++)
                wrong += box_wrong(&a, i, s + 7);
        }
        hvd__arena_flip(&a);
    }
    return wrong;
}

static void test_members_read_each_others_steps(void **state) {
    (void)state;
    for (int n = 2; n <= 5; n += 3) {
        void *mem = fresh(n);
        pid_t kids[8];
        for (int i = 1; i < n; i++) {
            kids[i] = fork();
            assert_true(kids[i] >= 0);
            if (kids[i] == 0)
                _exit(run_member(mem, n, i) == 0 ? 0 : 1);
        }
        assert_int_equal(run_member(mem, n, 0), 0);
        for (int i = 1; i < n; i++) {
            int status;
            assert_int_equal(waitpid(kids[i], &status, 0), kids[i]);
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
        munmap(mem, hvd__arena_bytes(n, DATA));
    }
}

static void test_timeout_names_the_missing_members(void **state) {
    (void)state;
    void *mem = fresh(3);
    hvd_arena_t a, b;
    view(&a, mem, 3, 0, 1000);
    view(&b, mem, 3, 1, 1000);
    int ranks[3] = {10, 11, 12};
    a.ranks = ranks;
    hvd__arena_publish(&b); /* member 1 is there, member 2 never comes */
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__arena_step(&a), HVD_ERR_TIMEOUT);
    int64_t took = hvd__clock_now_ms() - t0;
    assert_true(took >= 1000 && took < 3000);
    assert_non_null(strstr(hvd_last_error(), "waiting for rank 12 "));
    assert_null(strstr(hvd_last_error(), "11"));
    munmap(mem, hvd__arena_bytes(3, DATA));
}

/* A member blocked elsewhere (a transport wait for rank 7) rewrites its wait record on every
 * sleep slice: the timeout names whom it waits for. A member whose record is old (it said it
 * waited for rank 8, then stopped) is named alone, and so is one waiting for the waiter. */
static void test_timeout_names_whom_a_blocked_member_waits_for(void **state) {
    (void)state;
    void *mem = fresh(3);
    hvd_arena_t a, b, c;
    view(&a, mem, 3, 0, 1000);
    view(&b, mem, 3, 1, 1000);
    view(&c, mem, 3, 2, 1000);
    int ranks[3] = {10, 11, 12};
    a.ranks = ranks;
    hvd__arena_note_wait(&c, 8);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 60; i++) {
            hvd__arena_note_wait(&b, 7);
            usleep(50 * 1000);
        }
        _exit(0);
    }
    assert_int_equal(hvd__arena_step(&a), HVD_ERR_TIMEOUT);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hvd_last_error());
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_non_null(strstr(msg, "rank 11 (itself waiting for rank 7), 12 to reach"));
    assert_null(strstr(msg, "rank 8"));
    hvd__arena_note_wait(&b, 7);
    assert_int_equal(hvd__arena_waits_for(&a, 1), 7);
    hvd__arena_note_wait(&b, -1);
    assert_int_equal(hvd__arena_waits_for(&a, 1), -1);
    hvd__arena_note_wait(&b, 10); /* member 1 waits for member 0 itself: not named */
    view(&a, mem, 3, 0, 500);
    a.ranks = ranks;
    hvd__arena_note_wait(&c, -1);
    assert_int_equal(hvd__arena_step(&a), HVD_ERR_TIMEOUT);
    assert_null(strstr(hvd_last_error(), "itself"));
    munmap(mem, hvd__arena_bytes(3, DATA));
}

static int checks;
static hvd_status_t failing_check(void *ctx) {
    (void)ctx;
    checks++;
    return hvd__error_set(HVD_ERR_PEER_LOST, "rank 1 is gone");
}

static void test_check_error_ends_the_wait(void **state) {
    (void)state;
    void *mem = fresh(2);
    hvd_arena_t a;
    view(&a, mem, 2, 0, 60000);
    a.check = failing_check;
    checks = 0;
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__arena_step(&a), HVD_ERR_PEER_LOST);
    assert_true(hvd__clock_now_ms() - t0 < 1000);
    assert_true(checks >= 1);
    assert_string_equal(hvd_last_error(), "rank 1 is gone");
    munmap(mem, hvd__arena_bytes(2, DATA));
}

static void test_abort_from_another_process_wakes_a_sleeper(void **state) {
    (void)state;
    void *mem = fresh(2);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        hvd_arena_t b;
        view(&b, mem, 2, 1, 60000);
        usleep(300 * 1000);
        hvd__arena_abort(&b, HVD_ERR_IO, "rank 1 failed first: disk on fire");
        hvd__arena_abort(&b, HVD_ERR_TIMEOUT, "a later cause");
        _exit(0);
    }
    hvd_arena_t a;
    view(&a, mem, 2, 0, 60000);
    a.spin_us = 0; /* sleeps at once: the abort must wake it */
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__arena_step(&a), HVD_ERR_IO);
    int64_t took = hvd__clock_now_ms() - t0;
    assert_true(took >= 250 && took < 2000);
    assert_string_equal(hvd_last_error(), "rank 1 failed first: disk on fire");
    int status;
    assert_int_equal(waitpid(kid, &status, 0), kid);
    munmap(mem, hvd__arena_bytes(2, DATA));
}

static void test_mismatched_header_is_refused(void **state) {
    (void)state;
    void *mem = fresh(2);
    hvd_arena_t a;
    assert_int_equal(hvd__arena_attach(&a, mem, hvd__arena_bytes(3, DATA), 3, 0, DATA),
                     HVD_ERR_PROTOCOL);
    assert_int_equal(hvd__arena_attach(&a, mem, hvd__arena_bytes(2, 2 * DATA), 2, 0, 2 * DATA),
                     HVD_ERR_PROTOCOL);
    memset(mem, 0, 64);
    assert_int_equal(hvd__arena_attach(&a, mem, hvd__arena_bytes(2, DATA), 2, 0, DATA),
                     HVD_ERR_PROTOCOL);
    munmap(mem, hvd__arena_bytes(2, DATA));
}

/* A memfd arena passes the same way (hvd__shm_create zero-fills and seals it). */
static void test_memfd_arena(void **state) {
    (void)state;
    size_t bytes = hvd__arena_bytes(2, DATA);
    int fd;
    void *mem;
    assert_int_equal(hvd__shm_create(bytes, "test-arena", &fd), HVD_OK);
    assert_int_equal(hvd__shm_map(fd, bytes, &mem), HVD_OK);
    hvd__arena_format(mem, 2, DATA);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        void *m2;
        if (hvd__shm_map(fd, bytes, &m2) != HVD_OK)
            _exit(2);
        _exit(run_member(m2, 2, 1) == 0 ? 0 : 1);
    }
    assert_int_equal(run_member(mem, 2, 0), 0);
    int status;
    assert_int_equal(waitpid(kid, &status, 0), kid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fd);
    hvd__shm_unmap(mem, bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members_read_each_others_steps),
        cmocka_unit_test(test_timeout_names_the_missing_members),
        cmocka_unit_test(test_timeout_names_whom_a_blocked_member_waits_for),
        cmocka_unit_test(test_check_error_ends_the_wait),
        cmocka_unit_test(test_abort_from_another_process_wakes_a_sleeper),
        cmocka_unit_test(test_mismatched_header_is_refused),
        cmocka_unit_test(test_memfd_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
