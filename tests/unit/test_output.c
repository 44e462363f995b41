/* Output forwarding: the prefixing cases of Horovod's test_run.py (reference 3.5), streaming,
 * bounded long lines, timestamps, tails and --output-filename padding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runner/output.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Run input through a stream for rank 123 and return what reached the console. */
static char *forward(const char *const *pieces, size_t n, int timestamp, int is_stderr) {
    /* a memory file, not a pipe: the output may exceed a pipe's buffer */
    int fd = memfd_create("console", MFD_CLOEXEC);
    assert_true(fd >= 0);
    hvd_output_stream_t s;
    hvd__output_stream_init(&s, 123, is_stderr, fd, -1, timestamp);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(hvd__output_stream_feed(&s, pieces[i], strlen(pieces[i])), 0);
    hvd__output_stream_eof(&s);
    hvd__output_stream_fini(&s);
    static char buf[1 << 20];
    ssize_t total = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    buf[total > 0 ? total : 0] = '\0';
    return buf;
}

static void test_prefix_cases(void **state) {
    (void)state;
    const char *a[] = {"first line\nsecond line\nmore lines\n"};
    assert_string_equal(forward(a, 1, 0, 0), "[123]<stdout>:first line\n[123]<stdout>:second line\n"
                                             "[123]<stdout>:more lines\n");
    const char *b[] = {"first line\nsecond line\nmore lines"};
    assert_string_equal(forward(b, 1, 0, 1), "[123]<stderr>:first line\n[123]<stderr>:second line\n"
                                             "[123]<stderr>:more lines");
    const char *c[] = {"first line\rfirst line again\nsecond line\n"};
    assert_string_equal(forward(c, 1, 0, 0),
                        "[123]<stdout>:first line\r[123]<stdout>:first line again\n"
                        "[123]<stdout>:second line\n");
    const char *u[] = {"\xe2\x88\x80\xe2\x88\x81\n\xe2\x8c\x9a\xe2\x8c\x9b\n"};
    assert_string_equal(forward(u, 1, 0, 0), "[123]<stdout>:\xe2\x88\x80\xe2\x88\x81\n"
                                             "[123]<stdout>:\xe2\x8c\x9a\xe2\x8c\x9b\n");
    /* pieces splitting lines (and multibyte characters) anywhere */
    const char *p[] = {"first line\r",       "first ", "line ",    "again\n",
                       "second line\nmore ", "lines",  "\xe2\x88", "\x80\n"};
    assert_string_equal(forward(p, 8, 0, 0),
                        "[123]<stdout>:first line\r[123]<stdout>:first line again\n"
                        "[123]<stdout>:second line\n[123]<stdout>:more lines\xe2\x88\x80\n");
}

static void test_long_lines(void **state) {
    (void)state;
    /* 6000 three-byte characters per line, two lines: each prefixed once, intact */
    size_t n = 6000 * 3;
    char *text = malloc(2 * (n + 1) + 1), *t = text;
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < 6000; i++, t += 3)
            memcpy(t, "\xe2\x9c\x85", 3);
        *t++ = '\n';
    }
    *t = '\0';
    const char *pieces[] = {text};
    char *out = forward(pieces, 1, 0, 0);
    assert_int_equal(strlen(out), 2 * (14 + n + 1));
    assert_memory_equal(out, "[123]<stdout>:", 14);
    assert_memory_equal(out + 14 + n + 1, "[123]<stdout>:", 14);
    free(text);
    /* a line over the bound arrives in tagged pieces; nothing is lost */
    size_t big = HVD_OUTPUT_MAX_LINE + 100;
    char *huge = malloc(big + 1);
    memset(huge, 'x', big);
    huge[big] = '\0';
    const char *hp[] = {"ab", huge};
    out = forward(hp, 2, 0, 0);
    assert_int_equal(strlen(out), 2 * 14 + big + 2);
    assert_memory_equal(out + 14 + HVD_OUTPUT_MAX_LINE, "[123]<stdout>:", 14);
    free(huge);
}

static time_t fixed_clock(void) {
    return 1579521601; /* Mon Jan 20 12:00:01 2020 UTC */
}

static void test_timestamp(void **state) {
    (void)state;
    setenv("TZ", "UTC", 1);
    tzset();
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    hvd_output_stream_t s;
    hvd__output_stream_init(&s, 123, 0, fds[1], -1, 1);
    s.clock = fixed_clock;
    hvd__output_stream_feed(&s, "first line\n", 11);
    hvd__output_stream_fini(&s);
    close(fds[1]);
    char buf[256] = "";
    ssize_t r = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    buf[r > 0 ? r : 0] = '\0';
    assert_string_equal(buf, "Mon Jan 20 12:00:01 2020[123]<stdout>:first line\n");
}

static void test_tail(void **state) {
    (void)state;
    int devnull = open("/dev/null", O_WRONLY);
    hvd_output_stream_t s;
    hvd__output_stream_init(&s, 0, 1, devnull, -1, 0);
    for (int i = 0; i < 25; i++) {
        char line[32];
        int n = snprintf(line, sizeof line, "line %d\n", i);
        hvd__output_stream_feed(&s, line, (size_t)n);
    }
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    hvd__output_stream_write_tail(&s, fds[1], "  ");
    close(fds[1]);
    char buf[1024] = "";
    ssize_t r = read(fds[0], buf, sizeof buf - 1);
    buf[r > 0 ? r : 0] = '\0';
    close(fds[0]);
    assert_true(strncmp(buf, "  line 15\n", 10) == 0);
    assert_non_null(strstr(buf, "  line 24\n"));
    assert_null(strstr(buf, "line 14"));
    hvd__output_stream_fini(&s);
    close(devnull);
}

static void test_rank_dirs(void **state) {
    (void)state;
    assert_int_equal(hvd__output_rank_width(1), 1);
    assert_int_equal(hvd__output_rank_width(10), 1);
    assert_int_equal(hvd__output_rank_width(11), 2);
    assert_int_equal(hvd__output_rank_width(101), 3);
    char dir[] = "/tmp/hvd-out-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[128];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    int o, e;
    assert_int_equal(hvd__output_open_files(sub, 5, 101, &o, &e), 0);
    assert_int_equal(write(o, "x", 1), 1);
    close(o);
    close(e);
    char path[256];
    snprintf(path, sizeof path, "%s/rank.005/stdout", sub);
    assert_int_equal(access(path, R_OK), 0);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_cases), cmocka_unit_test(test_long_lines),
        cmocka_unit_test(test_timestamp),    cmocka_unit_test(test_tail),
        cmocka_unit_test(test_rank_dirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
