/* The response cache: a name hits only with every parameter equal (and is invalid with any
 * one different), new entries take the lowest free bit, the least recently used entry is
 * evicted when full (touch and put refresh, lookup does not), a re-put keeps its bit, the
 * bit-vector length follows the highest bit in use, and the bit assignment is a pure function
 * of the put/touch/erase sequence: two caches and a naive model fed the same random sequence
 * agree bit for bit. A huge capacity costs memory only for the bits in use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "controller/response_cache.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

#ifdef TEST_ASAN
/* ASan replaces malloc, so mallinfo2 says nothing; its own counter does. */
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t allocated_bytes(void) {
    return __sanitizer_get_current_allocated_bytes();
}
#else
static size_t allocated_bytes(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}
#endif

static hvd_request_t req(const char *name, int64_t d0, int64_t d1) {
    hvd_request_t r = {.rank = 3,
                       .type = HVD_REQ_ALLREDUCE,
                       .dtype = 7,
                       .op = 1,
                       .ndims = 2,
                       .root = -1,
                       .prescale = 1,
                       .postscale = 0.25,
                       .dims = {d0, d1},
                       .name = (char *)name};
    return r;
}

static void put_ok(hvd_cache_t *c, const hvd_request_t *r, uint32_t want_bit, int want_evicted) {
    uint32_t bit = 12345;
    int evicted = 12345;
    assert_int_equal(hvd__cache_put(c, r, &bit, &evicted), HVD_OK);
    assert_int_equal(bit, want_bit);
    assert_int_equal(evicted, want_evicted);
}

static void put_name(hvd_cache_t *c, const char *name, uint32_t want_bit, int want_evicted) {
    hvd_request_t r = req(name, 4, 5);
    put_ok(c, &r, want_bit, want_evicted);
}

static int cached(const hvd_cache_t *c, const char *name) {
    hvd_request_t r = req(name, 4, 5);
    return hvd__cache_lookup(c, &r, NULL) != HVD_CACHE_MISS;
}

static void test_create_args(void **state) {
    (void)state;
    hvd_cache_t *c = (hvd_cache_t *)&c; /* must stay untouched on error */
    assert_int_equal(hvd__cache_create(0, &c), HVD_ERR_INVALID_ARG);
    assert_ptr_equal(c, (hvd_cache_t *)&c);
    assert_int_equal(hvd__cache_create(5, &c), HVD_OK);
    assert_int_equal(hvd__cache_capacity(c), 5);
    assert_int_equal(hvd__cache_nbits(c), 0);
    for (uint32_t b = 0; b < 7; b++)
        assert_null(hvd__cache_get(c, b));
    /* NULL name and too many dims are refused and leave the cache as it was */
    hvd_request_t r = req("x", 1, 2);
    r.name = NULL;
    assert_int_equal(hvd__cache_put(c, &r, NULL, NULL), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__cache_lookup(c, &r, NULL), HVD_CACHE_MISS);
    r = req("x", 1, 2);
    r.ndims = HVD_NEG_MAX_DIMS + 1;
    assert_int_equal(hvd__cache_put(c, &r, NULL, NULL), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__cache_nbits(c), 0);
    assert_false(cached(c, "x"));
    hvd__cache_destroy(c);
    hvd__cache_destroy(NULL);
}

static void test_hit_miss_invalid(void **state) {
    (void)state;
    hvd_cache_t *c;
    assert_int_equal(hvd__cache_create(16, &c), HVD_OK);
    put_name(c, "other", 0, 0);
    hvd_request_t base = req("t", 10, 20);
    put_ok(c, &base, 1, 0);

    uint32_t bit = 99;
    assert_int_equal(hvd__cache_lookup(c, &base, &bit), HVD_CACHE_HIT);
    assert_int_equal(bit, 1);
    /* the rank and dims past ndims are not part of the request */
    hvd_request_t same = base;
    same.rank = 0;
    same.dims[2] = 777;
    same.dims[7] = -1;
    bit = 99;
    assert_int_equal(hvd__cache_lookup(c, &same, &bit), HVD_CACHE_HIT);
    assert_int_equal(bit, 1);
    /* the name is compared by content, not by pointer */
    char copy[] = "t";
    same.name = copy;
    assert_int_equal(hvd__cache_lookup(c, &same, NULL), HVD_CACHE_HIT);

    hvd_request_t v[9];
    for (int i = 0; i < 9; i++)
        v[i] = base;
    v[0].type = HVD_REQ_ALLGATHER;
    v[1].dtype = 6;
    v[2].op = 2;
    v[3].root = 0;
    v[4].ndims = 1; /* [10] against [10, 20]: same prefix, other rank */
    v[5].dims[1] = 21;
    v[6].prescale = 2;
    v[7].postscale = 0.5;
    v[8].ndims = 3; /* [10, 20, 0] against [10, 20] */
    for (int i = 0; i < 9; i++) {
        bit = 99;
        assert_int_equal(hvd__cache_lookup(c, &v[i], &bit), HVD_CACHE_INVALID);
        assert_int_equal(bit, 1);
    }

    hvd_request_t miss = req("u", 10, 20);
    bit = 99;
    assert_int_equal(hvd__cache_lookup(c, &miss, &bit), HVD_CACHE_MISS);
    assert_int_equal(bit, 99); /* untouched on a miss */
    miss.name = (char *)"";
    assert_int_equal(hvd__cache_lookup(c, &miss, &bit), HVD_CACHE_MISS);
    miss.name = (char *)"tt";
    assert_int_equal(hvd__cache_lookup(c, &miss, &bit), HVD_CACHE_MISS);

    /* factors compare as bits: NaN hits NaN, -0.0 is not 0.0 */
    hvd_request_t n = req("nan", 1, 1);
    n.prescale = NAN;
    n.postscale = 0.0;
    put_ok(c, &n, 2, 0);
    assert_int_equal(hvd__cache_lookup(c, &n, NULL), HVD_CACHE_HIT);
    hvd_request_t nz = n;
    nz.postscale = -0.0;
    assert_int_equal(hvd__cache_lookup(c, &nz, NULL), HVD_CACHE_INVALID);
    hvd__cache_destroy(c);
}

static void test_get_is_a_copy(void **state) {
    (void)state;
    hvd_cache_t *c;
    assert_int_equal(hvd__cache_create(4, &c), HVD_OK);
    char name[] = "layer1/weight";
    hvd_request_t r = req(name, 3, 9);
    r.type = HVD_REQ_BROADCAST;
    r.root = 2;
    r.ndims = 1;
    r.dims[1] = 55; /* past ndims: not kept */
    put_ok(c, &r, 0, 0);
    name[0] = 'X'; /* the caller's buffer is the caller's */
    const hvd_request_t *g = hvd__cache_get(c, 0);
    assert_non_null(g);
    assert_ptr_not_equal(g->name, name);
    assert_string_equal(g->name, "layer1/weight");
    assert_int_equal(g->rank, -1);
    assert_int_equal(g->type, HVD_REQ_BROADCAST);
    assert_int_equal(g->dtype, 7);
    assert_int_equal(g->op, 1);
    assert_int_equal(g->root, 2);
    assert_int_equal(g->ndims, 1);
    assert_true(g->dims[0] == 3 && g->dims[1] == 0);
    assert_true(g->prescale == 1 && g->postscale == 0.25);
    assert_null(hvd__cache_get(c, 1));
    assert_null(hvd__cache_get(c, 4));
    assert_null(hvd__cache_get(c, UINT32_MAX));
    hvd__cache_destroy(c);
}

static void test_lowest_free_bit(void **state) {
    (void)state;
    hvd_cache_t *c;
    assert_int_equal(hvd__cache_create(100, &c), HVD_OK);
    const char *names[] = {"a", "b", "c", "d", "e"};
    for (uint32_t i = 0; i < 5; i++)
        put_name(c, names[i], i, 0);
    hvd__cache_erase(c, 3);
    hvd__cache_erase(c, 1);
    hvd__cache_erase(c, 1);   /* already free: no-op */
    hvd__cache_erase(c, 50);  /* never used: no-op */
    hvd__cache_erase(c, 500); /* out of range: no-op */
    assert_null(hvd__cache_get(c, 1));
    assert_null(hvd__cache_get(c, 3));
    assert_false(cached(c, "b"));
    assert_false(cached(c, "d"));
    assert_true(cached(c, "a") && cached(c, "c") && cached(c, "e"));
    assert_int_equal(hvd__cache_nbits(c), 5);
    put_name(c, "f", 1, 0);
    put_name(c, "g", 3, 0);
    put_name(c, "h", 5, 0);
    hvd__cache_erase(c, 0);
    hvd__cache_erase(c, 4);
    hvd__cache_erase(c, 2);
    put_name(c, "i", 0, 0);
    put_name(c, "j", 2, 0);
    put_name(c, "b", 4, 0); /* an erased name comes back as a new entry */
    put_name(c, "k", 6, 0);
    assert_string_equal(hvd__cache_get(c, 4)->name, "b");
    assert_int_equal(hvd__cache_nbits(c), 7);
    hvd__cache_destroy(c);
}

static void test_lru_eviction_with_touch(void **state) {
    (void)state;
    hvd_cache_t *c;
    assert_int_equal(hvd__cache_create(3, &c), HVD_OK);
    put_name(c, "a", 0, 0);
    put_name(c, "b", 1, 0);
    put_name(c, "c", 2, 0);
    hvd__cache_touch(c, 0); /* order now b, c, a */
    /* a lookup does not refresh b */
    hvd_request_t rb = req("b", 4, 5);
    assert_int_equal(hvd__cache_lookup(c, &rb, NULL), HVD_CACHE_HIT);
    put_name(c, "d", 1, 1); /* evicts b: c, a, d */
    assert_false(cached(c, "b"));
    assert_string_equal(hvd__cache_get(c, 1)->name, "d");
    hvd__cache_touch(c, 2); /* a, d, c */
    hvd__cache_touch(c, 7); /* out of range: no-op */
    put_name(c, "e", 0, 1); /* evicts a: d, c, e */
    assert_false(cached(c, "a"));
    put_name(c, "c", 2, 0); /* re-put refreshes c: d, e, c */
    put_name(c, "f", 1, 1); /* evicts d: e, c, f */
    assert_false(cached(c, "d"));
    assert_true(cached(c, "e") && cached(c, "c") && cached(c, "f"));
    /* erase makes room: no eviction, lowest free bit */
    hvd__cache_erase(c, 2); /* e, f */
    hvd__cache_touch(c, 2); /* free: no-op */
    put_name(c, "g", 2, 0); /* e, f, g */
    put_name(c, "h", 0, 1); /* evicts e */
    assert_string_equal(hvd__cache_get(c, 0)->name, "h");
    assert_string_equal(hvd__cache_get(c, 1)->name, "f");
    assert_string_equal(hvd__cache_get(c, 2)->name, "g");
    assert_int_equal(hvd__cache_nbits(c), 3);
    hvd__cache_destroy(c);
}

static void test_replace_in_place(void **state) {
    (void)state;
    hvd_cache_t *c;
    assert_int_equal(hvd__cache_create(2, &c), HVD_OK);
    hvd_request_t a1 = req("a", 8, 8), b = req("b", 1, 1), a2 = req("a", 16, 2);
    a2.dtype = 9;
    put_ok(c, &a1, 0, 0);
    put_ok(c, &b, 1, 0);
    /* full, but a is already cached: replaced, same bit, nothing evicted */
    put_ok(c, &a2, 0, 0);
    assert_int_equal(hvd__cache_lookup(c, &a1, NULL), HVD_CACHE_INVALID);
    assert_int_equal(hvd__cache_lookup(c, &a2, NULL), HVD_CACHE_HIT);
    const hvd_request_t *g = hvd__cache_get(c, 0);
    assert_string_equal(g->name, "a");
    assert_int_equal(g->dtype, 9);
    assert_true(g->dims[0] == 16 && g->dims[1] == 2);
    assert_int_equal(hvd__cache_lookup(c, &b, NULL), HVD_CACHE_HIT);
    /* the replacement is the most recently used: the next new name evicts b */
    hvd_request_t n = req("n", 1, 1);
    put_ok(c, &n, 1, 1);
    assert_int_equal(hvd__cache_lookup(c, &b, NULL), HVD_CACHE_MISS);
    assert_int_equal(hvd__cache_lookup(c, &a2, NULL), HVD_CACHE_HIT);
    hvd__cache_destroy(c);
}

static void test_nbits(void **state) {
    (void)state;
    hvd_cache_t *c;
    assert_int_equal(hvd__cache_create(10, &c), HVD_OK);
    const char *names[] = {"a", "b", "c", "d", "e"};
    for (uint32_t i = 0; i < 5; i++) {
        put_name(c, names[i], i, 0);
        assert_int_equal(hvd__cache_nbits(c), i + 1);
    }
    hvd__cache_erase(c, 1);
    hvd__cache_erase(c, 2);
    assert_int_equal(hvd__cache_nbits(c), 5); /* holes below the top do not shorten it */
    hvd__cache_erase(c, 4);
    assert_int_equal(hvd__cache_nbits(c), 4);
    hvd__cache_erase(c, 3);
    assert_int_equal(hvd__cache_nbits(c), 1); /* down past the holes */
    put_name(c, "x", 1, 0);
    assert_int_equal(hvd__cache_nbits(c), 2);
    hvd__cache_erase(c, 0);
    assert_int_equal(hvd__cache_nbits(c), 2);
    hvd__cache_erase(c, 1);
    assert_int_equal(hvd__cache_nbits(c), 0);
    put_name(c, "y", 0, 0); /* the lowest free bit, though 1..4 were used before */
    assert_int_equal(hvd__cache_nbits(c), 1);
    hvd__cache_destroy(c);
}

static void test_capacity_one(void **state) {
    (void)state;
    hvd_cache_t *c;
    assert_int_equal(hvd__cache_create(1, &c), HVD_OK);
    put_name(c, "a", 0, 0);
    put_name(c, "a", 0, 0);
    put_name(c, "b", 0, 1);
    assert_false(cached(c, "a"));
    assert_true(cached(c, "b"));
    hvd__cache_touch(c, 0);
    assert_int_equal(hvd__cache_nbits(c), 1);
    hvd__cache_erase(c, 0);
    assert_int_equal(hvd__cache_nbits(c), 0);
    assert_null(hvd__cache_get(c, 0));
    put_name(c, "c", 0, 0);
    assert_string_equal(hvd__cache_get(c, 0)->name, "c");
    assert_null(hvd__cache_get(c, 1));
    hvd__cache_destroy(c);
}

/* Many names: the name index grows and rehashes; every name still finds its own bit. */
static void test_many_names(void **state) {
    (void)state;
    enum { N = 20000 };
    hvd_cache_t *c;
    assert_int_equal(hvd__cache_create(100000, &c), HVD_OK);
    char name[32];
    for (uint32_t i = 0; i < N; i++) {
        snprintf(name, sizeof name, "grad/%u", i);
        put_name(c, name, i, 0);
    }
    for (uint32_t i = 0; i < N; i += 2)
        hvd__cache_erase(c, i);
    for (uint32_t i = 0; i < N; i++) {
        snprintf(name, sizeof name, "grad/%u", i);
        hvd_request_t r = req(name, 4, 5);
        uint32_t bit = UINT32_MAX;
        hvd_cache_state_t s = hvd__cache_lookup(c, &r, &bit);
        if (i % 2) {
            assert_int_equal(s, HVD_CACHE_HIT);
            assert_int_equal(bit, i);
        } else {
            assert_int_equal(s, HVD_CACHE_MISS);
        }
    }
    assert_int_equal(hvd__cache_nbits(c), N);
    hvd__cache_destroy(c);
}

/* A capacity from HOROVOD_CACHE_CAPACITY near INT_MAX costs memory for the bits in use only. */
static void test_large_capacity(void **state) {
    (void)state;
    const uint32_t caps[] = {1u << 30, 2147483647u, UINT32_MAX};
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        long long before = (long long)allocated_bytes();
        hvd_cache_t *c;
        assert_int_equal(hvd__cache_create(caps[k], &c), HVD_OK);
        assert_int_equal(hvd__cache_capacity(c), caps[k]);
        assert_true((long long)allocated_bytes() - before < (1ll << 20));
        char name[32];
        for (uint32_t i = 0; i < 1000; i++) {
            snprintf(name, sizeof name, "t%u", i);
            put_name(c, name, i, 0);
        }
        assert_true((long long)allocated_bytes() - before < (8ll << 20));
        hvd__cache_erase(c, 999);
        assert_int_equal(hvd__cache_nbits(c), 999);
        assert_null(hvd__cache_get(c, caps[k] - 1));
        hvd__cache_touch(c, caps[k] - 1);
        hvd__cache_erase(c, caps[k] - 1);
        hvd__cache_destroy(c);
    }
}

/* ---- the same random sequence on two caches and on a naive model ---- */

#define RCAP 7
#define RNAMES 20

/* The specification written the slow, obvious way: bits with use-stamps, the lowest free bit
 * for a new name, the smallest stamp evicted when full. */
typedef struct {
    int used;
    int name;
    hvd_request_t params;
    uint64_t stamp;
} model_slot_t;

typedef struct {
    model_slot_t slot[RCAP];
    uint64_t clock;
} model_t;

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void model_put(model_t *m, int name, const hvd_request_t *r, uint32_t *bit_p,
                      int *evicted_p) {
    int bit = -1;
    *evicted_p = 0;
    for (int b = 0; b < RCAP; b++)
        if (m->slot[b].used && m->slot[b].name == name)
            bit = b;
    for (int b = 0; b < RCAP && bit < 0; b++)
        if (!m->slot[b].used)
            bit = b;
    if (bit < 0) {
        bit = 0;
        for (int b = 1; b < RCAP; b++)
            if (m->slot[b].stamp < m->slot[bit].stamp)
                bit = b;
        *evicted_p = 1;
    }
    m->slot[bit] = (model_slot_t){1, name, *r, ++m->clock};
    *bit_p = (uint32_t)bit;
}

static void check_same(const hvd_cache_t *a, const hvd_cache_t *b, const model_t *m,
                       char names[][32]) {
    uint32_t top = 0;
    for (uint32_t bit = 0; bit <= RCAP; bit++) {
        const hvd_request_t *ga = hvd__cache_get(a, bit), *gb = hvd__cache_get(b, bit);
        if (bit == RCAP || !m->slot[bit].used) {
            assert_null(ga);
            assert_null(gb);
            continue;
        }
        top = bit + 1;
        assert_non_null(ga);
        assert_non_null(gb);
        const hvd_request_t *want = &m->slot[bit].params;
        assert_string_equal(ga->name, names[m->slot[bit].name]);
        assert_string_equal(gb->name, names[m->slot[bit].name]);
        assert_int_equal(ga->ndims, want->ndims);
        assert_int_equal(gb->ndims, want->ndims);
        assert_true(ga->dims[0] == want->dims[0] && gb->dims[0] == want->dims[0]);
        assert_int_equal(ga->dtype, want->dtype);
        assert_int_equal(gb->dtype, want->dtype);
    }
    assert_int_equal(hvd__cache_nbits(a), top);
    assert_int_equal(hvd__cache_nbits(b), top);
}

static void test_random_sequences_agree(void **state) {
    (void)state;
    char names[RNAMES][32];
    for (int i = 0; i < RNAMES; i++)
        snprintf(names[i], sizeof names[i], "rank.tensor.%d", i);
    hvd_cache_t *a, *b;
    assert_int_equal(hvd__cache_create(RCAP, &a), HVD_OK);
    assert_int_equal(hvd__cache_create(RCAP, &b), HVD_OK);
    model_t m;
    memset(&m, 0, sizeof m);
    uint64_t seed = 0x9e3779b97f4a7c15ull, noise = 42;
    int evictions = 0, erasures = 0, hits = 0, invalids = 0;
    for (int op = 0; op < 20000; op++) {
        uint64_t x = rng_next(&seed);
        int name = (int)(x % RNAMES);
        int kind = (int)((x >> 8) % 10);
        uint32_t bit = (uint32_t)((x >> 16) % (RCAP + 2));
        hvd_request_t r = req(names[name], (int64_t)((x >> 24) % 3), 1);
        r.dtype = (uint8_t)((x >> 32) % 2);
        r.ndims = (uint8_t)(1 + (x >> 40) % 2);
        if (kind < 5) {
            /* b gets its own copy of the name, another rank and junk past ndims: none of
             * that may matter */
            hvd_request_t rb = r;
            char nb[32];
            memcpy(nb, names[name], sizeof nb);
            rb.name = nb;
            rb.rank = (int32_t)(x >> 48);
            rb.dims[5] = (int64_t)x;
            uint32_t ba, bb, bm;
            int ea, eb, em;
            assert_int_equal(hvd__cache_put(a, &r, &ba, &ea), HVD_OK);
            assert_int_equal(hvd__cache_put(b, &rb, &bb, &eb), HVD_OK);
            model_put(&m, name, &r, &bm, &em);
            assert_int_equal(ba, bm);
            assert_int_equal(bb, bm);
            assert_int_equal(ea, em);
            assert_int_equal(eb, em);
            evictions += em;
        } else if (kind < 8) {
            hvd__cache_touch(a, bit);
            hvd__cache_touch(b, bit);
            if (bit < RCAP && m.slot[bit].used)
                m.slot[bit].stamp = ++m.clock;
        } else if (kind < 9) {
            hvd__cache_erase(a, bit);
            hvd__cache_erase(b, bit);
            if (bit < RCAP && m.slot[bit].used) {
                m.slot[bit].used = 0;
                erasures++;
            }
        } else {
            uint32_t ba = 0, bb = 0;
            hvd_cache_state_t sa = hvd__cache_lookup(a, &r, &ba);
            hvd_cache_state_t sb = hvd__cache_lookup(b, &r, &bb);
            assert_int_equal(sa, sb);
            if (sa != HVD_CACHE_MISS)
                assert_int_equal(ba, bb);
            hits += sa == HVD_CACHE_HIT;
            invalids += sa == HVD_CACHE_INVALID;
        }
        /* lookups on b alone, of any name, must not change what b does next */
        for (int k = 0; k < 3; k++) {
            hvd_request_t q = req(names[rng_next(&noise) % RNAMES], 0, 1);
            (void)hvd__cache_lookup(b, &q, NULL);
        }
        check_same(a, b, &m, names);
    }
    /* the sequence exercised every path */
    assert_true(evictions > 100 && erasures > 100 && hits > 10 && invalids > 10);
    hvd__cache_destroy(a);
    hvd__cache_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_args),
        cmocka_unit_test(test_hit_miss_invalid),
        cmocka_unit_test(test_get_is_a_copy),
        cmocka_unit_test(test_lowest_free_bit),
        cmocka_unit_test(test_lru_eviction_with_touch),
        cmocka_unit_test(test_replace_in_place),
        cmocka_unit_test(test_nbits),
        cmocka_unit_test(test_capacity_one),
        cmocka_unit_test(test_many_names),
        cmocka_unit_test(test_large_capacity),
        cmocka_unit_test(test_random_sequences_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
