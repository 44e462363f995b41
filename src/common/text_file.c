/* Bounded reads of user-named text files (see text_file.h). */
#include "common/text_file.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Opened without blocking, then made blocking for the reads: a FIFO nobody writes to would
 * otherwise keep open() waiting for ever (with no writer it reads as empty instead). */
static hvd_status_t open_file(const char *path, const char *what, int *fd_p) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return hvd__error_set(HVD_ERR_INVALID_ARG, "cannot open %s %s: %s", what, path,
                              strerror(err));
    }
    *fd_p = fd;
    return HVD_OK;
}

/* read(2) that retries EINTR; -1 is an error already recorded. */
static ssize_t read_some(int fd, char *buf, size_t n, const char *what, const char *path) {
    for (;;) {
        ssize_t got = read(fd, buf, n);
        if (got >= 0)
            return got;
        if (errno != EINTR) {
            hvd__error_set(HVD_ERR_IO, "cannot read %s %s: %s", what, path, strerror(errno));
            return -1;
        }
    }
}

static hvd_status_t nul_byte(const char *what, const char *path, int line) {
    return hvd__error_set(HVD_ERR_INVALID_ARG,
                          "%s %s: line %d holds a NUL byte (a %s is text; is it the right file?)",
                          what, path, line, what);
}

static hvd_status_t too_big(const char *what, const char *path, uint64_t max_total) {
    return hvd__error_set(HVD_ERR_INVALID_ARG,
                          "%s %s is larger than %llu bytes, the most hvd reads from a %s (is "
                          "it the right file?)",
                          what, path, (unsigned long long)max_total, what);
}

hvd_status_t hvd__text_reader_open(hvd_text_reader_t *r, const char *path, const char *what,
                                   size_t max_line, uint64_t max_total) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->path = path;
    r->what = what;
    r->max_line = max_line;
    r->max_total = max_total;
    /* a full line, its newline, and room for the terminating NUL of an unterminated last
     * line */
    r->buf = malloc(max_line + 2);
    if (!r->buf)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory reading %s %s", what, path);
    hvd_status_t st = open_file(path, what, &r->fd);
    if (st != HVD_OK) {
        free(r->buf);
        r->buf = NULL;
    }
    return st;
}

/* The line buf[start, start + len) is complete: check it, terminate it and hand it out. */
static hvd_status_t emit(hvd_text_reader_t *r, size_t len, size_t consumed, char **line_p,
                         size_t *len_p, int *lineno_p, int *more) {
    char *line = r->buf + r->start;
    r->lineno++;
    if (memchr(line, '\0', len))
        return nul_byte(r->what, r->path, r->lineno);
    line[len] = '\0';
    r->start += consumed;
    *line_p = line;
    *len_p = len;
    *lineno_p = r->lineno;
    *more = 1;
    return HVD_OK;
}

hvd_status_t hvd__text_reader_next(hvd_text_reader_t *r, char **line_p, size_t *len_p,
                                   int *lineno_p, int *more) {
    *more = 0;
    *line_p = NULL;
    for (;;) {
        size_t have = r->end - r->start;
        char *nl = memchr(r->buf + r->start, '\n', have);
        if (nl) {
            size_t len = (size_t)(nl - (r->buf + r->start));
            return emit(r, len, len + 1, line_p, len_p, lineno_p, more);
        }
        if (have > r->max_line) { /* the buffer is full and holds no newline */
            if (memchr(r->buf + r->start, '\0', have))
                return nul_byte(r->what, r->path, r->lineno + 1);
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s %s: line %d is longer than %zu bytes, the longest line hvd "
                                  "reads from a %s (is it the right file?)",
                                  r->what, r->path, r->lineno + 1, r->max_line, r->what);
        }
        if (r->eof)
            return have ? emit(r, have, have, line_p, len_p, lineno_p, more) : HVD_OK;
        if (r->start) {
            memmove(r->buf, r->buf + r->start, have);
            r->start = 0;
            r->end = have;
        }
        ssize_t got = read_some(r->fd, r->buf + r->end, r->max_line + 1 - r->end, r->what, r->path);
        if (got < 0)
            return hvd__error_pass(HVD_ERR_IO);
        if (got == 0)
            r->eof = 1;
        r->end += (size_t)got;
        r->total += (uint64_t)got;
        if (r->total > r->max_total)
            return too_big(r->what, r->path, r->max_total);
    }
}

void hvd__text_reader_close(hvd_text_reader_t *r) {
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    free(r->buf);
    r->buf = NULL;
}

hvd_status_t hvd__text_file_read(const char *path, const char *what, uint64_t max_total,
                                 char **text_p, size_t *len_p) {
    int fd = -1;
    hvd_status_t st = open_file(path, what, &fd);
    if (st != HVD_OK)
        return st;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 2) { /* room for one more byte than the bound, and the NUL */
            size_t grown = cap ? cap * 2 : 4096;
            if (grown > max_total + 2)
                grown = (size_t)max_total + 2;
            char *p = realloc(buf, grown);
            if (!p) {
                st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory reading %s %s", what, path);
                goto fail;
            }
            buf = p;
            cap = grown;
        }
        ssize_t got = read_some(fd, buf + len, cap - 1 - len, what, path);
        if (got < 0) {
            st = HVD_ERR_IO;
            goto fail;
        }
        if (got == 0)
            break;
        char *nul = memchr(buf + len, '\0', (size_t)got);
        if (nul) { /* refused at once: /dev/zero never ends */
            int line = 1;
            for (char *c = buf; c < nul; c++)
                line += *c == '\n';
            st = nul_byte(what, path, line);
            goto fail;
        }
        len += (size_t)got;
        if (len > max_total) {
            st = too_big(what, path, max_total);
            goto fail;
        }
    }
    close(fd);
    buf[len] = '\0'; /* (the first pass of the loop allocated buf) */
    *text_p = buf;
    *len_p = len;
    return HVD_OK;
fail:
    free(buf);
    close(fd);
    return st;
}
