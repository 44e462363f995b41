/* Negotiation message codecs: request and response lists round-trip field by field; every
 * truncation, trailing byte, wrong magic or version, oversized count and bad name is
 * rejected with HVD_ERR_PROTOCOL; the encoder refuses names and errors beyond the bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/le.h"
#include "wire/negotiate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hvd_request_t sample_request(char *name, int rank) {
    hvd_request_t r = {.rank = rank,
                       .type = HVD_REQ_ALLREDUCE,
                       .dtype = 7,
                       .op = 1,
                       .ndims = 2,
                       .root = -1,
                       .prescale = 0.5,
                       .postscale = 2.0,
                       .dims = {17, 3},
                       .name = name};
    return r;
}

static void test_requests_round_trip(void **state) {
    (void)state;
    char n1[] = "grad/layer1.weight", n2[] = "x";
    hvd_request_t items[2] = {sample_request(n1, 3), sample_request(n2, 3)};
    items[1].type = HVD_REQ_BROADCAST;
    items[1].root = 5;
    items[1].ndims = 0;
    char key[] = "dist.0#12";
    items[1].key = key;
    items[1].timeout_ms = 30000;
    hvd_request_list_t in = {.items = items, .count = 2, .shutdown = 1}, out;
    uint8_t *buf;
    size_t len;
    assert_int_equal(hvd__neg_requests_encode(&in, &buf, &len), HVD_OK);
    assert_memory_equal(buf, "HVDQ", 4);
    assert_int_equal(hvd__neg_requests_decode(buf, len, &out), HVD_OK);
    assert_int_equal(out.count, 2);
    assert_int_equal(out.shutdown, 1);
    assert_string_equal(out.items[0].name, n1);
    assert_int_equal(out.items[0].rank, 3);
    assert_int_equal(out.items[0].ndims, 2);
    assert_true(out.items[0].dims[0] == 17 && out.items[0].dims[1] == 3);
    assert_true(out.items[0].prescale == 0.5 && out.items[0].postscale == 2.0);
    assert_int_equal(out.items[1].type, HVD_REQ_BROADCAST);
    assert_int_equal(out.items[1].root, 5);
    assert_string_equal(out.items[1].name, "x");
    assert_null(out.items[0].key); /* none travels as "" and comes back as none */
    assert_int_equal(out.items[0].timeout_ms, 0);
    assert_string_equal(out.items[1].key, key);
    assert_int_equal(out.items[1].timeout_ms, 30000);
    hvd__neg_requests_fini(&out);
    /* every proper prefix and one extra byte are rejected */
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(hvd__neg_requests_decode(buf, cut, &out), HVD_ERR_PROTOCOL);
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, buf, len);
    longer[len] = 0;
    assert_int_equal(hvd__neg_requests_decode(longer, len + 1, &out), HVD_ERR_PROTOCOL);
    free(longer);
    /* wrong magic, wrong version, a count far beyond the bytes */
    buf[0] = 'X';
    assert_int_equal(hvd__neg_requests_decode(buf, len, &out), HVD_ERR_PROTOCOL);
    buf[0] = 'H';
    buf[4] = 9;
    assert_int_equal(hvd__neg_requests_decode(buf, len, &out), HVD_ERR_PROTOCOL);
    buf[4] = HVD_NEG_VERSION;
    hvd__le32_put(buf + 8, 0xffffffffu);
    assert_int_equal(hvd__neg_requests_decode(buf, len, &out), HVD_ERR_PROTOCOL);
    free(buf);
}

static void test_request_bounds(void **state) {
    (void)state;
    char empty[] = "";
    char *huge = malloc(HVD_NEG_NAME_MAX + 2);
    memset(huge, 'a', HVD_NEG_NAME_MAX + 1);
    huge[HVD_NEG_NAME_MAX + 1] = '\0';
    hvd_request_t r = sample_request(empty, 0);
    hvd_request_list_t l = {.items = &r, .count = 1};
    uint8_t *buf;
    size_t len;
    assert_int_equal(hvd__neg_requests_encode(&l, &buf, &len), HVD_ERR_INVALID_ARG);
    r.name = huge;
    assert_int_equal(hvd__neg_requests_encode(&l, &buf, &len), HVD_ERR_INVALID_ARG);
    huge[HVD_NEG_NAME_MAX] = '\0'; /* exactly the maximum is fine */
    /* a key is bounded as a name is */
    char *long_key = malloc(HVD_NEG_NAME_MAX + 2);
    memset(long_key, 'k', HVD_NEG_NAME_MAX + 1);
    long_key[HVD_NEG_NAME_MAX + 1] = '\0';
    r.key = long_key;
    assert_int_equal(hvd__neg_requests_encode(&l, &buf, &len), HVD_ERR_INVALID_ARG);
    r.key = NULL;
    free(long_key);
    assert_int_equal(hvd__neg_requests_encode(&l, &buf, &len), HVD_OK);
    /* a NUL inside a name on the wire is rejected (the name is followed by the deadline and
     * an empty key, 6 bytes) */
    buf[len - 6 - 5] = 0;
    hvd_request_list_t out;
    assert_int_equal(hvd__neg_requests_decode(buf, len, &out), HVD_ERR_PROTOCOL);
    free(buf);
    r.name = huge;
    r.ndims = HVD_NEG_MAX_DIMS + 1;
    assert_int_equal(hvd__neg_requests_encode(&l, &buf, &len), HVD_ERR_INVALID_ARG);
    free(huge);
}

static void test_responses_round_trip(void **state) {
    (void)state;
    char a[] = "a", b[] = "bb";
    char *names[] = {a, b};
    int64_t sizes[] = {10, 20, 30};
    char err[] = "Mismatched data types: One rank had type float32, but another rank had "
                 "type int32.";
    hvd_response_t items[2] = {
        {.type = HVD_REQ_ALLREDUCE,
         .dtype = 7,
         .op = 1,
         .last_joined_rank = -1,
         .prescale = 1,
         .postscale = 0.25,
         .names = names,
         .nnames = 2,
         .sizes = sizes,
         .nsizes = 3,
         .error = NULL},
        {.type = HVD_RESP_ERROR,
         .status = HVD_NEG_FAIL_TIMEOUT,
         .names = names,
         .nnames = 1,
         .error = err},
    };
    hvd_response_list_t in = {.items = items, .count = 2}, out;
    uint8_t *buf;
    size_t len;
    assert_int_equal(hvd__neg_responses_encode(&in, &buf, &len), HVD_OK);
    assert_int_equal(hvd__neg_responses_decode(buf, len, &out), HVD_OK);
    assert_int_equal(out.count, 2);
    assert_int_equal(out.shutdown, 0);
    assert_int_equal(out.items[0].nnames, 2);
    assert_string_equal(out.items[0].names[1], "bb");
    assert_int_equal(out.items[0].nsizes, 3);
    assert_true(out.items[0].sizes[2] == 30);
    assert_true(out.items[0].postscale == 0.25);
    assert_int_equal(out.items[0].last_joined_rank, -1);
    assert_string_equal(out.items[0].error, "");
    assert_int_equal(out.items[1].type, HVD_RESP_ERROR);
    assert_string_equal(out.items[1].error, err);
    assert_int_equal(out.items[0].status, 0);
    assert_int_equal(out.items[1].status, HVD_NEG_FAIL_TIMEOUT);
    hvd__neg_responses_fini(&out);
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(hvd__neg_responses_decode(buf, cut, &out), HVD_ERR_PROTOCOL);
    /* a status beyond those known (the byte after type, dtype and op of the first item) */
    buf[12 + 3] = 7;
    assert_int_equal(hvd__neg_responses_decode(buf, len, &out), HVD_ERR_PROTOCOL);
    free(buf);
}

/* The fuzzer's seeds (tests/fuzz/corpus/negotiate) are current messages: seeds of an older
 * version decode to nothing, and the fuzzer would start from noise (the version 1 seeds did,
 * unnoticed, after the format gained process sets). */
static void test_fuzz_seeds_decode(void **state) {
    (void)state;
    static const struct {
        const char *file;
        int requests;
    } seeds[] = {{"requests", 1},
                 {"requests_shutdown", 1},
                 {"responses", 0},
                 {"responses_join_shutdown", 0}};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/negotiate/%s", HVD_FUZZ_SEEDS, seeds[i].file);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        uint8_t buf[8192];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        if (seeds[i].requests) {
            hvd_request_list_t q;
            assert_int_equal(hvd__neg_requests_decode(buf, len, &q), HVD_OK);
            hvd__neg_requests_fini(&q);
        } else {
            hvd_response_list_t r;
            assert_int_equal(hvd__neg_responses_decode(buf, len, &r), HVD_OK);
            hvd__neg_responses_fini(&r);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests_round_trip),
        cmocka_unit_test(test_request_bounds),
        cmocka_unit_test(test_responses_round_trip),
        cmocka_unit_test(test_fuzz_seeds_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
