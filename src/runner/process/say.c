/* The launcher's console messages (say.h): formatted on the stack, or on the heap when
 * longer, then written out whole. */
#include "runner/process/say.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void hvd__say_bytes(int fd, const char *p, size_t len) {
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, p + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        off += (size_t)w;
    }
}

void hvd__vsay(int fd, const char *fmt, va_list ap) {
    char buf[4096];
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n >= 0 && (size_t)n < sizeof buf) {
        hvd__say_bytes(fd, buf, (size_t)n);
    } else if (n >= 0) {
        char *big = malloc((size_t)n + 1);
        if (big && vsnprintf(big, (size_t)n + 1, fmt, again) == n)
            hvd__say_bytes(fd, big, (size_t)n);
        else
            hvd__say_bytes(fd, buf, sizeof buf - 1); /* out of memory: what fits */
        free(big);
    }
    va_end(again);
}

void hvd__say(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hvd__vsay(fd, fmt, ap);
    va_end(ap);
}

void hvd__say_text(int fd, const char *prefix, const char *text) {
    size_t plen = strlen(prefix), tlen = strlen(text);
    char *line = malloc(plen + tlen + 1);
    if (!line) {
        hvd__say_bytes(fd, prefix, plen);
        hvd__say_bytes(fd, text, tlen);
        hvd__say_bytes(fd, "\n", 1);
        return;
    }
    memcpy(line, prefix, plen);
    memcpy(line + plen, text, tlen);
    line[plen + tlen] = '\n';
    hvd__say_bytes(fd, line, plen + tlen + 1);
    free(line);
}
