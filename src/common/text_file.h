/* Reading a file a user named (a hostfile, a config file) in bounded memory.
 *
 * The user may name the wrong file: /dev/zero, a FIFO fed by a runaway process, a multi-GiB
 * log. Every read here is bounded by a line length and a total size given by the caller, and
 * exceeding either is an error that names the file and the bound, so the launcher refuses
 * such an input in milliseconds and in constant memory instead of filling the login node's
 * memory. A NUL byte is an error too: none of these files is binary, and C string parsing
 * would silently cut a line at it. */
#ifndef HVD_COMMON_TEXT_FILE_H
#define HVD_COMMON_TEXT_FILE_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

/* A line-at-a-time reader; its buffer is max_line + 1 bytes however long the file is. */
typedef struct {
    int fd;
    const char *path, *what; /* for messages: "hostfile /x: ..." */
    char *buf;
    size_t max_line, start, end;
    uint64_t total, max_total;
    int lineno, eof;
} hvd_text_reader_t;

/* Open path; what names the file's role in messages ("hostfile"). max_line counts the bytes
 * of a line without its newline; max_total the bytes of the whole file. */
hvd_status_t hvd__text_reader_open(hvd_text_reader_t *r, const char *path, const char *what,
                                   size_t max_line, uint64_t max_total);

/* The next line, without its newline, NUL-terminated in the reader's buffer (valid until the
 * next call; the caller may modify it in place), its length and 1-based number. *more is 0 at
 * the end of the file (then line is NULL). Errors: HVD_ERR_INVALID_ARG for a line or file
 * over its bound or a NUL byte, HVD_ERR_IO for a read error; each names the file and line. */
hvd_status_t hvd__text_reader_next(hvd_text_reader_t *r, char **line_p, size_t *len_p,
                                   int *lineno_p, int *more);

void hvd__text_reader_close(hvd_text_reader_t *r);

/* Read all of path (at most max_total bytes, no NUL byte) into a malloc'd, NUL-terminated
 * buffer. Errors as above. */
hvd_status_t hvd__text_file_read(const char *path, const char *what, uint64_t max_total,
                                 char **text_p, size_t *len_p);

#endif
