/* Forwarding of rank output: bytes in, tagged whole lines out (reference 3.5).
 *
 * Lines end at '\n' or '\r' (progress bars), the terminator kept; a partial line waits for
 * its end, or for EOF (then it is written without adding a newline). A line longer than
 * HVD_OUTPUT_MAX_LINE is forwarded in pieces, each tagged, so memory stays bounded. Each
 * tagged line goes out in one write, so lines of different ranks never mix. */
#ifndef HVD_RUNNER_OUTPUT_H
#define HVD_RUNNER_OUTPUT_H

#include <hvd/types.h>

#include <stddef.h>
#include <time.h>

#define HVD_OUTPUT_MAX_LINE 65536
#define HVD_OUTPUT_TAIL_LINES 10

/* Splits a byte stream into lines. */
typedef struct {
    char *buf;
    size_t len;
} hvd_line_splitter_t;

/* Called with each line (terminator included when there is one). */
typedef void (*hvd_line_fn)(const char *line, size_t len, void *arg);

void hvd__lines_init(hvd_line_splitter_t *s);
void hvd__lines_fini(hvd_line_splitter_t *s);
/* Feed bytes; complete lines are emitted at once. HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__lines_feed(hvd_line_splitter_t *s, const char *data, size_t n, hvd_line_fn emit,
                             void *arg);
/* End of stream: emit the partial line, if any. */
void hvd__lines_flush(hvd_line_splitter_t *s, hvd_line_fn emit, void *arg);

/* One rank's stream (stdout or stderr) as horovodrun forwards it. */
typedef struct {
    int rank;
    int is_stderr;
    int console_fd;        /* where tagged lines go */
    int file_fd;           /* --output-filename file, or -1 */
    int timestamp;         /* prefix each line with asctime()-style time */
    time_t (*clock)(void); /* for tests; NULL: time() */
    hvd_line_splitter_t splitter;
    /* last lines (stderr), untagged and without terminator, for the failure report */
    char *tail[HVD_OUTPUT_TAIL_LINES];
    size_t tail_next, tail_count;
} hvd_output_stream_t;

void hvd__output_stream_init(hvd_output_stream_t *s, int rank, int is_stderr, int console_fd,
                             int file_fd, int timestamp);
void hvd__output_stream_fini(hvd_output_stream_t *s);
hvd_status_t hvd__output_stream_feed(hvd_output_stream_t *s, const char *data, size_t n);
void hvd__output_stream_eof(hvd_output_stream_t *s);

/* Write the kept tail lines, oldest first, each as "<indent><line>\n", to fd. */
void hvd__output_stream_write_tail(const hvd_output_stream_t *s, int fd, const char *indent);

/* Width of rank numbers in --output-filename directories: digits of (np - 1), at least 1. */
int hvd__output_rank_width(int np);

/* Create DIR/rank.<padded>/ and open its stdout and stderr files (truncated). */
hvd_status_t hvd__output_open_files(const char *dir, int rank, int np, int *out_fd_p,
                                    int *err_fd_p);

#endif
