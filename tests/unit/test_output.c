/* Output forwarding: the line splitter on its own, then every prefixing case of Horovod's
 * test_run.py through a stream, streaming visibility, one write per tagged line, bounded long
 * lines, timestamps from an injected clock, stderr tails, and --output-filename directories and
 * padding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runner/launch/output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the splitter alone ---- */

typedef struct {
    char *lines[64];
    size_t lens[64];
    size_t n;
} collected_t;

static void collect(const char *line, size_t len, void *arg) {
    collected_t *c = arg;
    assert_true(c->n < 64);
    c->lines[c->n] = malloc(len + 1);
    memcpy(c->lines[c->n], line, len);
    c->lines[c->n][len] = '\0';
    c->lens[c->n++] = len;
}

static void collected_free(collected_t *c) {
    for (size_t i = 0; i < c->n; i++)
        free(c->lines[i]);
    c->n = 0;
}

static void test_splitter(void **state) {
    (void)state;
    hvd_line_splitter_t s;
    collected_t c = {0};
    hvd__lines_init(&s, 0);
    assert_int_equal(s.max, HVD_OUTPUT_MAX_LINE);
    /* '\n' and '\r' both end a line and stay with it; pieces join across feeds */
    const char *in = "a\nbb\rccc";
    assert_int_equal(hvd__lines_feed(&s, in, strlen(in), collect, &c), 0);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.lines[0], "a\n");
    assert_string_equal(c.lines[1], "bb\r");
    assert_int_equal(hvd__lines_feed(&s, "c", 1, collect, &c), 0);
    assert_int_equal(c.n, 2); /* nothing for a partial line */
    assert_int_equal(hvd__lines_feed(&s, "\r\n", 2, collect, &c), 0);
    assert_int_equal(c.n, 4); /* "\r\n" is two ends: the second line is empty */
    assert_string_equal(c.lines[2], "cccc\r");
    assert_string_equal(c.lines[3], "\n");
    /* a NUL byte is data like any other */
    assert_int_equal(hvd__lines_feed(&s, "x\0y\n", 4, collect, &c), 0);
    assert_int_equal(c.lens[4], 4);
    assert_memory_equal(c.lines[4], "x\0y\n", 4);
    /* end of stream: the partial line, without adding anything; then nothing more */
    hvd__lines_feed(&s, "tail", 4, collect, &c);
    hvd__lines_flush(&s, collect, &c);
    assert_string_equal(c.lines[5], "tail");
    hvd__lines_flush(&s, collect, &c);
    assert_int_equal(c.n, 6);
    collected_free(&c);
    hvd__lines_fini(&s);
}

static void test_splitter_bound(void **state) {
    (void)state;
    hvd_line_splitter_t s;
    collected_t c = {0};
    hvd__lines_init(&s, 8);
    /* longer than the bound: pieces of 8, then the rest with its end */
    const char *in = "0123456789abcdefghij\n";
    hvd__lines_feed(&s, in, strlen(in), collect, &c);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.lines[0], "01234567");
    assert_string_equal(c.lines[1], "89abcdef");
    assert_string_equal(c.lines[2], "ghij\n");
    assert_true(s.cap <= 8);
    collected_free(&c);
    /* a piece never ends inside a UTF-8 character: "abc" + three 3-byte characters */
    const char *u = "abc\xe2\x9c\x85\xe2\x9c\x85\xe2\x9c\x85\n";
    hvd__lines_feed(&s, u, strlen(u), collect, &c);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.lines[0], "abc\xe2\x9c\x85");
    assert_string_equal(c.lines[1], "\xe2\x9c\x85\xe2\x9c\x85\n");
    collected_free(&c);
    /* byte by byte gives the same pieces */
    for (size_t i = 0; in[i]; i++)
        hvd__lines_feed(&s, in + i, 1, collect, &c);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.lines[2], "ghij\n");
    collected_free(&c);
    hvd__lines_fini(&s);
}

/* ---- streams ---- */

static time_t fake_now;
static time_t ticking_clock(void) {
    return fake_now++;
}

/* Run pieces through a stream for rank (123 in Horovod's tests) and return what reached the
 * console (a memory file, not a pipe: the output may exceed a pipe's buffer). */
static char *forward_rank(int rank, const char *const *pieces, size_t n, int timestamp,
                          int is_stderr) {
    int fd = memfd_create("console", MFD_CLOEXEC);
    assert_true(fd >= 0);
    hvd_output_stream_t s;
    hvd__output_stream_init(&s, rank, is_stderr, fd, -1, timestamp);
    fake_now = 1579521601; /* Mon Jan 20 12:00:01 2020 UTC */
    s.clock = ticking_clock;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(hvd__output_stream_feed(&s, pieces[i], strlen(pieces[i])), 0);
    hvd__output_stream_eof(&s);
    hvd__output_stream_fini(&s);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char *buf = malloc((size_t)st.st_size + 1);
    ssize_t total = pread(fd, buf, (size_t)st.st_size, 0);
    close(fd);
    buf[total > 0 ? total : 0] = '\0';
    return buf;
}

static char *forward(const char *const *pieces, size_t n, int timestamp, int is_stderr) {
    return forward_rank(123, pieces, n, timestamp, is_stderr);
}

static void expect_forward(const char *input, int timestamp, const char *expected) {
    const char *pieces[] = {input};
    char *out = forward(pieces, 1, timestamp, 0);
    assert_string_equal(out, expected);
    free(out);
}

static void test_prefix_cases(void **state) {
    (void)state;
    expect_forward("first line\nsecond line\nmore lines\n", 0,
                   "[123]<stdout>:first line\n[123]<stdout>:second line\n"
                   "[123]<stdout>:more lines\n");
    /* without trailing newline: the last line is prefixed, no newline added */
    expect_forward("first line\nsecond line\nmore lines", 0,
                   "[123]<stdout>:first line\n[123]<stdout>:second line\n"
                   "[123]<stdout>:more lines");
    expect_forward("first line\rfirst line again\nsecond line\n", 0,
                   "[123]<stdout>:first line\r[123]<stdout>:first line again\n"
                   "[123]<stdout>:second line\n");
    /* unicode lines, bytes intact */
    expect_forward("\xe2\x88\x80\xe2\x88\x81\xe2\x88\x82\xe2\x88\x83\n"
                   "\xe2\x8c\x9a\xe2\x8c\x9b\xe2\x9b\x84\xe2\x9c\x85\n",
                   0,
                   "[123]<stdout>:\xe2\x88\x80\xe2\x88\x81\xe2\x88\x82\xe2\x88\x83\n"
                   "[123]<stdout>:\xe2\x8c\x9a\xe2\x8c\x9b\xe2\x9b\x84\xe2\x9c\x85\n");
    /* stderr is tagged as such */
    const char *err[] = {"oops\n"};
    char *out = forward(err, 1, 0, 1);
    assert_string_equal(out, "[123]<stderr>:oops\n");
    free(out);
}

static void test_timestamps(void **state) {
    (void)state;
    setenv("TZ", "UTC", 1);
    tzset();
    /* one timestamp per line, from the clock at the time the line is written */
    expect_forward("first line\nsecond line\nmore lines\n", 1,
                   "Mon Jan 20 12:00:01 2020[123]<stdout>:first line\n"
                   "Mon Jan 20 12:00:02 2020[123]<stdout>:second line\n"
                   "Mon Jan 20 12:00:03 2020[123]<stdout>:more lines\n");
    expect_forward("first line\rfirst line again\n", 1,
                   "Mon Jan 20 12:00:01 2020[123]<stdout>:first line\r"
                   "Mon Jan 20 12:00:02 2020[123]<stdout>:first line again\n");
    /* asctime's layout: the day of the month padded with a space */
    char buf[64];
    assert_int_equal(hvd__output_format_time(1578312000, buf, sizeof buf), 24);
    assert_string_equal(buf, "Mon Jan  6 12:00:00 2020");
    struct tm tm;
    char ref[64];
    time_t t = 1700000000;
    hvd__output_format_time(t, buf, sizeof buf);
    asctime_r(localtime_r(&t, &tm), ref);
    ref[strlen(ref) - 1] = '\0';
    assert_string_equal(buf, ref);
}

static void test_no_prefix(void **state) {
    (void)state;
    /* index None: output identical to input, with or without '\r', with or without timestamp */
    const char *inputs[] = {"first line\nsecond line\nmore lines",
                            "first line\rfirst line again\nsecond line\n"};
    for (size_t i = 0; i < 2; i++)
        for (int ts = 0; ts < 2; ts++) {
            const char *pieces[] = {inputs[i]};
            char *out = forward_rank(-1, pieces, 1, ts, 0);
            assert_string_equal(out, inputs[i]);
            free(out);
        }
}

static void test_multibyte_blocks(void **state) {
    (void)state;
    /* lines of 6000 three-byte characters: each prefixed once, intact */
    size_t chars = 6000, n = chars * 3, lines = 3;
    char *text = malloc(lines * (n + 1) + 1), *t = text;
    for (size_t l = 0; l < lines; l++) {
        const char *ch = l % 2 ? "\xe2\x96\x88" : "\xe2\x9c\x85";
        for (size_t i = 0; i < chars; i++, t += 3)
            memcpy(t, ch, 3);
        *t++ = '\n';
    }
    *t = '\0';
    /* fed in reads of 1000 bytes, as Horovod reads, splitting characters */
    const char *pieces[64];
    char *copies[64];
    size_t np = 0;
    for (size_t off = 0; off < strlen(text); off += 1000, np++) {
        copies[np] = strndup(text + off, 1000);
        pieces[np] = copies[np];
    }
    char *out = forward(pieces, np, 0, 0);
    assert_int_equal(strlen(out), lines * (14 + n + 1));
    for (size_t l = 0; l < lines; l++) {
        const char *line = out + l * (14 + n + 1);
        assert_memory_equal(line, "[123]<stdout>:", 14);
        assert_memory_equal(line + 14, text + l * (n + 1), n + 1);
    }
    for (size_t i = 0; i < np; i++)
        free(copies[i]);
    free(out);
    free(text);
}

static void test_long_line_bound(void **state) {
    (void)state;
    /* a line over the bound arrives in tagged pieces; nothing is lost */
    size_t big = HVD_OUTPUT_MAX_LINE + 100;
    char *huge = malloc(big + 2);
    memset(huge, 'x', big);
    huge[big] = '\n';
    huge[big + 1] = '\0';
    const char *hp[] = {"ab", huge, "next\n"};
    char *out = forward(hp, 3, 0, 0);
    assert_int_equal(strlen(out), 3 * 14 + big + 2 + 1 + 5);
    assert_memory_equal(out, "[123]<stdout>:abxx", 18);
    assert_memory_equal(out + 14 + HVD_OUTPUT_MAX_LINE, "[123]<stdout>:xx", 16);
    assert_string_equal(out + strlen(out) - 20, "\n[123]<stdout>:next\n");
    free(out);
    free(huge);
}

static void test_streaming(void **state) {
    (void)state;
    /* test_prefix_connection_does_stream: after every '\r' or '\n' the reader sees the line at
     * once, and nothing of a partial line */
    int fds[2];
    assert_int_equal(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    hvd_output_stream_t s;
    hvd__output_stream_init(&s, 123, 0, fds[1], -1, 0);
    const struct {
        const char *in, *visible;
    } steps[] = {
        {"first line\r", "[123]<stdout>:first line\r"},
        {"first ", ""},
        {"line ", ""},
        {"again\n", "[123]<stdout>:first line again\n"},
        {"second line\nmore ", "[123]<stdout>:second line\n"},
        {"lines", ""},
    };
    char buf[256];
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        assert_int_equal(hvd__output_stream_feed(&s, steps[i].in, strlen(steps[i].in)), 0);
        ssize_t n = read(fds[0], buf, sizeof buf - 1);
        buf[n > 0 ? n : 0] = '\0';
        assert_string_equal(buf, steps[i].visible);
    }
    hvd__output_stream_eof(&s);
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    assert_string_equal(buf, "[123]<stdout>:more lines");
    hvd__output_stream_fini(&s);
    close(fds[0]);
    close(fds[1]);
}

static void test_one_write_per_line(void **state) {
    (void)state;
    /* A SOCK_SEQPACKET socket keeps write boundaries: each message received is one write().
     * Every tagged line, short or long, must be exactly one. */
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
    int sz = 1 << 20;
    setsockopt(sp[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(sp[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    hvd_output_stream_t s;
    hvd__output_stream_init(&s, 7, 1, sp[0], -1, 0);
    size_t long_len = 20000;
    char *long_line = malloc(long_len + 1);
    memset(long_line, 'y', long_len - 1);
    long_line[long_len - 1] = '\n';
    long_line[long_len] = '\0';
    hvd__output_stream_feed(&s, "short\nsplit ", 12);
    hvd__output_stream_feed(&s, "line\n", 5);
    hvd__output_stream_feed(&s, long_line, long_len);
    char *msg = malloc(long_len + 64);
    ssize_t n = recv(sp[1], msg, long_len + 64, MSG_DONTWAIT);
    assert_int_equal(n, 18);
    assert_memory_equal(msg, "[7]<stderr>:short\n", 18);
    n = recv(sp[1], msg, long_len + 64, MSG_DONTWAIT);
    assert_int_equal(n, 12 + 11);
    assert_memory_equal(msg, "[7]<stderr>:split line\n", 23);
    n = recv(sp[1], msg, long_len + 64, MSG_DONTWAIT);
    assert_int_equal(n, 12 + (ssize_t)long_len);
    assert_memory_equal(msg + 12, long_line, long_len);
    hvd__output_stream_fini(&s);
    free(msg);
    free(long_line);
    close(sp[0]);
    close(sp[1]);
}

static char *read_fd_text(int fd) {
    static char buf[8192];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void test_tail(void **state) {
    (void)state;
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    hvd_output_stream_t s;
    hvd__output_stream_init(&s, 0, 1, devnull, -1, 0);
    for (int i = 0; i < 25; i++) {
        char line[32];
        int n = snprintf(line, sizeof line, "line %d\n", i);
        hvd__output_stream_feed(&s, line, (size_t)n);
    }
    int fd = memfd_create("tail", MFD_CLOEXEC);
    assert_int_equal(hvd__output_stream_write_tail(&s, fd, "  "), HVD_OUTPUT_TAIL_LINES);
    char *text = read_fd_text(fd);
    assert_true(strncmp(text, "  line 15\n", 10) == 0);
    assert_non_null(strstr(text, "  line 24\n"));
    assert_null(strstr(text, "line 14"));
    close(fd);
    /* progress updates ('\r') keep only the latest, and a final line replaces them */
    const char *bar = "\r 10%\r 20%\r 30%";
    hvd__output_stream_feed(&s, bar, strlen(bar));
    fd = memfd_create("tail", MFD_CLOEXEC);
    hvd__output_stream_write_tail(&s, fd, "");
    text = read_fd_text(fd);
    assert_non_null(strstr(text, "line 24\n 20%\n"));
    assert_null(strstr(text, "10%"));
    close(fd);
    hvd__output_stream_eof(&s); /* " 30%" at end of stream is an ordinary last line */
    fd = memfd_create("tail", MFD_CLOEXEC);
    hvd__output_stream_write_tail(&s, fd, "");
    text = read_fd_text(fd);
    assert_non_null(strstr(text, "line 24\n 30%\n"));
    assert_null(strstr(text, "20%"));
    close(fd);
    hvd__output_stream_fini(&s);
    /* stdout keeps no tail; a long stderr line is kept cut to the bound */
    hvd__output_stream_init(&s, 0, 0, devnull, -1, 0);
    hvd__output_stream_feed(&s, "x\n", 2);
    assert_int_equal(s.tail_count, 0);
    hvd__output_stream_fini(&s);
    hvd__output_stream_init(&s, 0, 1, devnull, -1, 0);
    char *lng = malloc(5001);
    memset(lng, 'z', 5000);
    lng[5000] = '\n';
    hvd__output_stream_feed(&s, lng, 5001);
    assert_int_equal(strlen(s.tail[0]), HVD_OUTPUT_TAIL_LINE_MAX);
    free(lng);
    hvd__output_stream_fini(&s);
    close(devnull);
}

static int exists(const char *dir, const char *sub) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    return access(path, F_OK) == 0;
}

static void test_rank_dirs(void **state) {
    (void)state;
    assert_int_equal(hvd__output_rank_width(1), 1);
    assert_int_equal(hvd__output_rank_width(2), 1);
    assert_int_equal(hvd__output_rank_width(10), 1);
    assert_int_equal(hvd__output_rank_width(11), 2);
    assert_int_equal(hvd__output_rank_width(100), 2);
    assert_int_equal(hvd__output_rank_width(101), 3);
    char dir[] = "/tmp/hvd-out-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[128];
    snprintf(sub, sizeof sub, "%s/a/b", dir); /* parents are created */
    const struct {
        int np, rank;
        const char *name;
    } cases[] = {{1, 0, "rank.0"},      {10, 0, "rank.0"},   {10, 9, "rank.9"},
                 {11, 0, "rank.00"},    {11, 10, "rank.10"}, {101, 5, "rank.005"},
                 {101, 100, "rank.100"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int o, e;
        assert_int_equal(hvd__output_open_files(sub, cases[i].rank, cases[i].np, &o, &e), 0);
        close(o);
        close(e);
        char name[64];
        snprintf(name, sizeof name, "%s/stdout", cases[i].name);
        assert_true(exists(sub, name));
        snprintf(name, sizeof name, "%s/stderr", cases[i].name);
        assert_true(exists(sub, name));
    }
    /* the file gets the same tagged lines as the console; files are truncated on open */
    int o, e;
    assert_int_equal(hvd__output_open_files(sub, 3, 4, &o, &e), 0);
    assert_int_equal(write(o, "stale stale stale\n", 18), 18);
    close(o);
    close(e);
    assert_int_equal(hvd__output_open_files(sub, 3, 4, &o, &e), 0);
    int console = memfd_create("console", MFD_CLOEXEC);
    hvd_output_stream_t s;
    hvd__output_stream_init(&s, 3, 0, console, o, 0);
    hvd__output_stream_feed(&s, "to both\npartial", 15);
    hvd__output_stream_eof(&s);
    char expected[] = "[3]<stdout>:to both\n[3]<stdout>:partial";
    assert_string_equal(read_fd_text(console), expected);
    hvd__output_stream_fini(&s); /* closes o */
    char path[160];
    snprintf(path, sizeof path, "%s/rank.3/stdout", sub);
    int rd = open(path, O_RDONLY | O_CLOEXEC);
    assert_string_equal(read_fd_text(rd), expected);
    close(rd);
    close(e);
    close(console);
    /* a path that cannot be a directory is an error naming it */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/a/b/rank.3/stdout", dir);
    assert_int_equal(hvd__output_open_files(bad, 0, 1, &o, &e), HVD_ERR_IO);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splitter),           cmocka_unit_test(test_splitter_bound),
        cmocka_unit_test(test_prefix_cases),       cmocka_unit_test(test_timestamps),
        cmocka_unit_test(test_no_prefix),          cmocka_unit_test(test_multibyte_blocks),
        cmocka_unit_test(test_long_line_bound),    cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_one_write_per_line), cmocka_unit_test(test_tail),
        cmocka_unit_test(test_rank_dirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
