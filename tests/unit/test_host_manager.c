/* The elastic driver's host view (host_manager.h): update flags, assignment order, snapshots,
 * blacklist and cooldown. Time and randomness are injected, so nothing sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "runner/elastic/host_manager.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A random source returning a fixed value and counting its calls. */
typedef struct {
    double value;
    int calls;
} fixed_random_t;

static double fixed_random(void *arg) {
    fixed_random_t *r = arg;
    r->calls++;
    return r->value;
}

static hvd_host_manager_t *make(int lower, int upper, fixed_random_t *r) {
    hvd_host_manager_config_t cfg = {lower, upper, r ? fixed_random : NULL, r};
    hvd_host_manager_t *hm = NULL;
    assert_int_equal(hvd__host_manager_create(&cfg, &hm), HVD_OK);
    assert_non_null(hm);
    return hm;
}

/* Parse "a:2,b:1" into a discovery array (static storage, enough for these tests). */
#define MAX_TEST_HOSTS 16
static hvd_host_t disc_hosts[MAX_TEST_HOSTS];
static char disc_names[MAX_TEST_HOSTS][32];

static size_t disc(const char *spec) {
    size_t n = 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        assert_true(n < MAX_TEST_HOSTS);
        const char *colon = memchr(p, ':', len);
        assert_non_null(colon);
        snprintf(disc_names[n], sizeof(disc_names[n]), "%.*s", (int)(colon - p), p);
        disc_hosts[n].name = disc_names[n];
        disc_hosts[n].slots = atoi(colon + 1);
        n++;
        p += len + (end != NULL);
    }
    return n;
}

static hvd_host_update_t update(hvd_host_manager_t *hm, const char *spec, int64_t now_ms) {
    size_t n = disc(spec);
    hvd_host_update_t res = (hvd_host_update_t)99;
    if (hvd__host_manager_update(hm, disc_hosts, n, now_ms, &res) != HVD_OK)
        fail_msg("update '%s' failed: %s", spec, hvd_last_error());
    return res;
}

/* The snapshot written as "a:2,b:1" (empty string for no hosts). */
static void format_list(const hvd_host_list_t *l, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < l->count; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s:%d", i ? "," : "", l->hosts[i].name,
                                 l->hosts[i].slots);
}

/* The current view must be exactly `expected`, with matching counts. */
static void expect_view(const hvd_host_manager_t *hm, const char *expected, int64_t slots) {
    hvd_host_list_t l;
    char text[512];
    assert_int_equal(hvd__host_manager_snapshot(hm, &l), HVD_OK);
    format_list(&l, text, sizeof(text));
    if (strcmp(text, expected) != 0)
        fail_msg("view is '%s', expected '%s'", text, expected);
    assert_int_equal(hvd__host_manager_host_count(hm), l.count);
    assert_int_equal(hvd__host_manager_slot_count(hm), slots);
    hvd__hosts_fini(&l);
}

static void test_order_available_hosts(void **state) {
    (void)state;
    hvd_host_manager_t *hm = make(0, 0, NULL);
    expect_view(hm, "", 0);
    assert_int_equal(update(hm, "a:1,b:1,c:1", 0), HVD_HOST_UPDATE_ADDED);
    expect_view(hm, "a:1,b:1,c:1", 3);
    assert_int_equal(update(hm, "d:1,c:1,b:1", 1000), HVD_HOST_UPDATE_MIXED);
    expect_view(hm, "b:1,c:1,d:1", 3);
    hvd__host_manager_destroy(hm);
}

static void test_update_available_hosts(void **state) {
    (void)state;
    hvd_host_manager_t *hm = make(0, 0, NULL);
    assert_int_equal(update(hm, "a:2", 0), HVD_HOST_UPDATE_ADDED);
    expect_view(hm, "a:2", 2);
    hvd_host_list_t early;
    assert_int_equal(hvd__host_manager_snapshot(hm, &early), HVD_OK);

    assert_int_equal(update(hm, "a:2,b:2", 1000), HVD_HOST_UPDATE_ADDED);
    expect_view(hm, "a:2,b:2", 4);
    assert_int_equal(update(hm, "b:2", 2000), HVD_HOST_UPDATE_REMOVED);
    expect_view(hm, "b:2", 2);
    assert_int_equal(update(hm, "b:1,c:1", 3000), HVD_HOST_UPDATE_MIXED);
    expect_view(hm, "b:1,c:1", 2);
    assert_int_equal(update(hm, "b:1,c:1", 4000), HVD_HOST_UPDATE_NONE);
    expect_view(hm, "b:1,c:1", 2);

    /* The snapshot taken after the first poll still shows that poll. */
    char text[64];
    format_list(&early, text, sizeof(text));
    assert_string_equal(text, "a:2");
    hvd__hosts_fini(&early);

    /* More slots alone is an addition. */
    assert_int_equal(update(hm, "b:3,c:1", 5000), HVD_HOST_UPDATE_ADDED);
    expect_view(hm, "b:3,c:1", 4);
    /* Nothing discovered: everything removed. */
    assert_int_equal(update(hm, "", 6000), HVD_HOST_UPDATE_REMOVED);
    expect_view(hm, "", 0);
    hvd__host_manager_destroy(hm);
}

static void test_blacklist_host(void **state) {
    (void)state;
    hvd_host_manager_t *hm = make(0, 0, NULL);
    assert_int_equal(update(hm, "a:2,b:2", 0), HVD_HOST_UPDATE_ADDED);
    expect_view(hm, "a:2,b:2", 4);
    bool newly = false;
    assert_false(hvd__host_manager_is_blacklisted(hm, "a"));
    assert_int_equal(hvd__host_manager_blacklist(hm, "a", 100, &newly), HVD_OK);
    assert_true(newly);
    assert_true(hvd__host_manager_is_blacklisted(hm, "a"));
    assert_false(hvd__host_manager_is_blacklisted(hm, "b"));
    expect_view(hm, "b:2", 2);
    /* Blacklisting is not a change the next poll reports; the driver handles the failure. */
    assert_int_equal(update(hm, "a:2,b:2", 1000), HVD_HOST_UPDATE_NONE);
    expect_view(hm, "b:2", 2);
    /* Again: not newly blacklisted. */
    assert_int_equal(hvd__host_manager_blacklist(hm, "a", 2000, &newly), HVD_OK);
    assert_false(newly);
    hvd__host_manager_destroy(hm);
}

/* Without a range a blacklisted host never comes back, however long discovery lists it. */
static void test_blacklist_without_range_is_forever(void **state) {
    (void)state;
    hvd_host_manager_t *hm = make(0, 0, NULL);
    assert_int_equal(update(hm, "a:2,b:2", 0), HVD_HOST_UPDATE_ADDED);
    assert_int_equal(hvd__host_manager_blacklist(hm, "a", 0, NULL), HVD_OK);
    assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "a"), INT64_MAX);
    assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "b"), 0);
    for (int64_t t = 1000; t <= INT64_C(1000000000000); t *= 10)
        assert_int_equal(update(hm, "a:2,b:2", t), HVD_HOST_UPDATE_NONE);
    assert_true(hvd__host_manager_is_blacklisted(hm, "a"));
    expect_view(hm, "b:2", 2);
    /* Even after disappearing and reappearing. */
    assert_int_equal(update(hm, "b:2", INT64_C(2000000000000)), HVD_HOST_UPDATE_NONE);
    assert_int_equal(update(hm, "a:4,b:2", INT64_C(3000000000000)), HVD_HOST_UPDATE_NONE);
    expect_view(hm, "b:2", 2);
    hvd__host_manager_destroy(hm);
}

/* Range [1, 2] (the reference's integration test): every period is clamped to 2 s. */
static void test_cooldown_clamped_to_upper(void **state) {
    (void)state;
    fixed_random_t r = {0.5, 0};
    hvd_host_manager_t *hm = make(1, 2, &r);
    assert_int_equal(update(hm, "a:1,b:1", 0), HVD_HOST_UPDATE_ADDED);
    int64_t t = 1000;
    for (int round = 0; round < 5; round++) {
        bool newly = false;
        assert_int_equal(hvd__host_manager_blacklist(hm, "a", t, &newly), HVD_OK);
        assert_true(newly);
        assert_int_equal(r.calls, 2 * round + 1); /* one draw per period started */
        assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "a"), t + 2000);
        expect_view(hm, "b:1", 1);
        assert_int_equal(update(hm, "a:1,b:1", t + 1999), HVD_HOST_UPDATE_NONE);
        assert_true(hvd__host_manager_is_blacklisted(hm, "a"));
        assert_int_equal(update(hm, "a:1,b:1", t + 2000), HVD_HOST_UPDATE_ADDED);
        assert_false(hvd__host_manager_is_blacklisted(hm, "a"));
        assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "a"), 0);
        /* Back behind the host that did not fail. */
        expect_view(hm, "b:1,a:1", 2);
        assert_int_equal(update(hm, "a:1,b:1", t + 2500), HVD_HOST_UPDATE_NONE);
        /* Make a the first host again for the next round. */
        assert_int_equal(hvd__host_manager_blacklist(hm, "b", t + 2500, NULL), HVD_OK);
        assert_int_equal(update(hm, "a:1,b:1", t + 4500), HVD_HOST_UPDATE_ADDED);
        expect_view(hm, "a:1,b:1", 2);
        t += 10000;
    }
    hvd__host_manager_destroy(hm);
}

/* Range [10, 1000] with u = 0: 20 s, 40 s, 80 s, ... up to 1000 s. */
static void test_cooldown_exponential(void **state) {
    (void)state;
    fixed_random_t r = {0.0, 0};
    hvd_host_manager_t *hm = make(10, 1000, &r);
    assert_int_equal(update(hm, "a:2,b:2", 0), HVD_HOST_UPDATE_ADDED);
    const int64_t expect_s[] = {20, 40, 80, 160, 320, 640, 1000, 1000};
    int64_t t = 5000;
    for (size_t i = 0; i < sizeof(expect_s) / sizeof(expect_s[0]); i++) {
        assert_int_equal(hvd__host_manager_blacklist(hm, "a", t, NULL), HVD_OK);
        int64_t end = t + expect_s[i] * 1000;
        assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "a"), end);
        assert_int_equal(update(hm, "a:2,b:2", end - 1), HVD_HOST_UPDATE_NONE);
        expect_view(hm, "b:2", 2);
        assert_int_equal(update(hm, "a:2,b:2", end), HVD_HOST_UPDATE_ADDED);
        expect_view(hm, "b:2,a:2", 4);
        t = end + 3000;
    }
    hvd__host_manager_destroy(hm);

    /* u close to 1: the first period is just under 3L. */
    r = (fixed_random_t){0.999, 0};
    hm = make(10, 1000, &r);
    assert_int_equal(hvd__host_manager_blacklist(hm, "x", 0, NULL), HVD_OK);
    assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "x"), 29990);
    hvd__host_manager_destroy(hm);
}

/* Blacklisting again inside a cooldown keeps the period and does not count a failure. */
static void test_blacklist_in_cooldown_keeps_period(void **state) {
    (void)state;
    fixed_random_t r = {0.0, 0};
    hvd_host_manager_t *hm = make(10, 1000, &r);
    assert_int_equal(update(hm, "a:1,b:1", 0), HVD_HOST_UPDATE_ADDED);
    bool newly = false;
    assert_int_equal(hvd__host_manager_blacklist(hm, "a", 0, &newly), HVD_OK);
    assert_true(newly);
    assert_int_equal(hvd__host_manager_blacklist(hm, "a", 15000, &newly), HVD_OK);
    assert_false(newly);
    assert_int_equal(r.calls, 1);
    assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "a"), 20000);
    assert_int_equal(update(hm, "a:1,b:1", 20000), HVD_HOST_UPDATE_ADDED);
    /* The next failure is the second: 40 s, not a restarted 20 s nor a skipped 80 s. */
    assert_int_equal(hvd__host_manager_blacklist(hm, "a", 30000, NULL), HVD_OK);
    assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "a"), 70000);
    hvd__host_manager_destroy(hm);
}

/* After its period a host comes back only if discovery still lists it; its failure count
 * survives an absence from discovery. */
static void test_resurrect_only_when_discovered(void **state) {
    (void)state;
    fixed_random_t r = {0.0, 0};
    hvd_host_manager_t *hm = make(10, 1000, &r);
    assert_int_equal(update(hm, "a:2,b:2", 0), HVD_HOST_UPDATE_ADDED);
    assert_int_equal(hvd__host_manager_blacklist(hm, "a", 0, NULL), HVD_OK);
    /* A blacklisted host leaving discovery is not a change of the view. */
    assert_int_equal(update(hm, "b:2", 10000), HVD_HOST_UPDATE_NONE);
    assert_int_equal(update(hm, "b:2", 25000), HVD_HOST_UPDATE_NONE);
    assert_true(hvd__host_manager_is_blacklisted(hm, "a"));
    expect_view(hm, "b:2", 2);
    assert_int_equal(update(hm, "c:1,a:3,b:2", 26000), HVD_HOST_UPDATE_ADDED);
    assert_false(hvd__host_manager_is_blacklisted(hm, "a"));
    /* Newcomers in discovery order, after the survivor. */
    expect_view(hm, "b:2,c:1,a:3", 6);
    /* Gone for a while, then failing again: the second period (40 s). */
    assert_int_equal(update(hm, "c:1,b:2", 27000), HVD_HOST_UPDATE_REMOVED);
    assert_int_equal(update(hm, "c:1,b:2", 28000), HVD_HOST_UPDATE_NONE);
    assert_int_equal(update(hm, "c:1,a:3,b:2", 29000), HVD_HOST_UPDATE_ADDED);
    assert_int_equal(hvd__host_manager_blacklist(hm, "a", 30000, NULL), HVD_OK);
    assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "a"), 70000);
    hvd__host_manager_destroy(hm);
}

/* A host blacklisted before discovery ever listed it stays out when it shows up. */
static void test_blacklist_unknown_host(void **state) {
    (void)state;
    fixed_random_t r = {0.0, 0};
    hvd_host_manager_t *hm = make(10, 1000, &r);
    assert_int_equal(update(hm, "b:1", 0), HVD_HOST_UPDATE_ADDED);
    assert_int_equal(hvd__host_manager_blacklist(hm, "z", 0, NULL), HVD_OK);
    assert_true(hvd__host_manager_is_blacklisted(hm, "z"));
    assert_int_equal(update(hm, "z:4,b:1", 1000), HVD_HOST_UPDATE_NONE);
    expect_view(hm, "b:1", 1);
    assert_int_equal(update(hm, "z:4,b:1", 20000), HVD_HOST_UPDATE_ADDED);
    expect_view(hm, "b:1,z:4", 5);
    assert_false(hvd__host_manager_is_blacklisted(hm, "nobody"));
    assert_int_equal(hvd__host_manager_cooldown_end_ms(hm, "nobody"), 0);
    hvd__host_manager_destroy(hm);
}

/* Several new hosts are appended in discovery order, whatever their names. */
static void test_new_hosts_in_discovery_order(void **state) {
    (void)state;
    hvd_host_manager_t *hm = make(0, 0, NULL);
    assert_int_equal(update(hm, "zeta:1,alpha:2,mu:3", 0), HVD_HOST_UPDATE_ADDED);
    expect_view(hm, "zeta:1,alpha:2,mu:3", 6);
    assert_int_equal(update(hm, "q:1,mu:3,zeta:1,b:1,alpha:2,c:1", 1000), HVD_HOST_UPDATE_ADDED);
    expect_view(hm, "zeta:1,alpha:2,mu:3,q:1,b:1,c:1", 9);
    /* Rank 0's host leaves: the next oldest leads. */
    assert_int_equal(update(hm, "q:1,mu:3,b:1,alpha:2,c:1,y:1,x:1", 2000), HVD_HOST_UPDATE_MIXED);
    expect_view(hm, "alpha:2,mu:3,q:1,b:1,c:1,y:1,x:1", 10);
    hvd__host_manager_destroy(hm);
}

static void expect_update_error(hvd_host_manager_t *hm, const hvd_host_t *hosts, size_t n,
                                hvd_status_t status, const char *needle) {
    hvd_host_update_t res = (hvd_host_update_t)99;
    assert_int_equal(hvd__host_manager_update(hm, hosts, n, 5000, &res), status);
    assert_int_equal(res, 99);
    if (!strstr(hvd_last_error(), needle))
        fail_msg("error '%s' lacks '%s'", hvd_last_error(), needle);
}

static void test_errors(void **state) {
    (void)state;
    hvd_host_manager_t *hm = make(0, 0, NULL);
    assert_int_equal(update(hm, "a:2,b:2", 0), HVD_HOST_UPDATE_ADDED);

    size_t n = disc("x:1,dup-host:2,y:1,dup-host:1");
    expect_update_error(hm, disc_hosts, n, HVD_ERR_INVALID_ARG, "'dup-host' twice");
    n = disc("x:1,lazy:0");
    expect_update_error(hm, disc_hosts, n, HVD_ERR_INVALID_ARG, "'lazy' has 0 slots");
    n = disc("x:1,neg:-3");
    expect_update_error(hm, disc_hosts, n, HVD_ERR_INVALID_ARG, "'neg' has -3 slots");
    char long_name[300];
    memset(long_name, 'h', 256);
    long_name[256] = '\0';
    hvd_host_t bad[2] = {{(char *)"x", 1}, {long_name, 1}};
    expect_update_error(hm, bad, 2, HVD_ERR_INVALID_ARG, "longer than 255");
    bad[1].name = (char *)"";
    expect_update_error(hm, bad, 2, HVD_ERR_INVALID_ARG, "empty host name");
    /* A failed update changed nothing. */
    expect_view(hm, "a:2,b:2", 4);
    assert_int_equal(update(hm, "a:2,b:2", 6000), HVD_HOST_UPDATE_NONE);

    /* 255 characters is fine. */
    long_name[255] = '\0';
    bad[1].name = long_name;
    hvd_host_update_t res;
    assert_int_equal(hvd__host_manager_update(hm, bad, 2, 7000, &res), HVD_OK);
    assert_int_equal(res, HVD_HOST_UPDATE_MIXED);

    assert_int_equal(hvd__host_manager_blacklist(hm, "", 0, NULL), HVD_ERR_INVALID_ARG);
    memset(long_name, 'h', 256);
    long_name[256] = '\0';
    assert_int_equal(hvd__host_manager_blacklist(hm, long_name, 0, NULL), HVD_ERR_INVALID_ARG);
    hvd__host_manager_destroy(hm);

    hvd_host_manager_t *bad_hm = (hvd_host_manager_t *)&n;
    const int ranges[][2] = {{0, 5}, {5, 0}, {5, 4}, {-1, 3}};
    for (size_t i = 0; i < 4; i++) {
        hvd_host_manager_config_t cfg = {ranges[i][0], ranges[i][1], NULL, NULL};
        assert_int_equal(hvd__host_manager_create(&cfg, &bad_hm), HVD_ERR_INVALID_ARG);
        assert_ptr_equal(bad_hm, (hvd_host_manager_t *)&n);
        assert_non_null(strstr(hvd_last_error(), "cooldown range"));
    }
    hvd__host_manager_destroy(NULL);
}

/* The bound on hosts, and that a poll of that many stays fast (hash index, not a scan). */
static void test_many_hosts(void **state) {
    (void)state;
    size_t n = HVD_HOST_MANAGER_HOSTS_MAX + 1;
    hvd_host_t *hosts = calloc(n, sizeof(*hosts));
    char *names = calloc(n, 16);
    assert_non_null(hosts);
    assert_non_null(names);
    /* Reverse name order, so discovery order differs from any sorted order. */
    for (size_t i = 0; i < n; i++) {
        snprintf(names + 16 * i, 16, "h%zu", n - i);
        hosts[i].name = names + 16 * i;
        hosts[i].slots = 1;
    }
    hvd_host_manager_t *hm = make(0, 0, NULL);
    hvd_host_update_t res;
    assert_int_equal(hvd__host_manager_update(hm, hosts, n, 0, &res), HVD_ERR_TOO_LARGE);
    assert_int_equal(hvd__host_manager_update(hm, hosts + 1, n - 1, 0, &res), HVD_OK);
    assert_int_equal(res, HVD_HOST_UPDATE_ADDED);
    assert_int_equal(hvd__host_manager_host_count(hm), n - 1);
    assert_int_equal(hvd__host_manager_slot_count(hm), (int64_t)(n - 1));
    /* Every host blacklisted is remembered; one more name is refused. */
    assert_int_equal(hvd__host_manager_blacklist(hm, hosts[5].name, 0, NULL), HVD_OK);
    assert_int_equal(hvd__host_manager_blacklist(hm, hosts[0].name, 0, NULL), HVD_ERR_TOO_LARGE);
    assert_int_equal(hvd__host_manager_update(hm, hosts + 1, n - 1, 1000, &res), HVD_OK);
    assert_int_equal(res, HVD_HOST_UPDATE_NONE);
    hvd_host_list_t l;
    assert_int_equal(hvd__host_manager_snapshot(hm, &l), HVD_OK);
    assert_int_equal(l.count, n - 2);
    assert_string_equal(l.hosts[0].name, hosts[1].name);
    assert_string_equal(l.hosts[3].name, hosts[4].name);
    assert_string_equal(l.hosts[4].name, hosts[6].name);
    assert_string_equal(l.hosts[l.count - 1].name, hosts[n - 1].name);
    hvd__hosts_fini(&l);
    hvd__host_manager_destroy(hm);
    free(names);
    free(hosts);
}

/* The default random source stays inside the documented 2L..3L first period. */
static void test_default_random_in_range(void **state) {
    (void)state;
    hvd_host_manager_t *hm = make(10, 1000, NULL);
    char name[16];
    for (int i = 0; i < 200; i++) {
        snprintf(name, sizeof(name), "h%d", i);
        assert_int_equal(hvd__host_manager_blacklist(hm, name, 0, NULL), HVD_OK);
        int64_t end = hvd__host_manager_cooldown_end_ms(hm, name);
        assert_true(end >= 20000 && end < 30000);
    }
    hvd__host_manager_destroy(hm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_available_hosts),
        cmocka_unit_test(test_update_available_hosts),
        cmocka_unit_test(test_blacklist_host),
        cmocka_unit_test(test_blacklist_without_range_is_forever),
        cmocka_unit_test(test_cooldown_clamped_to_upper),
        cmocka_unit_test(test_cooldown_exponential),
        cmocka_unit_test(test_blacklist_in_cooldown_keeps_period),
        cmocka_unit_test(test_resurrect_only_when_discovered),
        cmocka_unit_test(test_blacklist_unknown_host),
        cmocka_unit_test(test_new_hosts_in_discovery_order),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_many_hosts),
        cmocka_unit_test(test_default_random_in_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
