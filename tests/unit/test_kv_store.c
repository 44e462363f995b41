/* The rendezvous store's data rules, without HTTP: names, values (empty ones included), every
 * bound refused before anything changes, the exact scope encoding in byte order, shared
 * blobs that outlive overwrites, Horovod's finished-rank semantics per predefined scope (with
 * the reference's clear-every-list quirk fixed), reset, versions and change notifications,
 * waiting, a million keys, and several threads at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "rendezvous/kv_protocol.h"
#include "runner/rendezvous/kv_store.h"
#include "rendezvous/store_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hvd_kv_store_t *new_store(size_t max_value, size_t max_total, size_t max_keys) {
    hvd_kv_limits_t lim = {
        .max_value_bytes = max_value, .max_total_bytes = max_total, .max_keys = max_keys};
    hvd_kv_store_t *s = NULL;
    assert_int_equal(hvd__kv_store_create(&lim, &s), HVD_OK);
    assert_non_null(s);
    return s;
}

static void put_str(hvd_kv_store_t *s, const char *scope, const char *key, const char *v) {
    assert_int_equal(hvd__kv_store_put(s, scope, key, v, strlen(v)), HVD_OK);
}

/* The value as a string ("<missing>" when absent). */
static char *get_str(hvd_kv_store_t *s, const char *scope, const char *key) {
    static char buf[4096];
    uint8_t *v;
    size_t n;
    if (hvd__kv_store_get(s, scope, key, &v, &n) != HVD_OK)
        return strcpy(buf, "<missing>");
    assert_true(n < sizeof buf);
    memcpy(buf, v, n + 1); /* the copy is NUL-terminated */
    free(v);
    return buf;
}

static void test_put_get_overwrite(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    uint8_t *v;
    size_t n;
    assert_int_equal(hvd__kv_store_get(s, "a", "k", &v, &n), HVD_ERR_NOT_FOUND);
    assert_false(hvd__kv_store_has(s, "a", "k"));
    put_str(s, "a", "k", "one");
    put_str(s, "a", "k", "two!"); /* overwrite */
    assert_string_equal(get_str(s, "a", "k"), "two!");
    /* names with every allowed punctuation character */
    put_str(s, "local_host-1.example.com", "host-1.example.com:0", "x");
    assert_string_equal(get_str(s, "local_host-1.example.com", "host-1.example.com:0"), "x");
    /* an empty value is a value */
    assert_int_equal(hvd__kv_store_put(s, "a", "empty", NULL, 0), HVD_OK);
    assert_int_equal(hvd__kv_store_get(s, "a", "empty", &v, &n), HVD_OK);
    assert_int_equal(n, 0);
    assert_int_equal(v[0], 0);
    free(v);
    assert_true(hvd__kv_store_has(s, "a", "empty"));
    /* binary values with NUL bytes round-trip */
    const uint8_t bin[5] = {0, 1, 0, 255, 0};
    assert_int_equal(hvd__kv_store_put(s, "a", "bin", bin, sizeof bin), HVD_OK);
    hvd_kv_blob_t *b;
    assert_int_equal(hvd__kv_store_get_blob(s, "a", "bin", &b), HVD_OK);
    assert_int_equal(hvd__kv_blob_len(b), 5);
    assert_memory_equal(hvd__kv_blob_data(b), bin, 5);
    hvd__kv_blob_unref(b);
    assert_int_equal(hvd__kv_store_count(s, "a"), 3);
    assert_int_equal(hvd__kv_store_count(s, "nope"), 0);
    size_t keys, bytes;
    hvd__kv_store_usage(s, &keys, &bytes);
    assert_int_equal(keys, 4);
    assert_int_equal(bytes, (1 + 4) + (20 + 1) + (5 + 0) + (3 + 5));
    hvd__kv_store_destroy(s);
    hvd__kv_store_destroy(NULL);
}

static void test_invalid_names(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    char long_name[HVD_KV_NAME_MAX + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0'; /* 129 characters */
    const char *bad[] = {"", "a/b", "a b", "a?b", "a%2F", "é", "a\tb", long_name, NULL};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(hvd__kv_store_put(s, bad[i], "k", "v", 1), HVD_ERR_INVALID_ARG);
        assert_int_equal(hvd__kv_store_put(s, "s", bad[i], "v", 1), HVD_ERR_INVALID_ARG);
        assert_int_equal(hvd__kv_store_delete(s, "s", bad[i]), HVD_ERR_INVALID_ARG);
        assert_false(hvd__kv_store_has(s, "s", bad[i]));
    }
    size_t keys, bytes;
    hvd__kv_store_usage(s, &keys, &bytes);
    assert_int_equal(keys, 0);
    assert_int_equal(bytes, 0);
    long_name[HVD_KV_NAME_MAX] = '\0'; /* 128: the longest valid name */
    put_str(s, long_name, long_name, "ok");
    assert_string_equal(get_str(s, long_name, long_name), "ok");
    hvd__kv_store_destroy(s);
}

static void test_value_limit(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(8, 0, 0);
    put_str(s, "a", "k", "12345678"); /* exactly the limit */
    assert_int_equal(hvd__kv_store_put(s, "a", "k", "123456789", 9), HVD_ERR_TOO_LARGE);
    assert_non_null(strstr(hvd_last_error(), "a/k"));
    assert_string_equal(get_str(s, "a", "k"), "12345678"); /* the old value stays */
    assert_int_equal(hvd__kv_store_put(s, "a", "new", "123456789", 9), HVD_ERR_TOO_LARGE);
    assert_false(hvd__kv_store_has(s, "a", "new"));
    hvd__kv_store_destroy(s);
    /* the encoding's u32 length field bounds the configurable limit */
    hvd_kv_limits_t lim = {.max_value_bytes = (size_t)UINT32_MAX + 1};
    hvd_kv_store_t *t = NULL;
    assert_int_equal(hvd__kv_store_create(&lim, &t), HVD_ERR_INVALID_ARG);
    assert_null(t);
}

static void test_key_and_byte_limits(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(8, 40, 3);
    uint64_t v0 = hvd__kv_store_version(s);
    put_str(s, "a", "k1", "12345678"); /* 10 bytes */
    put_str(s, "a", "k2", "12345678"); /* 20 */
    put_str(s, "b", "k3", "12345678"); /* 30, 3 keys */
    /* a fourth key: refused, nothing changes */
    assert_int_equal(hvd__kv_store_put(s, "c", "k4", "1", 1), HVD_ERR_NO_MEMORY);
    assert_non_null(strstr(hvd_last_error(), "keys"));
    assert_false(hvd__kv_store_has(s, "c", "k4"));
    assert_int_equal(hvd__kv_store_count(s, "c"), 0);
    /* replacing counts the difference only, and may still exceed the bytes */
    put_str(s, "a", "k1", "1"); /* 23 */
    put_str(s, "a", "k1", "12345678");
    hvd__kv_store_delete(s, "b", "k3"); /* frees a key: 2 keys */
    put_str(s, "c", "k4", "1");         /* now it fits */
    assert_int_equal(hvd__kv_store_count(s, "c"), 1);
    /* the byte limit, on its own */
    hvd_kv_store_t *t = new_store(8, 25, 100);
    put_str(t, "a", "k1", "12345678");                                               /* 10 */
    put_str(t, "a", "k2", "12345678");                                               /* 20 */
    assert_int_equal(hvd__kv_store_put(t, "a", "k3", "1234", 4), HVD_ERR_NO_MEMORY); /* 26 */
    assert_non_null(strstr(hvd_last_error(), "bytes"));
    assert_int_equal(hvd__kv_store_put(t, "a", "k2", "12345678x", 9), HVD_ERR_TOO_LARGE);
    put_str(t, "a", "k3", "123"); /* 25: exactly the limit */
    /* growing an existing value past the limit is refused and keeps the old value */
    assert_int_equal(hvd__kv_store_put(t, "a", "k3", "1234", 4), HVD_ERR_NO_MEMORY);
    assert_string_equal(get_str(t, "a", "k3"), "123");
    size_t keys, bytes;
    hvd__kv_store_usage(t, &keys, &bytes);
    assert_int_equal(keys, 3);
    assert_int_equal(bytes, 25);
    /* deleting gives the room back */
    hvd__kv_store_delete(t, "a", "k1");
    put_str(t, "a", "k4", "1234567");
    hvd__kv_store_usage(t, &keys, &bytes);
    assert_int_equal(bytes, 24);
    assert_true(hvd__kv_store_version(s) > v0);
    hvd__kv_store_destroy(t);
    hvd__kv_store_destroy(s);
}

/* Expected encoding, built by hand from (key, value) pairs already in byte order. */
static size_t expect_encoding(uint8_t *buf, const char *const *kv, uint32_t n) {
    size_t off = 8;
    memcpy(buf, "HVS1", 4);
    buf[4] = (uint8_t)n;
    buf[5] = buf[6] = buf[7] = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t kl = (uint32_t)strlen(kv[2 * i]), vl = (uint32_t)strlen(kv[2 * i + 1]);
        uint8_t h[8] = {(uint8_t)kl, 0, 0, 0, (uint8_t)vl, 0, 0, 0};
        memcpy(buf + off, h, 8);
        memcpy(buf + off + 8, kv[2 * i], kl);
        memcpy(buf + off + 8 + kl, kv[2 * i + 1], vl);
        off += 8 + kl + vl;
    }
    return off;
}

static void test_snapshot_encoding(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    /* inserted out of order; byte order is - . 0-9 : A-Z _ a-z */
    const char *keys[] = {"rank_2", "rank_10", "_x", "a", "Z", ":", "0", ".", "-", "rank_1"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        put_str(s, "sc", keys[i], i % 3 == 0 ? "" : keys[i]);
    put_str(s, "other", "k", "not in sc");
    uint8_t *body;
    size_t len;
    assert_int_equal(hvd__kv_store_snapshot(s, "sc", &body, &len), HVD_OK);
    const char *sorted[] = {"-",  "-",  ".", ".", "0",      "", ":",       ":",       "Z",      "Z",
                            "_x", "_x", "a", "",  "rank_1", "", "rank_10", "rank_10", "rank_2", ""};
    uint8_t want[512];
    size_t want_len = expect_encoding(want, sorted, 10);
    assert_int_equal(len, want_len);
    assert_memory_equal(body, want, want_len);
    /* the workers' decoder agrees */
    hvd_store_scope_t dec;
    assert_int_equal(hvd__store_scope_decode(body, len, &dec), HVD_OK);
    assert_int_equal(dec.count, 10);
    assert_string_equal(dec.entries[9].key, "rank_2");
    hvd__store_scope_fini(&dec);
    free(body);
    /* an unknown scope is an empty one */
    assert_int_equal(hvd__kv_store_snapshot(s, "unknown", &body, &len), HVD_OK);
    assert_int_equal(len, 8);
    assert_memory_equal(body, "HVS1\0\0\0\0", 8);
    free(body);
    hvd__kv_store_destroy(s);
}

static void test_snapshot_cache_and_blobs(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    put_str(s, "sc", "b", "1");
    hvd_kv_blob_t *b1, *b2, *b3, *v;
    assert_int_equal(hvd__kv_store_snapshot_blob(s, "sc", &b1), HVD_OK);
    assert_int_equal(hvd__kv_store_snapshot_blob(s, "sc", &b2), HVD_OK);
    assert_ptr_equal(b1, b2); /* readers share one encoding */
    assert_int_equal(hvd__kv_store_get_blob(s, "sc", "b", &v), HVD_OK);
    /* an overwrite, a new key and a delete each show in the next snapshot, while blobs taken
     * before keep their bytes */
    put_str(s, "sc", "b", "22");
    assert_int_equal(hvd__kv_store_snapshot_blob(s, "sc", &b3), HVD_OK);
    assert_ptr_not_equal(b3, b1);
    const char *kv1[] = {"b", "1"}, *kv2[] = {"b", "22"};
    uint8_t want[64];
    size_t n = expect_encoding(want, kv1, 1);
    assert_int_equal(hvd__kv_blob_len(b1), n);
    assert_memory_equal(hvd__kv_blob_data(b1), want, n);
    n = expect_encoding(want, kv2, 1);
    assert_memory_equal(hvd__kv_blob_data(b3), want, n);
    assert_string_equal((const char *)hvd__kv_blob_data(v), "1");
    hvd__kv_blob_unref(b3);
    put_str(s, "sc", "a", "x");
    assert_int_equal(hvd__kv_store_snapshot_blob(s, "sc", &b3), HVD_OK);
    const char *kv3[] = {"a", "x", "b", "22"};
    n = expect_encoding(want, kv3, 2);
    assert_memory_equal(hvd__kv_blob_data(b3), want, n);
    hvd__kv_blob_unref(b3);
    hvd__kv_store_delete(s, "sc", "a");
    assert_int_equal(hvd__kv_store_snapshot_blob(s, "sc", &b3), HVD_OK);
    n = expect_encoding(want, kv2, 1);
    assert_int_equal(hvd__kv_blob_len(b3), n);
    assert_memory_equal(hvd__kv_blob_data(b3), want, n);
    /* blobs outlive the store */
    hvd__kv_store_destroy(s);
    assert_string_equal((const char *)hvd__kv_blob_data(v), "1");
    hvd__kv_blob_unref(v);
    hvd__kv_blob_unref(b1);
    hvd__kv_blob_unref(b2);
    hvd__kv_blob_unref(b3);
    hvd__kv_blob_unref(NULL);
}

static void test_adhoc_delete(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    put_str(s, "global_process_set_hash_1f", "0", "a");
    put_str(s, "global_process_set_hash_1f", "1", "b");
    assert_int_equal(hvd__kv_store_delete(s, "global_process_set_hash_1f", "0"), HVD_OK);
    assert_false(hvd__kv_store_has(s, "global_process_set_hash_1f", "0"));
    assert_int_equal(hvd__kv_store_count(s, "global_process_set_hash_1f"), 1);
    /* a repeat, a missing key and a missing scope are fine */
    assert_int_equal(hvd__kv_store_delete(s, "global_process_set_hash_1f", "0"), HVD_OK);
    assert_int_equal(hvd__kv_store_delete(s, "global_process_set_hash_1f", "7"), HVD_OK);
    assert_int_equal(hvd__kv_store_delete(s, "never", "x"), HVD_OK);
    assert_int_equal(hvd__kv_store_delete(s, "global_process_set_hash_1f", "1"), HVD_OK);
    assert_int_equal(hvd__kv_store_count(s, "global_process_set_hash_1f"), 0);
    size_t keys, bytes;
    hvd__kv_store_usage(s, &keys, &bytes);
    assert_int_equal(keys, 0);
    assert_int_equal(bytes, 0);
    /* the scope is gone and comes back with its next key */
    put_str(s, "global_process_set_hash_1f", "2", "c");
    assert_int_equal(hvd__kv_store_count(s, "global_process_set_hash_1f"), 1);
    hvd__kv_store_destroy(s);
}

static void put_ranks(hvd_kv_store_t *s, const char *scope, int n) {
    for (int r = 0; r < n; r++) {
        char k[16];
        snprintf(k, sizeof k, "%d", r);
        put_str(s, scope, k, "addr");
        snprintf(k, sizeof k, "rank_%d", r);
        put_str(s, scope, k, "host");
    }
}

static void test_predefined_delete(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    const char *names[] = {"global", "local_h1", "cross_0"};
    int sizes[] = {3, 2, 2};
    assert_int_equal(hvd__kv_store_reset(s, names, sizes, 3), HVD_OK);
    put_ranks(s, "global", 3);
    put_ranks(s, "local_h1", 2);
    put_ranks(s, "cross_0", 2);
    /* global: rank 0 finished (twice: counts once); keys are not removed by a finish */
    hvd__kv_store_delete(s, "global", "0");
    hvd__kv_store_delete(s, "global", "0");
    assert_int_equal(hvd__kv_store_count(s, "global"), 6);
    assert_true(hvd__kv_store_has(s, "global", "0"));
    /* keys that are not ranks of the scope are ignored, never counted */
    hvd__kv_store_delete(s, "global", "3");
    hvd__kv_store_delete(s, "global", "rank_1");
    hvd__kv_store_delete(s, "global", "x");
    hvd__kv_store_delete(s, "global", "99999999999999999999");
    assert_int_equal(hvd__kv_store_count(s, "global"), 6);
    /* local_h1 finishes completely: its data goes, nobody else's */
    hvd__kv_store_delete(s, "local_h1", "1");
    hvd__kv_store_delete(s, "local_h1", "0");
    assert_int_equal(hvd__kv_store_count(s, "local_h1"), 0);
    assert_int_equal(hvd__kv_store_count(s, "global"), 6);
    assert_int_equal(hvd__kv_store_count(s, "cross_0"), 4);
    /* the fix: global's finished list survived local_h1's clearing (the reference cleared
     * every list, so global would need rank 0 again and never clear) */
    hvd__kv_store_delete(s, "global", "1");
    assert_int_equal(hvd__kv_store_count(s, "global"), 6);
    hvd__kv_store_delete(s, "global", "2");
    assert_int_equal(hvd__kv_store_count(s, "global"), 0);
    assert_int_equal(hvd__kv_store_count(s, "cross_0"), 4);
    /* cleared scopes stay predefined, with a fresh finished list */
    put_ranks(s, "global", 3);
    hvd__kv_store_delete(s, "global", "0");
    hvd__kv_store_delete(s, "global", "1");
    assert_int_equal(hvd__kv_store_count(s, "global"), 6);
    hvd__kv_store_delete(s, "global", "2");
    assert_int_equal(hvd__kv_store_count(s, "global"), 0);
    /* a predefined scope's rank finishing before anything was written still counts */
    hvd__kv_store_delete(s, "cross_0", "0");
    hvd__kv_store_delete(s, "cross_0", "1");
    assert_int_equal(hvd__kv_store_count(s, "cross_0"), 0);
    size_t keys, bytes;
    hvd__kv_store_usage(s, &keys, &bytes);
    assert_int_equal(keys, 0);
    assert_int_equal(bytes, 0);
    hvd__kv_store_destroy(s);
}

static void test_reset(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    const char *names[] = {"global", "local_h1"};
    int sizes[] = {2, 1};
    assert_int_equal(hvd__kv_store_reset(s, names, sizes, 2), HVD_OK);
    put_ranks(s, "global", 2);
    put_str(s, "adhoc", "k", "v");
    hvd__kv_store_delete(s, "global", "0");
    /* bad arguments change nothing */
    const char *dup[] = {"global", "x", "global"};
    int dsizes[] = {1, 1, 1};
    assert_int_equal(hvd__kv_store_reset(s, dup, dsizes, 3), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "twice"));
    int zero[] = {2, 0};
    assert_int_equal(hvd__kv_store_reset(s, names, zero, 2), HVD_ERR_INVALID_ARG);
    int neg[] = {-1, 1};
    assert_int_equal(hvd__kv_store_reset(s, names, neg, 2), HVD_ERR_INVALID_ARG);
    const char *bad[] = {"global", "local_bad/host"};
    assert_int_equal(hvd__kv_store_reset(s, bad, sizes, 2), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__kv_store_count(s, "global"), 4);
    assert_int_equal(hvd__kv_store_count(s, "adhoc"), 1);
    /* a new plan: everything is cleared, finished lists included, sizes replaced */
    const char *names2[] = {"global", "local_h2"};
    int sizes2[] = {3, 3};
    assert_int_equal(hvd__kv_store_reset(s, names2, sizes2, 2), HVD_OK);
    assert_int_equal(hvd__kv_store_count(s, "global"), 0);
    assert_int_equal(hvd__kv_store_count(s, "adhoc"), 0);
    size_t keys, bytes;
    hvd__kv_store_usage(s, &keys, &bytes);
    assert_int_equal(keys + bytes, 0);
    put_ranks(s, "global", 3);
    hvd__kv_store_delete(s, "global", "1"); /* rank 0's old finish is forgotten */
    hvd__kv_store_delete(s, "global", "2");
    assert_int_equal(hvd__kv_store_count(s, "global"), 6);
    hvd__kv_store_delete(s, "global", "0");
    assert_int_equal(hvd__kv_store_count(s, "global"), 0);
    /* local_h1 is no longer predefined: DELETE removes keys there */
    put_str(s, "local_h1", "0", "v");
    put_str(s, "local_h1", "1", "v");
    hvd__kv_store_delete(s, "local_h1", "0");
    assert_int_equal(hvd__kv_store_count(s, "local_h1"), 1);
    assert_false(hvd__kv_store_has(s, "local_h1", "0"));
    /* an empty plan clears everything */
    assert_int_equal(hvd__kv_store_reset(s, NULL, NULL, 0), HVD_OK);
    assert_int_equal(hvd__kv_store_count(s, "local_h1"), 0);
    hvd__kv_store_destroy(s);
}

typedef struct {
    int calls;
    char scope[HVD_KV_NAME_MAX + 1], key[HVD_KV_NAME_MAX + 1];
    size_t count;
    int was_null;
} notes_t;

static void note(void *arg, const char *scope, const char *key, size_t count) {
    notes_t *n = arg;
    n->calls++;
    n->was_null = scope == NULL;
    snprintf(n->scope, sizeof n->scope, "%s", scope ? scope : "");
    snprintf(n->key, sizeof n->key, "%s", key ? key : "");
    n->count = count;
}

static void test_version_and_notify(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(4, 0, 0);
    notes_t n = {0};
    hvd__kv_store_set_notify(s, note, &n);
    uint64_t v = hvd__kv_store_version(s);
    put_str(s, "sc", "a", "1");
    assert_true(hvd__kv_store_version(s) > v);
    assert_int_equal(n.calls, 1);
    assert_string_equal(n.scope, "sc");
    assert_string_equal(n.key, "a");
    assert_int_equal(n.count, 1);
    put_str(s, "sc", "b", "1");
    assert_int_equal(n.count, 2);
    put_str(s, "sc", "b", "2"); /* an overwrite notifies too, with the same count */
    assert_int_equal(n.calls, 3);
    assert_int_equal(n.count, 2);
    /* refused writes neither bump the version nor notify */
    v = hvd__kv_store_version(s);
    assert_int_equal(hvd__kv_store_put(s, "sc", "c", "12345", 5), HVD_ERR_TOO_LARGE);
    assert_int_equal(hvd__kv_store_version(s), v);
    assert_int_equal(n.calls, 3);
    /* a delete bumps the version but wakes nobody (nothing becomes ready by a removal) */
    hvd__kv_store_delete(s, "sc", "a");
    assert_true(hvd__kv_store_version(s) > v);
    assert_int_equal(n.calls, 3);
    v = hvd__kv_store_version(s);
    assert_int_equal(hvd__kv_store_reset(s, NULL, NULL, 0), HVD_OK);
    assert_true(hvd__kv_store_version(s) > v);
    assert_int_equal(n.calls, 4);
    assert_true(n.was_null);
    hvd__kv_store_set_notify(s, NULL, NULL);
    put_str(s, "sc", "a", "1");
    assert_int_equal(n.calls, 4);
    /* ready() reports the version its answer holds for */
    uint64_t rv;
    assert_true(hvd__kv_store_ready(s, "sc", "a", 0, &rv));
    assert_int_equal(rv, hvd__kv_store_version(s));
    assert_false(hvd__kv_store_ready(s, "sc", "zz", 0, NULL));
    assert_true(hvd__kv_store_ready(s, "sc", NULL, 1, NULL));
    assert_false(hvd__kv_store_ready(s, "sc", NULL, 2, NULL));
    assert_true(hvd__kv_store_ready(s, "empty", NULL, 0, NULL));
    assert_false(hvd__kv_store_ready(s, "bad/name", NULL, 0, NULL));
    hvd__kv_store_destroy(s);
}

typedef struct {
    hvd_kv_store_t *s;
    int delay_ms;
    const char *scope, *key;
} late_put_t;

static void *late_put(void *arg) {
    late_put_t *lp = arg;
    hvd__clock_sleep_ms(lp->delay_ms);
    hvd__kv_store_put(lp->s, lp->scope, lp->key, "late", 4);
    return NULL;
}

static void test_wait(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__kv_store_wait(s, "w", "k", 0, hvd__clock_deadline_ms(150)),
                     HVD_ERR_TIMEOUT);
    assert_true(hvd__clock_now_ms() - t0 >= 140);
    assert_non_null(strstr(hvd_last_error(), "w/k"));
    assert_int_equal(hvd__kv_store_wait(s, "w", NULL, 2, hvd__clock_deadline_ms(50)),
                     HVD_ERR_TIMEOUT);
    assert_non_null(strstr(hvd_last_error(), "2 keys"));
    /* released by a write from another thread, well before the deadline */
    late_put_t lp = {s, 100, "w", "k"};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, late_put, &lp), 0);
    t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__kv_store_wait(s, "w", "k", 0, hvd__clock_deadline_ms(10000)), HVD_OK);
    assert_true(hvd__clock_now_ms() - t0 < 5000);
    pthread_join(th, NULL);
    lp.key = "k2";
    assert_int_equal(pthread_create(&th, NULL, late_put, &lp), 0);
    assert_int_equal(hvd__kv_store_wait(s, "w", NULL, 2, hvd__clock_deadline_ms(10000)), HVD_OK);
    pthread_join(th, NULL);
    assert_int_equal(hvd__kv_store_wait(s, "bad/", NULL, 0, 0), HVD_ERR_INVALID_ARG);
    hvd__kv_store_destroy(s);
}

/* A million keys: every operation stays cheap (the test's time limit catches quadratic
 * behaviour), the accounting is exact and the snapshot is sorted. */
#define MANY 1000000

static void test_million_keys(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    size_t expect_bytes = 0;
    for (int i = 0; i < MANY; i++) {
        char k[32];
        int kl = snprintf(k, sizeof k, "k%d", i);
        /* most in one scope, the rest spread over a thousand */
        if (i % 4 == 0) {
            char sc[32];
            snprintf(sc, sizeof sc, "s%d", i % 1000);
            assert_int_equal(hvd__kv_store_put(s, sc, k, "v", 1), HVD_OK);
        } else {
            assert_int_equal(hvd__kv_store_put(s, "big", k, "v", 1), HVD_OK);
        }
        expect_bytes += (size_t)kl + 1;
    }
    size_t keys, bytes;
    hvd__kv_store_usage(s, &keys, &bytes);
    assert_int_equal(keys, MANY);
    assert_int_equal(bytes, expect_bytes);
    assert_int_equal(hvd__kv_store_count(s, "big"), MANY / 4 * 3);
    assert_true(hvd__kv_store_has(s, "big", "k999999"));
    assert_true(hvd__kv_store_has(s, "s996", "k999996"));
    assert_false(hvd__kv_store_has(s, "big", "k999996"));
    hvd_kv_blob_t *b;
    assert_int_equal(hvd__kv_store_snapshot_blob(s, "big", &b), HVD_OK);
    const uint8_t *p = hvd__kv_blob_data(b) + 8;
    const char *prev = NULL;
    size_t prev_len = 0;
    for (int i = 0; i < MANY / 4 * 3; i++) {
        size_t kl = p[0] | (size_t)p[1] << 8, vl = p[4];
        const char *key = (const char *)p + 8;
        if (prev) {
            size_t m = kl < prev_len ? kl : prev_len;
            int c = memcmp(prev, key, m);
            assert_true(c < 0 || (c == 0 && prev_len < kl));
        }
        prev = key;
        prev_len = kl;
        p += 8 + kl + vl;
    }
    assert_ptr_equal(p, hvd__kv_blob_data(b) + hvd__kv_blob_len(b));
    hvd__kv_blob_unref(b);
    for (int i = 1; i < MANY; i += 4) {
        char k[32];
        snprintf(k, sizeof k, "k%d", i);
        hvd__kv_store_delete(s, "big", k);
    }
    assert_int_equal(hvd__kv_store_count(s, "big"), MANY / 2);
    hvd__kv_store_destroy(s);
}

#define THREADS 4
#define OPS 20000

typedef struct {
    hvd_kv_store_t *s;
    int id;
} worker_t;

static void *worker(void *arg) {
    worker_t *w = arg;
    char scope[32], k[32];
    snprintf(scope, sizeof scope, "t%d", w->id);
    for (int i = 0; i < OPS; i++) {
        snprintf(k, sizeof k, "%d", i);
        if (hvd__kv_store_put(w->s, scope, k, k, strlen(k)) != HVD_OK)
            return (void *)1;
        /* a shared scope everyone writes and snapshots */
        snprintf(k, sizeof k, "w%d_%d", w->id, i % 100);
        if (hvd__kv_store_put(w->s, "shared", k, "x", 1) != HVD_OK)
            return (void *)1;
        if (i % 1000 == 0) {
            hvd_kv_blob_t *b;
            if (hvd__kv_store_snapshot_blob(w->s, "shared", &b) != HVD_OK)
                return (void *)1;
            hvd__kv_blob_unref(b);
        }
        if (i % 2 == 1) {
            snprintf(k, sizeof k, "%d", i - 1);
            hvd__kv_store_delete(w->s, scope, k);
        }
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    hvd_kv_store_t *s = new_store(0, 0, 0);
    pthread_t th[THREADS];
    worker_t w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_t){s, i};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_null(ret);
    }
    for (int i = 0; i < THREADS; i++) {
        char scope[32];
        snprintf(scope, sizeof scope, "t%d", i);
        assert_int_equal(hvd__kv_store_count(s, scope), OPS / 2);
    }
    assert_int_equal(hvd__kv_store_count(s, "shared"), THREADS * 100);
    size_t keys, bytes;
    hvd__kv_store_usage(s, &keys, &bytes);
    assert_int_equal(keys, THREADS * (OPS / 2 + 100));
    hvd__kv_store_destroy(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_overwrite),
        cmocka_unit_test(test_invalid_names),
        cmocka_unit_test(test_value_limit),
        cmocka_unit_test(test_key_and_byte_limits),
        cmocka_unit_test(test_snapshot_encoding),
        cmocka_unit_test(test_snapshot_cache_and_blobs),
        cmocka_unit_test(test_adhoc_delete),
        cmocka_unit_test(test_predefined_delete),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_version_and_notify),
        cmocka_unit_test(test_wait),
        cmocka_unit_test(test_million_keys),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
