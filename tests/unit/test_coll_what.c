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
    g.name = "global";
    const uint32_t seqs[] = {0, 1, 9, 10, 12, 99, 100, 4096, 123456789, UINT32_MAX};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        g.seq = seqs[i];
        for (size_t size = 1; size <= 64; size++) {
            char want[64], got[64];
            snprintf(want, size, "%s #%u on the %s communicator", "allreduce", g.seq, g.name);
            memset(got, 'x', sizeof got);
            hvd__coll_what(&g, "allreduce", got, size);
            assert_string_equal(got, want);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_text_as_the_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
