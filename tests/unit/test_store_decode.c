/* Decoding of whole-scope and count responses: well-formed bodies round-trip; truncated,
 * lying or oversized ones are rejected without reading past the buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "os/netif.h"
#include "rendezvous/store_client.h"

#include <stdlib.h>
#include <string.h>

static size_t put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
    return 4;
}

static size_t encode(uint8_t *buf, const char *const *keys, const char *const *values, uint32_t n) {
    size_t off = 0;
    memcpy(buf, "HVS1", 4);
    off += 4;
    off += put_u32(buf + off, n);
    for (uint32_t i = 0; i < n; i++) {
        off += put_u32(buf + off, (uint32_t)strlen(keys[i]));
        off += put_u32(buf + off, (uint32_t)strlen(values[i]));
        memcpy(buf + off, keys[i], strlen(keys[i]));
        off += strlen(keys[i]);
        memcpy(buf + off, values[i], strlen(values[i]));
        off += strlen(values[i]);
    }
    return off;
}

static void test_round_trip(void **state) {
    (void)state;
    const char *keys[] = {"rank_0", "rank_1", "x"};
    const char *values[] = {"host=a", "", "value with spaces"};
    uint8_t buf[256];
    size_t len = encode(buf, keys, values, 3);
    hvd_store_scope_t s;
    assert_int_equal(hvd__store_scope_decode(buf, len, &s), HVD_OK);
    assert_int_equal(s.count, 3);
    assert_string_equal(s.entries[0].key, "rank_0");
    assert_string_equal((char *)s.entries[0].value, "host=a");
    assert_int_equal(s.entries[1].value_len, 0);
    assert_non_null(hvd__store_scope_find(&s, "x"));
    assert_null(hvd__store_scope_find(&s, "rank_2"));
    hvd__store_scope_fini(&s);
    /* empty scope */
    len = encode(buf, NULL, NULL, 0);
    assert_int_equal(hvd__store_scope_decode(buf, len, &s), HVD_OK);
    assert_int_equal(s.count, 0);
    hvd__store_scope_fini(&s);
}

static void test_malformed(void **state) {
    (void)state;
    const char *keys[] = {"rank_0", "rank_1"};
    const char *values[] = {"aaaa", "bbbb"};
    uint8_t buf[256];
    size_t len = encode(buf, keys, values, 2);
    hvd_store_scope_t s;
    /* every truncation fails */
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exact size: ASan catches any over-read */
        memcpy(copy, buf, cut);
        assert_int_equal(hvd__store_scope_decode(copy, cut, &s), HVD_ERR_PROTOCOL);
        free(copy);
    }
    /* trailing garbage */
    buf[len] = 'z';
    assert_int_equal(hvd__store_scope_decode(buf, len + 1, &s), HVD_ERR_PROTOCOL);
    /* a count far beyond the body must not allocate for it */
    uint8_t lie[8] = {'H', 'V', 'S', '1', 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(hvd__store_scope_decode(lie, sizeof lie, &s), HVD_ERR_PROTOCOL);
    /* a key length running past the end */
    uint8_t over[16] = {'H', 'V', 'S', '1', 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
    assert_int_equal(hvd__store_scope_decode(over, sizeof over, &s), HVD_ERR_PROTOCOL);
    /* a key with a NUL byte or a character no name may hold (found by fuzz_scope_decode) */
    uint8_t nul[18] = {'H', 'V', 'S', '1', 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 'a', 0};
    assert_int_equal(hvd__store_scope_decode(nul, sizeof nul, &s), HVD_ERR_PROTOCOL);
    nul[17] = '/';
    assert_int_equal(hvd__store_scope_decode(nul, sizeof nul, &s), HVD_ERR_PROTOCOL);
    nul[17] = 'b';
    assert_int_equal(hvd__store_scope_decode(nul, sizeof nul, &s), HVD_OK);
    hvd__store_scope_fini(&s);
    /* wrong magic */
    memcpy(buf, "HVS2", 4);
    assert_int_equal(hvd__store_scope_decode(buf, len, &s), HVD_ERR_PROTOCOL);
}

static void test_netif(void **state) {
    (void)state;
    hvd_netif_t *list;
    size_t n;
    assert_int_equal(hvd__netif_list(&list, &n), HVD_OK);
    const hvd_netif_t *lo = hvd__netif_by_addr("127.0.0.1", list, n);
    assert_non_null(lo);
    assert_non_null(hvd__netif_by_name(lo->name, list, n));
    assert_true(hvd__netif_is_local_host("localhost", list, n));
    assert_true(hvd__netif_is_local_host("127.0.0.1", list, n));
    assert_false(hvd__netif_is_local_host("no-such-host.invalid", list, n));
    assert_false(hvd__netif_is_local_host("192.0.2.1", list, n)); /* TEST-NET-1 */
    free(list);
}

/* A count answer: the count, and the abort key when there is one; nothing else passes. */
static void test_count(void **state) {
    (void)state;
    uint8_t buf[256];
    memcpy(buf, "HVC1", 4);
    put_u32(buf + 4, 16384);
    size_t len = 8 + encode(buf + 8, NULL, NULL, 0);
    hvd_store_scope_t s;
    assert_int_equal(hvd__store_count_decode(buf, len, &s), HVD_OK);
    assert_int_equal(s.total, 16384);
    assert_int_equal(s.count, 0);
    hvd__store_scope_fini(&s);
    const char *keys[] = {"abort", "rank_0"}, *values[] = {"rank 3 was killed", "x"};
    len = 8 + encode(buf + 8, keys, values, 1);
    assert_int_equal(hvd__store_count_decode(buf, len, &s), HVD_OK);
    assert_int_equal(s.total, 16384);
    assert_non_null(hvd__store_scope_find(&s, "abort"));
    hvd__store_scope_fini(&s);
    /* another key alone, more than the abort key, a whole-scope body, truncated, bad magic */
    len = 8 + encode(buf + 8, keys + 1, values + 1, 1);
    assert_int_equal(hvd__store_count_decode(buf, len, &s), HVD_ERR_PROTOCOL);
    len = 8 + encode(buf + 8, keys, values, 2);
    assert_int_equal(hvd__store_count_decode(buf, len, &s), HVD_ERR_PROTOCOL);
    assert_int_equal(hvd__store_count_decode(buf + 8, len - 8, &s), HVD_ERR_PROTOCOL);
    assert_int_equal(hvd__store_count_decode(buf, 7, &s), HVD_ERR_PROTOCOL);
    assert_int_equal(hvd__store_count_decode(buf, 12, &s), HVD_ERR_PROTOCOL);
    buf[3] = '2';
    assert_int_equal(hvd__store_count_decode(buf, len, &s), HVD_ERR_PROTOCOL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_count),
        cmocka_unit_test(test_netif),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
