/* The log writer (log.h): each line is formatted in a 2 KiB stack buffer (a longer message is cut,
 * its newline kept) and sent with a single write() to the descriptor of its level's class. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

hvd_log_level_t hvd__log_threshold = HVD_LOG_WARNING;
static int log_hide_time;
static int log_rank = -1;
static int log_out_fd = STDOUT_FILENO;
static int log_err_fd = STDERR_FILENO;

static const char *const level_names[] = {"trace", "debug", "info", "warning", "error", "fatal"};
static const char level_letters[] = "TDIWEF";

int hvd__log_level_parse(const char *text, hvd_log_level_t *level_p) {
    for (int i = 0; i <= HVD_LOG_FATAL; i++) {
        if (strcasecmp(text, level_names[i]) == 0) {
            *level_p = (hvd_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

void hvd__log_configure(hvd_log_level_t threshold, int hide_time, int rank) {
    hvd__log_threshold = threshold;
    log_hide_time = hide_time;
    log_rank = rank;
}

void hvd__log_set_fds(int out_fd, int err_fd) {
    log_out_fd = out_fd;
    log_err_fd = err_fd;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

void hvd__log_write(hvd_log_level_t level, const char *file, int line, const char *fmt, ...) {
    char buf[2048];
    size_t n = 0;
    int w;
    if (level < HVD_LOG_TRACE || level > HVD_LOG_FATAL)
        level = HVD_LOG_ERROR;
    if (!log_hide_time) {
        struct timeval tv;
        struct tm tm;
        gettimeofday(&tv, NULL);
        localtime_r(&tv.tv_sec, &tm);
        n = strftime(buf, sizeof buf, "[%Y-%m-%d %H:%M:%S", &tm);
        w = snprintf(buf + n, sizeof buf - n, ".%06ld: %c %s:%d] ", (long)tv.tv_usec,
                     level_letters[level], base_name(file), line);
    } else {
        w = snprintf(buf, sizeof buf, "[%c %s:%d] ", level_letters[level], base_name(file), line);
    }
    if (w > 0)
        n += (size_t)w;
    if (log_rank >= 0 && n < sizeof buf) {
        w = snprintf(buf + n, sizeof buf - n, "[%d]: ", log_rank);
        if (w > 0)
            n += (size_t)w;
    }
    if (n < sizeof buf) {
        va_list ap;
        va_start(ap, fmt);
        w = vsnprintf(buf + n, sizeof buf - n, fmt, ap);
        va_end(ap);
        if (w > 0)
            n += (size_t)w;
    }
    if (n > sizeof buf - 2)
        n = sizeof buf - 2; /* truncated: keep room for the newline */
    buf[n++] = '\n';
    int fd = level >= HVD_LOG_WARNING ? log_err_fd : log_out_fd;
    /* One write per line: concurrent writers never split each other's lines. */
    ssize_t r = write(fd, buf, n);
    (void)r;
}
