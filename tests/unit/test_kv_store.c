/* The store's data rules: bounds refused before storing, byte-ordered snapshots, and the
 * finished-rank semantics of predefined scopes (per scope: Horovod's quirk fixed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rendezvous/kv_store.h"
#include "rendezvous/store_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_put_get_delete(void **state) {
    (void)state;
    hvd_kv_store_t *s;
    assert_int_equal(hvd__kv_store_create(NULL, &s), HVD_OK);
    uint8_t *v;
    size_t n;
    assert_int_equal(hvd__kv_store_get(s, "a", "k", &v, &n), HVD_ERR_NOT_FOUND);
    assert_int_equal(hvd__kv_store_put(s, "a", "k", "one", 3), HVD_OK);
    assert_int_equal(hvd__kv_store_put(s, "a", "k", "two!", 4), HVD_OK); /* overwrite */
    assert_int_equal(hvd__kv_store_get(s, "a", "k", &v, &n), HVD_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(v, "two!", 4);
    free(v);
    assert_int_equal(hvd__kv_store_put(s, "a", "host:0", "", 0), HVD_OK); /* empty value */
    assert_int_equal(hvd__kv_store_get(s, "a", "host:0", &v, &n), HVD_OK);
    assert_int_equal(n, 0);
    free(v);
    assert_true(hvd__kv_store_has(s, "a", "host:0"));
    assert_int_equal(hvd__kv_store_count(s, "a"), 2);
    /* ad-hoc scope: delete removes the key, then the scope */
    hvd__kv_store_delete(s, "a", "k");
    assert_int_equal(hvd__kv_store_count(s, "a"), 1);
    hvd__kv_store_delete(s, "a", "host:0");
    hvd__kv_store_delete(s, "a", "never-there");
    assert_int_equal(hvd__kv_store_count(s, "a"), 0);
    hvd__kv_store_destroy(s);
}

static void test_limits(void **state) {
    (void)state;
    hvd_kv_limits_t lim = {.max_value_bytes = 8, .max_total_bytes = 40, .max_keys = 3};
    hvd_kv_store_t *s;
    assert_int_equal(hvd__kv_store_create(&lim, &s), HVD_OK);
    assert_int_equal(hvd__kv_store_put(s, "a", "k", "123456789", 9), HVD_ERR_TOO_LARGE);
    assert_false(hvd__kv_store_has(s, "a", "k"));
    assert_int_equal(hvd__kv_store_put(s, "a", "k1", "12345678", 8), HVD_OK);
    assert_int_equal(hvd__kv_store_put(s, "a", "k2", "12345678", 8), HVD_OK);
    assert_int_equal(hvd__kv_store_put(s, "a", "k3", "12345678", 8), HVD_OK);     /* 30 bytes */
    assert_int_equal(hvd__kv_store_put(s, "a", "k4", "1", 1), HVD_ERR_NO_MEMORY); /* 4th key */
    assert_false(hvd__kv_store_has(s, "a", "k4"));
    /* replacing a value counts the difference only */
    assert_int_equal(hvd__kv_store_put(s, "a", "k3", "1", 1), HVD_OK);
    hvd__kv_store_delete(s, "a", "k1");
    assert_int_equal(hvd__kv_store_put(s, "b", "k9", "12345678", 8), HVD_OK);
    hvd__kv_store_destroy(s);
}

static void test_snapshot_order(void **state) {
    (void)state;
    hvd_kv_store_t *s;
    assert_int_equal(hvd__kv_store_create(NULL, &s), HVD_OK);
    const char *keys[] = {"rank_2", "rank_10", "rank_0", "a", "Z"};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(hvd__kv_store_put(s, "sc", keys[i], keys[i], strlen(keys[i])), HVD_OK);
    uint8_t *body;
    size_t len;
    assert_int_equal(hvd__kv_store_snapshot(s, "sc", &body, &len), HVD_OK);
    hvd_store_scope_t scope;
    assert_int_equal(hvd__store_scope_decode(body, len, &scope), HVD_OK);
    assert_int_equal(scope.count, 5);
    const char *sorted[] = {"Z", "a", "rank_0", "rank_10", "rank_2"};
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(scope.entries[i].key, sorted[i]);
        assert_string_equal((char *)scope.entries[i].value, sorted[i]);
    }
    hvd__store_scope_fini(&scope);
    free(body);
    assert_int_equal(hvd__kv_store_snapshot(s, "nothing", &body, &len), HVD_OK);
    assert_int_equal(len, 8);
    free(body);
    hvd__kv_store_destroy(s);
}

static void test_predefined_scopes(void **state) {
    (void)state;
    hvd_kv_store_t *s;
    assert_int_equal(hvd__kv_store_create(NULL, &s), HVD_OK);
    const char *names[] = {"global", "local_h1"};
    int sizes[] = {3, 2};
    assert_int_equal(hvd__kv_store_reset(s, names, sizes, 2), HVD_OK);
    for (int r = 0; r < 3; r++) {
        char k[16];
        snprintf(k, sizeof k, "%d", r);
        assert_int_equal(hvd__kv_store_put(s, "global", k, "addr", 4), HVD_OK);
    }
    assert_int_equal(hvd__kv_store_put(s, "local_h1", "0", "x", 1), HVD_OK);
    assert_int_equal(hvd__kv_store_put(s, "local_h1", "1", "y", 1), HVD_OK);
    /* local_h1 finishes first: only its own data and list go */
    hvd__kv_store_delete(s, "local_h1", "0");
    hvd__kv_store_delete(s, "local_h1", "0"); /* a repeat counts once */
    assert_int_equal(hvd__kv_store_count(s, "local_h1"), 2);
    hvd__kv_store_delete(s, "global", "0");
    hvd__kv_store_delete(s, "local_h1", "1");
    assert_int_equal(hvd__kv_store_count(s, "local_h1"), 0);
    /* global's finished list survived local_h1's clearing (the reference cleared it) */
    assert_int_equal(hvd__kv_store_count(s, "global"), 3);
    hvd__kv_store_delete(s, "global", "1");
    assert_int_equal(hvd__kv_store_count(s, "global"), 3);
    hvd__kv_store_delete(s, "global", "2");
    assert_int_equal(hvd__kv_store_count(s, "global"), 0);
    /* the scope is usable again, with a fresh finished list */
    assert_int_equal(hvd__kv_store_put(s, "global", "0", "again", 5), HVD_OK);
    hvd__kv_store_delete(s, "global", "0");
    assert_int_equal(hvd__kv_store_count(s, "global"), 1);
    /* reset clears everything */
    assert_int_equal(hvd__kv_store_reset(s, names, sizes, 1), HVD_OK);
    assert_int_equal(hvd__kv_store_count(s, "global"), 0);
    hvd__kv_store_destroy(s);
}

static void test_many_keys(void **state) {
    (void)state;
    hvd_kv_store_t *s;
    assert_int_equal(hvd__kv_store_create(NULL, &s), HVD_OK);
    for (int i = 0; i < 200000; i++) {
        char k[32];
        snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(hvd__kv_store_put(s, "big", k, k, strlen(k)), HVD_OK);
    }
    assert_int_equal(hvd__kv_store_count(s, "big"), 200000);
    assert_true(hvd__kv_store_has(s, "big", "k199999"));
    for (int i = 0; i < 200000; i += 2) {
        char k[32];
        snprintf(k, sizeof k, "k%d", i);
        hvd__kv_store_delete(s, "big", k);
    }
    assert_int_equal(hvd__kv_store_count(s, "big"), 100000);
    hvd__kv_store_destroy(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_delete), cmocka_unit_test(test_limits),
        cmocka_unit_test(test_snapshot_order), cmocka_unit_test(test_predefined_scopes),
        cmocka_unit_test(test_many_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
