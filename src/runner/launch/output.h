/* Forwarding of rank output: bytes in, tagged whole lines out (the format: docs/reference.md,
 * "`horovodrun`", Output).
 *
 * Lines end at '\n' or '\r' (progress bars), the terminator kept; a partial line waits for
 * its end, or for EOF (then it is written without adding a newline). A line longer than the
 * splitter's bound (HVD_OUTPUT_MAX_LINE) is forwarded in pieces, each tagged, cut between
 * UTF-8 characters where possible, so memory stays bounded. Each tagged line goes out in one
 * write(), and one thread writes all of them, so lines of different ranks never mix.
 *
 * Nothing here is thread-safe; one stream is used by one thread. */
#ifndef HVD_RUNNER_OUTPUT_H
#define HVD_RUNNER_OUTPUT_H

#include <hvd/types.h>

#include <stddef.h>
#include <time.h>

#define HVD_OUTPUT_MAX_LINE 65536
#define HVD_OUTPUT_TAIL_LINES 10
#define HVD_OUTPUT_TAIL_LINE_MAX 1024 /* bytes kept of each tail line */

/* ---- line splitting (pure: no I/O) ---- */

/* Splits a byte stream into lines. The buffer holds only the current partial line; it grows
 * as needed, up to max bytes. */
typedef struct {
    char *buf;
    size_t len, cap, max;
} hvd_line_splitter_t;

/* Called with each line (terminator included when there is one). The data is valid only
 * during the call. */
typedef void (*hvd_line_fn)(const char *line, size_t len, void *arg);

/* max_line: the longest line kept whole (0: HVD_OUTPUT_MAX_LINE; at least 8). */
void hvd__lines_init(hvd_line_splitter_t *s, size_t max_line);
void hvd__lines_fini(hvd_line_splitter_t *s);
/* Feed bytes; every line completed by them is emitted before this returns. On
 * HVD_ERR_NO_MEMORY the partial line so far has been emitted as a piece and nothing is lost. */
hvd_status_t hvd__lines_feed(hvd_line_splitter_t *s, const char *data, size_t n, hvd_line_fn emit,
                             void *arg);
/* End of stream: emit the partial line, if any. */
void hvd__lines_flush(hvd_line_splitter_t *s, hvd_line_fn emit, void *arg);

/* ---- one rank's stream as horovodrun forwards it ---- */

typedef struct {
    int rank;              /* < 0: no tag at all, lines pass through unchanged */
    int is_stderr;         /* tag "<stderr>" instead of "<stdout>"; keep a tail */
    int console_fd;        /* where tagged lines go (not owned) */
    int file_fd;           /* --output-filename file, or -1 (owned: closed by fini) */
    int timestamp;         /* prefix each line with asctime()-style local time */
    time_t (*clock)(void); /* for tests; NULL: time() */
    hvd_line_splitter_t splitter;
    /* Last lines (stderr), untagged, without terminator, for the failure report. Progress
     * updates ('\r' lines) do not fill it: only the latest one since the last '\n' line is
     * kept, in tail_cr. */
    char *tail[HVD_OUTPUT_TAIL_LINES];
    size_t tail_next, tail_count;
    char *tail_cr;
    unsigned long lost_lines; /* lines that could not be written to the console */
} hvd_output_stream_t;

void hvd__output_stream_init(hvd_output_stream_t *s, int rank, int is_stderr, int console_fd,
                             int file_fd, int timestamp);
/* Releases memory and closes file_fd (without flushing: call _eof first). */
void hvd__output_stream_fini(hvd_output_stream_t *s);
/* Forward bytes; complete lines are written at once. A console that cannot take a line
 * within 10 s (non-blocking and full) loses that line (counted in lost_lines). */
hvd_status_t hvd__output_stream_feed(hvd_output_stream_t *s, const char *data, size_t n);
/* End of stream: write the partial line, if any. */
void hvd__output_stream_eof(hvd_output_stream_t *s);

/* Write the kept tail lines, oldest first, each as "<indent><line>\n", to fd. Returns how
 * many lines it wrote. */
size_t hvd__output_stream_write_tail(const hvd_output_stream_t *s, int fd, const char *indent);

/* Format the asctime()-style stamp of t in local time ("Mon Jan 20 12:00:01 2020", no newline,
 * English names whatever the locale) into out (at least 32 bytes). Returns its length. */
size_t hvd__output_format_time(time_t t, char *out, size_t out_size);

/* Width of rank numbers in --output-filename directories: digits of (np - 1), at least 1
 * (np = 1 works: Horovod's log10(0) crash is fixed). */
int hvd__output_rank_width(int np);

/* Create DIR/rank.<padded>/ (and DIR itself, with parents) and open its stdout and stderr
 * files, truncated, close-on-exec. The caller owns the fds. HVD_ERR_IO naming the path. */
hvd_status_t hvd__output_open_files(const char *dir, int rank, int np, int *out_fd_p,
                                    int *err_fd_p);

#endif
