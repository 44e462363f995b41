/* Fusion planning: consecutive matching allreduces merge up to the threshold (by bytes of
 * their dtype), a non-matching response is skipped over and kept right after the fused one,
 * the look-ahead stops when what it skips would not fit, tensors over the threshold and
 * other types stay alone, threshold 0 changes nothing, and order is otherwise kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/types.h>

#include "controller/fusion.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static void add(hvd_response_list_t *l, const char *name, int type, int dtype, int op, int64_t n) {
    l->items = realloc(l->items, (l->count + 1) * sizeof *l->items);
    hvd_response_t *r = &l->items[l->count++];
    memset(r, 0, sizeof *r);
    r->type = (uint8_t)type;
    r->dtype = (uint8_t)dtype;
    r->op = (uint8_t)op;
    r->prescale = r->postscale = 1;
    r->names = malloc(sizeof *r->names);
    r->names[0] = strdup(name);
    r->nnames = 1;
    r->sizes = malloc(sizeof *r->sizes);
    r->sizes[0] = n;
    r->nsizes = 1;
    r->error = strdup("");
}

static void expect_names(const hvd_response_t *r, const char *joined) {
    char buf[256] = "";
    for (uint32_t i = 0; i < r->nnames; i++) {
        strcat(buf, i ? "," : "");
        strcat(buf, r->names[i]);
    }
    assert_string_equal(buf, joined);
}

static void test_fuse_with_lookahead(void **state) {
    (void)state;
    hvd_response_list_t l = {0};
    add(&l, "a", HVD_REQ_ALLREDUCE, HVD_FLOAT32, HVD_SUM, 100);    /* 400 B */
    add(&l, "b", HVD_REQ_ALLREDUCE, HVD_FLOAT32, HVD_SUM, 100);    /* 400 B */
    add(&l, "i", HVD_REQ_ALLREDUCE, HVD_INT32, HVD_SUM, 10);       /* other dtype: skipped */
    add(&l, "c", HVD_REQ_ALLREDUCE, HVD_FLOAT32, HVD_SUM, 25);     /* 100 B */
    add(&l, "g", HVD_REQ_BROADCAST, HVD_FLOAT32, HVD_SUM, 10);     /* never fused */
    add(&l, "d", HVD_REQ_ALLREDUCE, HVD_FLOAT32, HVD_SUM, 1);      /* past the broadcast */
    add(&l, "e", HVD_REQ_ALLREDUCE, HVD_FLOAT32, HVD_MAX, 1);      /* other op */
    add(&l, "big", HVD_REQ_ALLREDUCE, HVD_FLOAT32, HVD_SUM, 1000); /* over the threshold */
    assert_int_equal(hvd__fuse_responses(&l, 1000), HVD_OK);
    assert_int_equal(l.count, 6);
    expect_names(&l.items[0], "a,b,c");
    assert_int_equal(l.items[0].nsizes, 3);
    assert_true(l.items[0].sizes[2] == 25);
    expect_names(&l.items[1], "i");
    expect_names(&l.items[2], "g");
    expect_names(&l.items[3], "d");
    expect_names(&l.items[4], "e");
    expect_names(&l.items[5], "big");
    hvd__neg_responses_fini(&l);
}

static void test_threshold_zero_and_exact_fit(void **state) {
    (void)state;
    hvd_response_list_t l = {0};
    add(&l, "a", HVD_REQ_ALLREDUCE, HVD_FLOAT64, HVD_SUM, 64);
    add(&l, "b", HVD_REQ_ALLREDUCE, HVD_FLOAT64, HVD_SUM, 64);
    assert_int_equal(hvd__fuse_responses(&l, 0), HVD_OK);
    assert_int_equal(l.count, 2);
    assert_int_equal(hvd__fuse_responses(&l, 1023), HVD_OK); /* 1024 B do not fit */
    assert_int_equal(l.count, 2);
    assert_int_equal(hvd__fuse_responses(&l, 1024), HVD_OK);
    assert_int_equal(l.count, 1);
    expect_names(&l.items[0], "a,b");
    hvd__neg_responses_fini(&l);
}

static void test_many_small(void **state) {
    (void)state;
    hvd_response_list_t l = {0};
    char name[16];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "t%d", i);
        add(&l, name, HVD_REQ_ALLREDUCE, HVD_FLOAT32, HVD_AVERAGE, 1024); /* 4 KiB each */
    }
    assert_int_equal(hvd__fuse_responses(&l, 64 * 1024), HVD_OK);
    assert_int_equal(l.count, 7); /* 16 per buffer: 6 full + 4 */
    assert_int_equal(l.items[0].nnames, 16);
    assert_int_equal(l.items[6].nnames, 4);
    assert_string_equal(l.items[6].names[3], "t99");
    hvd__neg_responses_fini(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuse_with_lookahead),
        cmocka_unit_test(test_threshold_zero_and_exact_fit),
        cmocka_unit_test(test_many_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
