/* The collectives' "allreduce #12 on the global communicator" names, formatted by hand on
 * every call: the same text as the printf format they replace, for any sequence number and
 * cut short (always terminated) when the buffer is small. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "collectives/coll.h"

#include <stdio.h>
#include <string.h>

static void test_same_text_as_the_format(void **state) {
    (void)state;
    hvd_group_t g;
    memset(&g, 0, sizeof g);
    snprintf(g.name, sizeof g.name, "global");
    const uint32_t seqs[] = {0, 1, 9, 10, 12, 99, 100, 4096, 123456789, UINT32_MAX};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        g.seq = seqs[i];
        for (size_t size = 1; size <= 64; size++) {
            char full[128], want[64], got[64];
            snprintf(full, sizeof full, "%s #%u on the %s communicator", "allreduce", g.seq,
                     g.name);
            snprintf(want, size, "%.*s", (int)(size - 1), full); /* cut as a size-byte buffer */
            memset(got, 'x', sizeof got);
            hvd__coll_what(&g, "allreduce", got, size);
            assert_string_equal(got, want);
        }
    }
}

/* The group keeps its own copy of the name it was created with: process sets build theirs in
 * a stack buffer that is gone by the time the engine thread formats an error with it. */
static void test_group_owns_its_name(void **state) {
    (void)state;
    char name[32];
    snprintf(name, sizeof name, "process set %d", 7);
    const int members[2] = {0, 1};
    hvd_group_t g;
    assert_int_equal(hvd__group_init(&g, NULL, name, members, 2, 0), HVD_OK);
    memset(name, 'x', sizeof name - 1);
    char got[96];
    hvd__coll_what(&g, "allreduce", got, sizeof got);
    assert_string_equal(got, "allreduce #0 on the process set 7 communicator");
    hvd__group_fini(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_text_as_the_format),
        cmocka_unit_test(test_group_owns_its_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
