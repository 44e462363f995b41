/* The elastic protocol's keys and values (rendezvous/elastic_msg.h):
 *   - assignments: every field required, any order, strict decimals, consistent sizes;
 *     "removed"; "stop" with and without a message; garbage of every kind refused with
 *     HVD_ERR_PROTOCOL quoting the text (made printable, bounded), the output untouched;
 *   - format then parse gives the same assignment back;
 *   - ready records: exactly "failure" or "update";
 *   - scope and slot names, and slot names the store could not hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "rendezvous/elastic_msg.h"

#include <stdio.h>
#include <string.h>

static hvd_status_t parse(const char *text, hvd_elastic_assign_t *a) {
    return hvd__elastic_msg_assign_parse(text, strlen(text), a);
}

static void test_assign_fields(void **state) {
    (void)state;
    hvd_elastic_assign_t a;
    assert_int_equal(parse("rank=2 size=4 local_rank=0 local_size=2 cross_rank=1 cross_size=2 "
                           "sync=1",
                           &a),
                     HVD_OK);
    assert_int_equal(a.verdict, HVD_ELASTIC_ASSIGNED);
    assert_int_equal(a.rank, 2);
    assert_int_equal(a.size, 4);
    assert_int_equal(a.local_rank, 0);
    assert_int_equal(a.local_size, 2);
    assert_int_equal(a.cross_rank, 1);
    assert_int_equal(a.cross_size, 2);
    assert_int_equal(a.sync, 1);
    /* any order */
    assert_int_equal(parse("sync=0 cross_size=1 cross_rank=0 local_size=1 local_rank=0 size=1 "
                           "rank=0",
                           &a),
                     HVD_OK);
    assert_int_equal(a.size, 1);
    assert_int_equal(a.sync, 0);
    /* the text need not be terminated: only len bytes are read */
    const char *t = "rank=0 size=2 local_rank=0 local_size=1 cross_rank=0 cross_size=2 sync=1XYZ";
    assert_int_equal(hvd__elastic_msg_assign_parse(t, strlen(t) - 3, &a), HVD_OK);
    assert_int_equal(a.sync, 1);
}

static void test_assign_verdicts(void **state) {
    (void)state;
    hvd_elastic_assign_t a;
    assert_int_equal(parse("removed", &a), HVD_OK);
    assert_int_equal(a.verdict, HVD_ELASTIC_REMOVED);
    assert_int_equal(parse("stop", &a), HVD_OK);
    assert_int_equal(a.verdict, HVD_ELASTIC_STOP);
    assert_string_equal(a.message, "");
    assert_int_equal(parse("stop Horovod was shutdown because number of resets during elastic "
                           "job exceeded limit: 1",
                           &a),
                     HVD_OK);
    assert_int_equal(a.verdict, HVD_ELASTIC_STOP);
    assert_string_equal(a.message, "Horovod was shutdown because number of resets during elastic "
                                   "job exceeded limit: 1");
    assert_int_equal(parse("stop two\n\tlines", &a), HVD_OK);
    assert_string_equal(a.message, "two\n\tlines");
}

static void expect_garbage(const char *text, size_t len, const char *quoted) {
    hvd_elastic_assign_t a;
    memset(&a, 0x5a, sizeof a);
    hvd_elastic_assign_t before = a;
    hvd_status_t st = hvd__elastic_msg_assign_parse(text, len, &a);
    if (st != HVD_ERR_PROTOCOL)
        fail_msg("'%.*s' parsed with status %d, want HVD_ERR_PROTOCOL", (int)len, text, st);
    assert_memory_equal(&a, &before, sizeof a); /* output untouched */
    if (quoted && !strstr(hvd_last_error(), quoted))
        fail_msg("message '%s' does not quote '%s'", hvd_last_error(), quoted);
}

static void test_assign_garbage(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",
        " ",
        "removed ",
        "Removed",
        "stopping",
        "stop\x01",
        "stop bell\x07",
        "rank=0",
        /* each field missing in turn */
        "size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=1 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=1 local_rank=0 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=1 local_rank=0 local_size=1 cross_size=1 sync=0",
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 sync=0",
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1",
        /* malformed separators and values */
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0 ",
        " rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0  size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0,size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0\n",
        "rank= size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=-1 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=+0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=00 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0x1 size=2 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=9999999999 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=2",
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=yes",
        "rank=0 rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0 extra=1",
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0 =1",
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync==0",
        /* inconsistent */
        "rank=1 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=0 local_rank=0 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=2 local_rank=1 local_size=1 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=2 local_rank=0 local_size=3 cross_rank=0 cross_size=1 sync=0",
        "rank=0 size=2 local_rank=0 local_size=1 cross_rank=2 cross_size=2 sync=0",
        "rank=0 size=2 local_rank=0 local_size=1 cross_rank=0 cross_size=3 sync=0",
        /* the reference's answer format is not ours */
        "0,2,0,1,0,2",
        "-1,-1,-1,-1,-1,-1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_garbage(bad[i], strlen(bad[i]), NULL);
    /* the message quotes the text */
    expect_garbage("rank=zero", 9, "'rank=zero'");
    /* control characters and NULs are shown as '?', never raw */
    expect_garbage("ran\0k=0\x1b[31m", 12, "'ran?k=0?[31m'");
    /* a NUL inside a stop message */
    expect_garbage("stop a\0b", 8, NULL);
    /* too long: refused before anything else; the quote is bounded */
    char big[HVD_ELASTIC_VALUE_MAX + 2];
    memset(big, 'x', sizeof big);
    memcpy(big, "stop ", 5);
    expect_garbage(big, sizeof big, "...");
    assert_true(strlen(hvd_last_error()) < 400);
    /* exactly the bound is fine */
    hvd_elastic_assign_t a;
    assert_int_equal(hvd__elastic_msg_assign_parse(big, HVD_ELASTIC_VALUE_MAX, &a), HVD_OK);
    assert_int_equal(strlen(a.message), HVD_ELASTIC_VALUE_MAX - 5);
    assert_int_equal(hvd__elastic_msg_assign_parse(NULL, 0, &a), HVD_ERR_PROTOCOL);
}

static void test_assign_round_trip(void **state) {
    (void)state;
    hvd_elastic_assign_t in = {.verdict = HVD_ELASTIC_ASSIGNED,
                               .rank = 5,
                               .size = 12,
                               .local_rank = 1,
                               .local_size = 4,
                               .cross_rank = 1,
                               .cross_size = 3,
                               .sync = 1},
                         out;
    char buf[HVD_ELASTIC_VALUE_MAX + 1];
    int n = hvd__elastic_msg_assign_format(&in, buf, sizeof buf);
    assert_true(n > 0);
    assert_string_equal(buf, "rank=5 size=12 local_rank=1 local_size=4 cross_rank=1 cross_size=3 "
                             "sync=1");
    assert_int_equal(hvd__elastic_msg_assign_parse(buf, (size_t)n, &out), HVD_OK);
    assert_memory_equal(&in, &out, sizeof in);

    hvd_elastic_assign_t rm = {.verdict = HVD_ELASTIC_REMOVED};
    n = hvd__elastic_msg_assign_format(&rm, buf, sizeof buf);
    assert_string_equal(buf, "removed");
    assert_int_equal(hvd__elastic_msg_assign_parse(buf, (size_t)n, &out), HVD_OK);
    assert_int_equal(out.verdict, HVD_ELASTIC_REMOVED);

    hvd_elastic_assign_t stop = {.verdict = HVD_ELASTIC_STOP};
    snprintf(stop.message, sizeof stop.message, "reset limit 3 reached");
    n = hvd__elastic_msg_assign_format(&stop, buf, sizeof buf);
    assert_string_equal(buf, "stop reset limit 3 reached");
    assert_int_equal(hvd__elastic_msg_assign_parse(buf, (size_t)n, &out), HVD_OK);
    assert_string_equal(out.message, "reset limit 3 reached");
    /* a message the parser would refuse is not written, nor what does not fit */
    stop.message[0] = '\x02';
    assert_int_equal(hvd__elastic_msg_assign_format(&stop, buf, sizeof buf), -1);
    assert_int_equal(hvd__elastic_msg_assign_format(&in, buf, 10), -1);
}

static void test_ready(void **state) {
    (void)state;
    hvd_elastic_ready_t r = HVD_ELASTIC_READY_UPDATE;
    assert_int_equal(hvd__elastic_msg_ready_parse("failure", 7, &r), HVD_OK);
    assert_int_equal(r, HVD_ELASTIC_READY_FAILURE);
    assert_int_equal(hvd__elastic_msg_ready_parse("update", 6, &r), HVD_OK);
    assert_int_equal(r, HVD_ELASTIC_READY_UPDATE);
    assert_string_equal(hvd__elastic_msg_ready_str(HVD_ELASTIC_READY_FAILURE), "failure");
    assert_string_equal(hvd__elastic_msg_ready_str(HVD_ELASTIC_READY_UPDATE), "update");
    static const char *const bad[] = {"",        "fail",    "failures",  "Failure", "update ",
                                      " update", "updated", "failure\n", "success"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = HVD_ELASTIC_READY_UPDATE;
        assert_int_equal(hvd__elastic_msg_ready_parse(bad[i], strlen(bad[i]), &r),
                         HVD_ERR_PROTOCOL);
        assert_int_equal(r, HVD_ELASTIC_READY_UPDATE);
    }
    assert_int_equal(hvd__elastic_msg_ready_parse("upd\0te", 6, &r), HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "'upd?te'"));
}

static void test_names(void **state) {
    (void)state;
    char name[HVD_ELASTIC_NAME_MAX];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_INIT, 0, name);
    assert_string_equal(name, "init.r0");
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_EVENTS, 7, name);
    assert_string_equal(name, "elastic_ev.r7");
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_READY, 12, name);
    assert_string_equal(name, "elastic_ready.r12");
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_ASSIGN, 2147483647, name);
    assert_string_equal(name, "elastic_assign.r2147483647");
    assert_int_equal(hvd__elastic_msg_slot("10.0.0.2", 3, name), HVD_OK);
    assert_string_equal(name, "10.0.0.2:3");
    assert_int_equal(hvd__elastic_msg_slot("node-7.cluster_a", 0, name), HVD_OK);
    assert_string_equal(name, "node-7.cluster_a:0");
    strcpy(name, "untouched");
    assert_int_equal(hvd__elastic_msg_slot("bad host", 0, name), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "bad host"));
    assert_int_equal(hvd__elastic_msg_slot("a/b", 0, name), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__elastic_msg_slot("", 0, name), HVD_OK); /* ":0" is a valid name */
    assert_int_equal(hvd__elastic_msg_slot("h", -1, name), HVD_ERR_INVALID_ARG);
    char longhost[200];
    memset(longhost, 'h', sizeof longhost - 1);
    longhost[sizeof longhost - 1] = '\0';
    assert_int_equal(hvd__elastic_msg_slot(longhost, 0, name), HVD_ERR_INVALID_ARG);
    assert_string_equal(name, ":0");
}

static void test_printable(void **state) {
    (void)state;
    char out[8];
    hvd__elastic_msg_printable("abc", 3, out, sizeof out);
    assert_string_equal(out, "abc");
    hvd__elastic_msg_printable("a\nb\xff", 4, out, sizeof out);
    assert_string_equal(out, "a?b?");
    hvd__elastic_msg_printable("abcdefghij", 10, out, sizeof out);
    assert_string_equal(out, "abcd...");
    hvd__elastic_msg_printable("abcdefg", 7, out, sizeof out);
    assert_string_equal(out, "abcdefg");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assign_fields),  cmocka_unit_test(test_assign_verdicts),
        cmocka_unit_test(test_assign_garbage), cmocka_unit_test(test_assign_round_trip),
        cmocka_unit_test(test_ready),          cmocka_unit_test(test_names),
        cmocka_unit_test(test_printable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
