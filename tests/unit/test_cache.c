/* The start-up cache (runner/cli/cache.h), in a temporary directory standing in for ~/.horovod:
 * values survive a reopen; entries go stale after an hour (the clock is passed in); other
 * parameters discard the content; a corrupt file is ignored and rewritten; files are 0600 in a
 * 0700 directory and no temporary file is left behind; discovery results round-trip through
 * their text form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "runner/cli/cache.h"
#include "runner/discovery/discovery.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256], dir[300], path[400];
static const int64_t T0 = 1700000000;

static int setup_dir(void **state) {
    (void)state;
    snprintf(root, sizeof root, "/tmp/hvd-test-cache-XXXXXX");
    assert_non_null(mkdtemp(root));
    assert_int_equal(hvd__start_cache_default_dir(root, dir, sizeof dir), HVD_OK);
    snprintf(path, sizeof path, "%s/hvd-cache", dir);
    return 0;
}

static int teardown_dir(void **state) {
    (void)state;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char p[700];
            if (e->d_name[0] == '.')
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
    rmdir(root);
    return 0;
}

static hvd_start_cache_t *open_cache(const char *params, int64_t now) {
    hvd_start_cache_t *c = NULL;
    assert_int_equal(hvd__start_cache_open(dir, params, now, &c), HVD_OK);
    return c;
}

static void write_file(const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *read_all(void) {
    static char buf[8192];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void test_params_text(void **state) {
    (void)state;
    const char *nics[] = {"eth0", "10.0.0.0/8"};
    char *t = NULL;
    assert_int_equal(hvd__start_cache_params(4, "a:2,b:2", 2222, "/k", nics, 2, &t), HVD_OK);
    assert_string_equal(t, "4 a:2,b:2 2222 /k eth0,10.0.0.0/8");
    free(t);
    assert_int_equal(hvd__start_cache_params(1, NULL, 0, NULL, NULL, 0, &t), HVD_OK);
    assert_string_equal(t, "1  0  ");
    free(t);
    char out[8];
    assert_int_equal(hvd__start_cache_default_dir("", out, sizeof out), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__start_cache_default_dir("/a/very/long/home", out, sizeof out),
                     HVD_ERR_INVALID_ARG);
}

static void test_round_trip_and_modes(void **state) {
    (void)state;
    hvd_start_cache_t *c = open_cache("p1", T0);
    assert_null(hvd__start_cache_get(c, "k", T0));
    /* keys and values with spaces, newlines and '%' survive */
    assert_int_equal(hvd__start_cache_put(c, "k", "line one\nline two 100%", T0), HVD_OK);
    assert_int_equal(hvd__start_cache_put(c, "key with space", "v", T0), HVD_OK);
    hvd__start_cache_close(c);

    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* one line per entry, nothing left behind */
    const char *text = read_all();
    assert_int_equal(strncmp(text, "hvd-cache 1\nparams ", 19), 0);
    assert_null(strstr(text, "line one\n"));
    DIR *d = opendir(dir);
    int files = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        files += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(files, 1);

    c = open_cache("p1", T0 + 10);
    assert_string_equal(hvd__start_cache_get(c, "k", T0 + 10), "line one\nline two 100%");
    assert_string_equal(hvd__start_cache_get(c, "key with space", T0 + 10), "v");
    /* overwrite */
    assert_int_equal(hvd__start_cache_put(c, "k", "new", T0 + 20), HVD_OK);
    hvd__start_cache_close(c);
    c = open_cache("p1", T0 + 30);
    assert_string_equal(hvd__start_cache_get(c, "k", T0 + 30), "new");
    hvd__start_cache_close(c);
}

static void test_staleness(void **state) {
    (void)state;
    hvd_start_cache_t *c = open_cache("p1", T0);
    assert_int_equal(hvd__start_cache_put(c, "old", "1", T0), HVD_OK);
    assert_int_equal(hvd__start_cache_put(c, "young", "2", T0 + 1800), HVD_OK);
    hvd__start_cache_close(c);

    c = open_cache("p1", T0 + 3600);
    assert_string_equal(hvd__start_cache_get(c, "old", T0 + 3600), "1"); /* exactly 60 min */
    assert_null(hvd__start_cache_get(c, "old", T0 + 3601));
    assert_string_equal(hvd__start_cache_get(c, "young", T0 + 3601), "2");
    /* a time far in the future (the clock was set back since) is stale too */
    assert_null(hvd__start_cache_get(c, "young", T0 + 1800 - 3600));
    /* a write drops stale entries from the file */
    assert_int_equal(hvd__start_cache_put(c, "x", "3", T0 + 3601), HVD_OK);
    hvd__start_cache_close(c);
    const char *text = read_all();
    assert_null(strstr(text, "\nold "));
    assert_non_null(strstr(text, "\nyoung "));
}

static void test_params_change_discards(void **state) {
    (void)state;
    hvd_start_cache_t *c = open_cache("-np 4 -H a,b", T0);
    assert_int_equal(hvd__start_cache_put_ssh_ok(c, "a,b", T0), HVD_OK);
    assert_true(hvd__start_cache_get_ssh_ok(c, "a,b", T0));
    assert_false(hvd__start_cache_get_ssh_ok(c, "a,c", T0));
    hvd__start_cache_close(c);

    c = open_cache("-np 4 -H a,c", T0);
    assert_false(hvd__start_cache_get_ssh_ok(c, "a,b", T0));
    assert_int_equal(hvd__start_cache_put_ssh_ok(c, "a,c", T0), HVD_OK);
    hvd__start_cache_close(c);
    /* only one parameter set is kept */
    c = open_cache("-np 4 -H a,b", T0);
    assert_false(hvd__start_cache_get_ssh_ok(c, "a,b", T0));
    hvd__start_cache_close(c);
}

static void test_corrupt_file(void **state) {
    (void)state;
    hvd_start_cache_t *c = open_cache("p1", T0);
    assert_int_equal(hvd__start_cache_put(c, "k", "v", T0), HVD_OK);
    hvd__start_cache_close(c);
    char good[8192];
    snprintf(good, sizeof good, "%s", read_all());
    const char *hash_line = strstr(good, "params ");
    assert_non_null(hash_line);
    char params_line[80];
    snprintf(params_line, sizeof params_line, "%.71s", hash_line);

    char text[8192];
    const char *corrupt[] = {
        "",   "garbage", "hvd-cache 2\n", "hvd-cache 1\nparams 1234\n",
        NULL, /* good header, an entry without a time */
        NULL, /* good header, an entry with a bad escape */
        NULL, /* good header, no final newline */
    };
    for (size_t i = 0; i < sizeof corrupt / sizeof *corrupt; i++) {
        if (i == 4)
            snprintf(text, sizeof text, "hvd-cache 1\n%s\nk v\n", params_line);
        else if (i == 5)
            snprintf(text, sizeof text, "hvd-cache 1\n%s\nk %lld v%%zz\n", params_line,
                     (long long)T0);
        else if (i == 6)
            snprintf(text, sizeof text, "hvd-cache 1\n%s\nk %lld v", params_line, (long long)T0);
        else
            snprintf(text, sizeof text, "%s", corrupt[i]);
        write_file(text);
        c = open_cache("p1", T0);
        if (hvd__start_cache_get(c, "k", T0))
            fail_msg("corrupt file %zu was used", i);
        hvd__start_cache_close(c);
        /* rewritten as an empty, valid cache */
        const char *now = read_all();
        assert_int_equal(strncmp(now, "hvd-cache 1\nparams ", 19), 0);
        assert_null(strstr(now, "\nk "));
    }
    /* and the good file still reads */
    write_file(good);
    c = open_cache("p1", T0);
    assert_string_equal(hvd__start_cache_get(c, "k", T0), "v");
    hvd__start_cache_close(c);
}

static void test_discovery_result(void **state) {
    (void)state;
    hvd_disc_result_t r;
    memset(&r, 0, sizeof r);
    r.nic_count = 2;
    snprintf(r.nics[0], sizeof r.nics[0], "10.77.0.0/24");
    snprintf(r.nics[1], sizeof r.nics[1], "eth,0");
    snprintf(r.driver_addr, sizeof r.driver_addr, "10.77.0.1");
    snprintf(r.driver_iface, sizeof r.driver_iface, "br0");
    r.host_count = 2;
    r.hosts = calloc(2, sizeof *r.hosts);
    snprintf(r.hosts[0].host, sizeof r.hosts[0].host, "node a");
    snprintf(r.hosts[0].host_hash, sizeof r.hosts[0].host_hash, "node-0123");
    snprintf(r.hosts[0].iface, sizeof r.hosts[0].iface, "eth0");
    snprintf(r.hosts[0].addr, sizeof r.hosts[0].addr, "10.77.0.2");
    snprintf(r.hosts[1].host, sizeof r.hosts[1].host, "b=1");
    snprintf(r.hosts[1].host_hash, sizeof r.hosts[1].host_hash, "b-4567");
    snprintf(r.hosts[1].iface, sizeof r.hosts[1].iface, "enp1s0");
    snprintf(r.hosts[1].addr, sizeof r.hosts[1].addr, "10.77.0.3");
    snprintf(r.hosts[1].driver_iface, sizeof r.hosts[1].driver_iface, "enp1s0");

    hvd_start_cache_t *c = open_cache("p1", T0);
    hvd_disc_result_t got;
    assert_int_equal(hvd__start_cache_get_discovery(c, "a,b", T0, &got), HVD_ERR_NOT_FOUND);
    assert_int_equal(hvd__start_cache_put_discovery(c, "a,b", &r, T0), HVD_OK);
    hvd__start_cache_close(c);
    c = open_cache("p1", T0 + 60);
    assert_int_equal(hvd__start_cache_get_discovery(c, "a,b", T0 + 60, &got), HVD_OK);
    assert_int_equal(got.nic_count, 2);
    assert_string_equal(got.nics[0], "10.77.0.0/24");
    assert_string_equal(got.nics[1], "eth,0");
    assert_string_equal(got.driver_addr, "10.77.0.1");
    assert_string_equal(got.driver_iface, "br0");
    assert_int_equal(got.host_count, 2);
    assert_string_equal(got.hosts[0].host, "node a");
    assert_string_equal(got.hosts[0].driver_iface, "");
    assert_string_equal(got.hosts[1].host, "b=1");
    assert_string_equal(got.hosts[1].iface, "enp1s0");
    assert_string_equal(got.hosts[1].addr, "10.77.0.3");
    hvd__disc_result_fini(&got);
    /* for another host list, or stale: not found */
    assert_int_equal(hvd__start_cache_get_discovery(c, "a,c", T0 + 60, &got), HVD_ERR_NOT_FOUND);
    assert_int_equal(hvd__start_cache_get_discovery(c, "a,b", T0 + 3601, &got), HVD_ERR_NOT_FOUND);
    hvd__start_cache_close(c);

    /* malformed text forms */
    const char *bad[] = {"",
                         "nics= driver=1.2.3.4, host=a,b,c,1.2.3.4,",
                         "nics=lo driver=1.2.3.4,lo",
                         "nics=lo driver=x,lo host=a,b,c,1.2.3.4,",
                         "nics=lo driver=1.2.3.4,lo host=a,b,c,1.2.3.4",
                         "nics=lo driver=1.2.3.4,lo host=a,b,c,1.2.3.4, trailing",
                         "nics=lo driver=1.2.3.4,lo host=a,b,c,nope,",
                         "nics=l%0 driver=1.2.3.4,lo host=a,b,c,1.2.3.4,"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (hvd__disc_result_parse(bad[i], &got) == HVD_OK)
            fail_msg("'%s' parsed", bad[i]);
    char *text = NULL;
    assert_int_equal(hvd__disc_result_format(&r, &text), HVD_OK);
    assert_int_equal(hvd__disc_result_parse(text, &got), HVD_OK);
    hvd__disc_result_fini(&got);
    free(text);
    hvd__disc_result_fini(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params_text),
        cmocka_unit_test_setup_teardown(test_round_trip_and_modes, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_staleness, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_params_change_discards, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_corrupt_file, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_discovery_result, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
