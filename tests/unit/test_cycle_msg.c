/* The per-cycle control message (wire/cycle.h): a message round-trips field by field; a
 * blocking call's message with an 8-byte payload fits the first cache line of an arena box
 * (52 bytes after the step number and length); truncation, trailing bytes, a wrong version
 * or unknown ext flag, and bounds exceeded are rejected with HVD_ERR_PROTOCOL; the fuzzer's
 * seeds (tests/fuzz/corpus/cycle) are current messages that re-encode to their own bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "wire/cycle.h"

#include <stdio.h>
#include <string.h>

static hvd_cycle_msg_t blocking_msg(const uint8_t *payload, uint32_t len) {
    hvd_cycle_msg_t m;
    memset(&m, 0, sizeof m);
    m.flags = HVD_CYC_BLOCKING | HVD_CYC_PAYLOAD;
    m.comm = 1;
    m.sig = (hvd_sig_t){.coll = 1, .dtype = 7, .op = 0, .root = -1, .count = 2, .seq = 41};
    m.sig.extra = 0x0123456789abcdefull;
    m.payload = payload;
    m.payload_len = len;
    return m;
}

static void test_round_trip(void **state) {
    (void)state;
    const uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint8_t hits[16] = {0x05, 0, 0, 0, 0, 0, 0, 0x80, 0xff};
    hvd_cycle_msg_t m = blocking_msg(payload, sizeof payload);
    m.nwords = 2;
    m.hits = hits;
    m.reason = "bye";
    m.reason_len = 3;
    m.flags |= HVD_CYC_SHUTDOWN;
    uint8_t buf[256];
    size_t len = hvd__cycle_size(&m);
    assert_int_equal(len, HVD_CYC_HEADER_LEN + 16 + 8 + 3);
    hvd__cycle_encode(&m, buf);
    hvd_cycle_msg_t d;
    assert_int_equal(hvd__cycle_decode(buf, len, 2, 64, 3, &d), HVD_OK);
    assert_int_equal(d.flags, m.flags);
    assert_int_equal(d.comm, 1);
    assert_true(hvd__sig_equal(&d.sig, &m.sig));
    assert_int_equal(d.nwords, 2);
    assert_memory_equal(d.hits, hits, 16);
    assert_null(d.invalid);
    assert_int_equal(d.payload_len, 8);
    assert_memory_equal(d.payload, payload, 8);
    assert_int_equal(d.reason_len, 3);
    assert_memory_equal(d.reason, "bye", 3);
    assert_int_equal(hvd__cycle_word(d.hits, 0), 0x8000000000000005ull);
    assert_int_equal(hvd__cycle_word(d.hits, 1), 0xff);
}

/* Rank 0's autotune configuration after the reason; one byte short is truncated. */
static void test_tune_block(void **state) {
    (void)state;
    hvd_cycle_msg_t m = {.flags = HVD_CYC_TUNE | HVD_CYC_SHUTDOWN,
                         .reason = "x",
                         .reason_len = 1,
                         .tune_fusion = 0x123456789ull,
                         .tune_cycle_us = 7000,
                         .tune_knobs = 1};
    uint8_t buf[128];
    size_t len = hvd__cycle_size(&m);
    assert_int_equal(len, HVD_CYC_HEADER_LEN + 1 + HVD_CYC_TUNE_LEN);
    hvd__cycle_encode(&m, buf);
    hvd_cycle_msg_t d;
    assert_int_equal(hvd__cycle_decode(buf, len, 0, 0, 0, &d), HVD_OK);
    assert_int_equal(d.reason_len, 1);
    assert_int_equal(d.tune_fusion, 0x123456789ull);
    assert_int_equal(d.tune_cycle_us, 7000);
    assert_int_equal(d.tune_knobs, 1);
    assert_int_equal(hvd__cycle_decode(buf, len - 1, 0, 0, 0, &d), HVD_ERR_PROTOCOL);
}

/* Rank 0 asking ranks for their stacks: the section after the tune block; a count over
 * the bound, or a section cut short, is rejected. */
static void test_stacks_section(void **state) {
    (void)state;
    const uint8_t ranks[8] = {1, 0, 0, 0, 0x2c, 0x01, 0, 0}; /* 1 and 300 */
    hvd_cycle_msg_t m = {.flags = HVD_CYC_TUNE,
                         .tune_cycle_us = 5,
                         .ext = HVD_CYC_EXT_STACKS,
                         .nstacks = 2,
                         .stacks = ranks};
    uint8_t buf[128];
    size_t len = hvd__cycle_size(&m);
    assert_int_equal(len, HVD_CYC_HEADER_LEN + HVD_CYC_TUNE_LEN + 2 + 8);
    hvd__cycle_encode(&m, buf);
    hvd_cycle_msg_t d;
    assert_int_equal(hvd__cycle_decode(buf, len, 0, 0, 0, &d), HVD_OK);
    assert_int_equal(d.ext, HVD_CYC_EXT_STACKS);
    assert_int_equal(d.tune_cycle_us, 5);
    assert_int_equal(d.nstacks, 2);
    assert_int_equal(hvd__cycle_stack_rank(&d, 0), 1);
    assert_int_equal(hvd__cycle_stack_rank(&d, 1), 300);
    for (size_t cut = len - 10; cut < len; cut++)
        assert_int_equal(hvd__cycle_decode(buf, cut, 0, 0, 0, &d), HVD_ERR_PROTOCOL);
    m.nstacks = 0; /* an empty list is a message too */
    len = hvd__cycle_size(&m);
    hvd__cycle_encode(&m, buf);
    assert_int_equal(hvd__cycle_decode(buf, len, 0, 0, 0, &d), HVD_OK);
    assert_int_equal(d.nstacks, 0);
    uint8_t big[HVD_CYC_HEADER_LEN + HVD_CYC_TUNE_LEN + 2 + 4 * (HVD_CYC_STACKS_MAX + 1)];
    uint8_t many[4 * (HVD_CYC_STACKS_MAX + 1)] = {0};
    m.nstacks = HVD_CYC_STACKS_MAX + 1;
    m.stacks = many;
    hvd__cycle_encode(&m, big);
    assert_int_equal(hvd__cycle_decode(big, sizeof big, 0, 0, 0, &d), HVD_ERR_PROTOCOL);
}

static void test_small_call_fits_a_line(void **state) {
    (void)state;
    const uint8_t payload[8] = {0};
    hvd_cycle_msg_t m = blocking_msg(payload, sizeof payload);
    assert_true(hvd__cycle_size(&m) <= 64 - 8 - 4);
}

static void test_rejected(void **state) {
    (void)state;
    const uint8_t payload[8] = {9};
    hvd_cycle_msg_t m = blocking_msg(payload, sizeof payload);
    uint8_t buf[128];
    size_t len = hvd__cycle_size(&m);
    hvd__cycle_encode(&m, buf);
    hvd_cycle_msg_t d;
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(hvd__cycle_decode(buf, cut, 0, 64, 1, &d), HVD_ERR_PROTOCOL);
    assert_int_equal(hvd__cycle_decode(buf, len + 1, 0, 64, 1, &d), HVD_ERR_PROTOCOL);
    assert_int_equal(hvd__cycle_decode(buf, len, 0, 7, 1, &d), HVD_ERR_PROTOCOL); /* payload */
    assert_non_null(strstr(hvd_last_error(), "rank 1"));
    buf[2] = 1; /* version 1: the longer header */
    assert_int_equal(hvd__cycle_decode(buf, len, 0, 64, 1, &d), HVD_ERR_PROTOCOL);
    buf[2] = HVD_CYC_VERSION;
    buf[5] = 0x80; /* an ext flag this version does not know */
    assert_int_equal(hvd__cycle_decode(buf, len, 0, 64, 1, &d), HVD_ERR_PROTOCOL);
    buf[5] = HVD_CYC_EXT_STACKS; /* without its section */
    assert_int_equal(hvd__cycle_decode(buf, len, 0, 64, 1, &d), HVD_ERR_PROTOCOL);
    buf[5] = 0;
    assert_int_equal(hvd__cycle_decode(buf, len, 0, 64, 1, &d), HVD_OK);
}

/* Seeds of an older version would decode to nothing, and the fuzzer start from noise. */
static void test_fuzz_seeds_decode(void **state) {
    (void)state;
    static const char *seeds[] = {"blocking", "hits", "idle", "shutdown", "stacks"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/cycle/%s", HVD_FUZZ_SEEDS, seeds[i]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        uint8_t buf[4096], again[4096];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        hvd_cycle_msg_t d;
        assert_int_equal(hvd__cycle_decode(buf, len, 64, 4096, 1, &d), HVD_OK);
        assert_int_equal(hvd__cycle_size(&d), len);
        hvd__cycle_encode(&d, again);
        assert_memory_equal(again, buf, len);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_tune_block),
        cmocka_unit_test(test_stacks_section), cmocka_unit_test(test_small_call_fits_a_line),
        cmocka_unit_test(test_rejected),       cmocka_unit_test(test_fuzz_seeds_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
