/* Line splitting, tagging and --output-filename files (output.h). A whole line within one read is
 * passed on straight from the read buffer; only partial lines are copied, and a buffer grown past
 * 4 KiB is freed once its line is out, so thousands of idle ranks pin little memory. */
#include "runner/launch/output.h"

#include "common/clock.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long a console that returns EAGAIN (someone made it non-blocking) may take to accept a
 * line before the line is dropped: the launcher must not hang on a stuck reader. */
#define CONSOLE_WAIT_MS 10000
/* A partial-line buffer grown past this is released once its line is out, so that thousands of
 * idle streams do not each pin a long line's worth of memory. */
#define SPLITTER_KEEP_CAP 4096

/* ---- line splitting ------------------------------------------------------------------------ */

void hvd__lines_init(hvd_line_splitter_t *s, size_t max_line) {
    memset(s, 0, sizeof *s);
    s->max = max_line == 0 ? HVD_OUTPUT_MAX_LINE : max_line < 8 ? 8 : max_line;
}

void hvd__lines_fini(hvd_line_splitter_t *s) {
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}

static size_t find_eol(const char *d, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (d[i] == '\n' || d[i] == '\r')
            return i;
    return n;
}

/* Where to cut a full buffer into a piece: before a UTF-8 character that is still incomplete
 * at its end (its remaining bytes are in the next read), so that each piece is valid text. */
static size_t utf8_cut(const char *b, size_t len) {
    size_t j = len, cont = 0;
    while (cont < 3 && j > 0 && ((unsigned char)b[j - 1] & 0xC0) == 0x80) {
        j--;
        cont++;
    }
    if (j <= 1)
        return len;
    unsigned char lead = (unsigned char)b[j - 1];
    size_t need = (lead & 0xE0) == 0xC0   ? 2
                  : (lead & 0xF0) == 0xE0 ? 3
                  : (lead & 0xF8) == 0xF0 ? 4
                                          : 1;
    return need > cont + 1 ? j - 1 : len;
}

static int reserve(hvd_line_splitter_t *s, size_t need) {
    if (need <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap * 2 : 256;
    if (cap < need)
        cap = need;
    if (cap > s->max)
        cap = s->max;
    char *grown = realloc(s->buf, cap);
    if (!grown)
        return -1;
    s->buf = grown;
    s->cap = cap;
    return 0;
}

static void emit_buffer(hvd_line_splitter_t *s, size_t n, hvd_line_fn emit, void *arg) {
    emit(s->buf, n, arg);
    memmove(s->buf, s->buf + n, s->len - n);
    s->len -= n;
    if (s->len == 0 && s->cap > SPLITTER_KEEP_CAP) {
        free(s->buf);
        s->buf = NULL;
        s->cap = 0;
    }
}

hvd_status_t hvd__lines_feed(hvd_line_splitter_t *s, const char *data, size_t n, hvd_line_fn emit,
                             void *arg) {
    hvd_status_t st = HVD_OK;
    while (n > 0) {
        size_t eol = find_eol(data, n);
        int complete = eol < n;
        size_t take = complete ? eol + 1 : n;
        if (s->len == 0 && complete && take <= s->max) {
            emit(data, take, arg); /* the common case: a whole line, no copy */
            data += take;
            n -= take;
            continue;
        }
        size_t room = s->max - s->len;
        size_t chunk = take < room ? take : room;
        if (reserve(s, s->len + chunk) != 0) {
            /* No memory to wait for the line's end: forward what we have as pieces. */
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory buffering output");
            if (s->len)
                emit_buffer(s, s->len, emit, arg);
            emit(data, take, arg);
            data += take;
            n -= take;
            continue;
        }
        memcpy(s->buf + s->len, data, chunk);
        s->len += chunk;
        data += chunk;
        n -= chunk;
        if (complete && chunk == take)
            emit_buffer(s, s->len, emit, arg);
        else if (s->len == s->max)
            emit_buffer(s, utf8_cut(s->buf, s->len), emit, arg); /* too long: a piece */
    }
    return st;
}

void hvd__lines_flush(hvd_line_splitter_t *s, hvd_line_fn emit, void *arg) {
    if (s->len)
        emit_buffer(s, s->len, emit, arg);
}

/* ---- streams ------------------------------------------------------------------------------- */

void hvd__output_stream_init(hvd_output_stream_t *s, int rank, int is_stderr, int console_fd,
                             int file_fd, int timestamp) {
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->is_stderr = is_stderr;
    s->console_fd = console_fd;
    s->file_fd = file_fd;
    s->timestamp = timestamp;
    hvd__lines_init(&s->splitter, 0);
}

void hvd__output_stream_fini(hvd_output_stream_t *s) {
    hvd__lines_fini(&s->splitter);
    for (size_t i = 0; i < HVD_OUTPUT_TAIL_LINES; i++)
        free(s->tail[i]);
    free(s->tail_cr);
    if (s->file_fd >= 0)
        close(s->file_fd);
    memset(s, 0, sizeof *s);
    s->file_fd = -1;
    s->console_fd = -1;
}

size_t hvd__output_format_time(time_t t, char *out, size_t out_size) {
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    if (!localtime_r(&t, &tm))
        memset(&tm, 0, sizeof tm);
    /* asctime's "%.3s %.3s%3d %.2d:%.2d:%.2d %d", without its newline */
    int n = snprintf(out, out_size, "%s %s %2d %02d:%02d:%02d %d", days[tm.tm_wday % 7],
                     months[tm.tm_mon % 12], tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     tm.tm_year + 1900);
    return n < 0 ? 0 : (size_t)n >= out_size ? out_size - 1 : (size_t)n;
}

/* Write all of p; a non-blocking fd that stays full past the deadline fails. */
static int write_fully(int fd, const char *p, size_t n) {
    int64_t deadline = 0;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!deadline)
                deadline = hvd__clock_now_ms() + CONSOLE_WAIT_MS;
            int left = hvd__clock_remaining_ms(deadline);
            if (left == 0)
                return -1;
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, left);
            continue;
        }
        return -1; /* a closed console is not a reason to stop the job */
    }
    return 0;
}

static char *tail_copy(const char *line, size_t len) {
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (len > HVD_OUTPUT_TAIL_LINE_MAX)
        len = HVD_OUTPUT_TAIL_LINE_MAX;
    return strndup(line, len);
}

static void keep_tail(hvd_output_stream_t *s, const char *line, size_t len) {
    if (len && line[len - 1] == '\r') {
        /* a progress update: it only replaces the previous one */
        char *copy = tail_copy(line, len);
        if (copy && *copy) {
            free(s->tail_cr);
            s->tail_cr = copy;
        } else {
            free(copy);
        }
        return;
    }
    free(s->tail_cr);
    s->tail_cr = NULL;
    char *copy = tail_copy(line, len);
    if (!copy)
        return;
    free(s->tail[s->tail_next]);
    s->tail[s->tail_next] = copy;
    s->tail_next = (s->tail_next + 1) % HVD_OUTPUT_TAIL_LINES;
    if (s->tail_count < HVD_OUTPUT_TAIL_LINES)
        s->tail_count++;
}

/* One tagged line, to the console and the file, each with one write(). */
static void emit_tagged(const char *line, size_t len, void *arg) {
    hvd_output_stream_t *s = arg;
    char prefix[128];
    size_t pn = 0;
    if (s->rank >= 0) {
        if (s->timestamp)
            pn = hvd__output_format_time(s->clock ? s->clock() : time(NULL), prefix, sizeof prefix);
        int n = snprintf(prefix + pn, sizeof prefix - pn, "[%d]<%s>:", s->rank,
                         s->is_stderr ? "stderr" : "stdout");
        pn += n > 0 ? (size_t)n : 0;
    }
    char small[8192];
    char *buf = pn + len <= sizeof small ? small : malloc(pn + len);
    if (buf) {
        memcpy(buf, prefix, pn);
        memcpy(buf + pn, line, len);
    }
    int targets[2] = {s->console_fd, s->file_fd};
    for (size_t t = 0; t < 2; t++) {
        if (targets[t] < 0)
            continue;
        int rc;
        if (buf) {
            rc = write_fully(targets[t], buf, pn + len);
        } else {
            /* no memory for the joined line: two writes, still whole from this thread */
            rc = write_fully(targets[t], prefix, pn);
            if (rc == 0)
                rc = write_fully(targets[t], line, len);
        }
        if (rc != 0 && t == 0)
            s->lost_lines++;
    }
    if (buf != small)
        free(buf);
    if (s->is_stderr)
        keep_tail(s, line, len);
}

hvd_status_t hvd__output_stream_feed(hvd_output_stream_t *s, const char *data, size_t n) {
    return hvd__lines_feed(&s->splitter, data, n, emit_tagged, s);
}

void hvd__output_stream_eof(hvd_output_stream_t *s) {
    hvd__lines_flush(&s->splitter, emit_tagged, s);
}

size_t hvd__output_stream_write_tail(const hvd_output_stream_t *s, int fd, const char *indent) {
    size_t start = (s->tail_next + HVD_OUTPUT_TAIL_LINES - s->tail_count) % HVD_OUTPUT_TAIL_LINES;
    size_t total = s->tail_count + (s->tail_cr ? 1 : 0), written = 0;
    for (size_t i = 0; i < total; i++) {
        const char *line =
            i < s->tail_count ? s->tail[(start + i) % HVD_OUTPUT_TAIL_LINES] : s->tail_cr;
        size_t il = strlen(indent), ll = strlen(line);
        char *buf = malloc(il + ll + 1);
        if (!buf)
            continue;
        memcpy(buf, indent, il);
        memcpy(buf + il, line, ll);
        buf[il + ll] = '\n';
        if (write_fully(fd, buf, il + ll + 1) == 0)
            written++;
        free(buf);
    }
    return written;
}

/* ---- --output-filename ---------------------------------------------------------------------- */

int hvd__output_rank_width(int np) {
    int width = 1;
    for (int v = np - 1; v >= 10; v /= 10)
        width++;
    return width;
}

/* mkdir -p: every missing component of path, which the caller may modify temporarily. */
static hvd_status_t mkdir_p(char *path) {
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            hvd_status_t st =
                hvd__error_set(HVD_ERR_IO, "cannot create directory %s: %s", path, strerror(errno));
            *p = c;
            return st;
        }
        *p = c;
        if (!c)
            return HVD_OK;
    }
}

static int open_truncated(const char *path) {
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

hvd_status_t hvd__output_open_files(const char *dir, int rank, int np, int *out_fd_p,
                                    int *err_fd_p) {
    int width = hvd__output_rank_width(np);
    int n = snprintf(NULL, 0, "%s/rank.%0*d/stdout", dir, width, rank);
    char *path = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (!path)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory opening output files");
    int dir_len = snprintf(path, (size_t)n + 1, "%s/rank.%0*d", dir, width, rank);
    hvd_status_t st = mkdir_p(path);
    if (st != HVD_OK)
        goto err_free_path;
    snprintf(path + dir_len, (size_t)(n + 1 - dir_len), "/stdout");
    int out = open_truncated(path);
    if (out < 0)
        goto err_open;
    snprintf(path + dir_len, (size_t)(n + 1 - dir_len), "/stderr");
    int err = open_truncated(path);
    if (err < 0) {
        int e = errno;
        close(out);
        errno = e;
        goto err_open;
    }
    free(path);
    *out_fd_p = out;
    *err_fd_p = err;
    return HVD_OK;

err_open:
    st = hvd__error_set(HVD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
err_free_path:
    free(path);
    return st;
}
