#include "runner/output.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

void hvd__lines_init(hvd_line_splitter_t *s) {
    s->buf = NULL;
    s->len = 0;
}

void hvd__lines_fini(hvd_line_splitter_t *s) {
    free(s->buf);
    s->buf = NULL;
    s->len = 0;
}

hvd_status_t hvd__lines_feed(hvd_line_splitter_t *s, const char *data, size_t n, hvd_line_fn emit,
                             void *arg) {
    while (n > 0) {
        size_t i = 0;
        while (i < n && data[i] != '\n' && data[i] != '\r')
            i++;
        int complete = i < n;
        size_t take = complete ? i + 1 : i;
        if (s->len == 0 && complete) {
            emit(data, take, arg); /* the common case: no copy */
        } else {
            /* bound the partial line: flush a full buffer as a piece of its own */
            while (s->len + take > HVD_OUTPUT_MAX_LINE) {
                size_t room = HVD_OUTPUT_MAX_LINE - s->len;
                if (!s->buf && !(s->buf = malloc(HVD_OUTPUT_MAX_LINE)))
                    return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory buffering output");
                memcpy(s->buf + s->len, data, room);
                emit(s->buf, HVD_OUTPUT_MAX_LINE, arg);
                s->len = 0;
                data += room;
                n -= room;
                take -= room;
            }
            if (!s->buf && !(s->buf = malloc(HVD_OUTPUT_MAX_LINE)))
                return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory buffering output");
            memcpy(s->buf + s->len, data, take);
            s->len += take;
            if (complete) {
                emit(s->buf, s->len, arg);
                s->len = 0;
            }
        }
        data += take;
        n -= take;
    }
    return HVD_OK;
}

void hvd__lines_flush(hvd_line_splitter_t *s, hvd_line_fn emit, void *arg) {
    if (s->len) {
        emit(s->buf, s->len, arg);
        s->len = 0;
    }
}

void hvd__output_stream_init(hvd_output_stream_t *s, int rank, int is_stderr, int console_fd,
                             int file_fd, int timestamp) {
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->is_stderr = is_stderr;
    s->console_fd = console_fd;
    s->file_fd = file_fd;
    s->timestamp = timestamp;
    hvd__lines_init(&s->splitter);
}

void hvd__output_stream_fini(hvd_output_stream_t *s) {
    hvd__lines_fini(&s->splitter);
    for (size_t i = 0; i < HVD_OUTPUT_TAIL_LINES; i++)
        free(s->tail[i]);
    if (s->file_fd >= 0)
        close(s->file_fd);
    memset(s, 0, sizeof *s);
    s->file_fd = -1;
}

static void write_all_v(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* a closed console is not a reason to stop the job */
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++, n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

static void keep_tail(hvd_output_stream_t *s, const char *line, size_t len) {
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (len > 512)
        len = 512;
    char *copy = strndup(line, len);
    if (!copy)
        return;
    free(s->tail[s->tail_next]);
    s->tail[s->tail_next] = copy;
    s->tail_next = (s->tail_next + 1) % HVD_OUTPUT_TAIL_LINES;
    if (s->tail_count < HVD_OUTPUT_TAIL_LINES)
        s->tail_count++;
}

static void emit_tagged(const char *line, size_t len, void *arg) {
    hvd_output_stream_t *s = arg;
    char prefix[96];
    size_t pn = 0;
    if (s->timestamp) {
        time_t now = s->clock ? s->clock() : time(NULL);
        struct tm tm;
        char stamp[32];
        localtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%a %b %e %H:%M:%S %Y", &tm);
        pn = (size_t)snprintf(prefix, sizeof prefix, "%s", stamp);
    }
    pn += (size_t)snprintf(prefix + pn, sizeof prefix - pn, "[%d]<%s>:", s->rank,
                           s->is_stderr ? "stderr" : "stdout");
    struct iovec iov[2] = {{prefix, pn}, {(void *)line, len}};
    write_all_v(s->console_fd, iov, 2);
    if (s->file_fd >= 0) {
        struct iovec fiov[2] = {{prefix, pn}, {(void *)line, len}};
        write_all_v(s->file_fd, fiov, 2);
    }
    if (s->is_stderr)
        keep_tail(s, line, len);
}

hvd_status_t hvd__output_stream_feed(hvd_output_stream_t *s, const char *data, size_t n) {
    return hvd__lines_feed(&s->splitter, data, n, emit_tagged, s);
}

void hvd__output_stream_eof(hvd_output_stream_t *s) {
    hvd__lines_flush(&s->splitter, emit_tagged, s);
}

void hvd__output_stream_write_tail(const hvd_output_stream_t *s, int fd, const char *indent) {
    size_t start = (s->tail_next + HVD_OUTPUT_TAIL_LINES - s->tail_count) % HVD_OUTPUT_TAIL_LINES;
    for (size_t i = 0; i < s->tail_count; i++) {
        const char *line = s->tail[(start + i) % HVD_OUTPUT_TAIL_LINES];
        struct iovec iov[3] = {
            {(void *)indent, strlen(indent)}, {(void *)line, strlen(line)}, {"\n", 1}};
        write_all_v(fd, iov, 3);
    }
}

int hvd__output_rank_width(int np) {
    int width = 1;
    for (int v = np - 1; v >= 10; v /= 10)
        width++;
    return width;
}

static hvd_status_t mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "output path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return hvd__error_set(HVD_ERR_IO, "cannot create directory %s: %s", buf,
                                      strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    return HVD_OK;
}

hvd_status_t hvd__output_open_files(const char *dir, int rank, int np, int *out_fd_p,
                                    int *err_fd_p) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rank.%0*d", dir, hvd__output_rank_width(np), rank);
    hvd_status_t st = mkdir_p(path);
    if (st != HVD_OK)
        return st;
    size_t n = strlen(path);
    snprintf(path + n, sizeof path - n, "/stdout");
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0)
        return hvd__error_set(HVD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    snprintf(path + n, sizeof path - n, "/stderr");
    int err = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (err < 0) {
        close(out);
        return hvd__error_set(HVD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    *out_fd_p = out;
    *err_fd_p = err;
    return HVD_OK;
}
