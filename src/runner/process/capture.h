/* Running a short-lived helper program with a deadline and keeping what it prints: `mpirun
 * --version` (which MPI is installed) and the elastic host discovery script.
 *
 * The program runs in a process group of its own, with stdin on /dev/null, an empty signal
 * mask and default dispositions (the launcher blocks and ignores some). At the deadline the
 * whole group is killed; after the program exits, output still held open by something it left
 * behind is read for HVD_CAPTURE_DRAIN_MS and then that is killed too. Output beyond a
 * buffer's capacity is read and dropped (the writer never blocks on a full pipe) and marked
 * as overflowed. */
#ifndef HVD_RUNNER_CAPTURE_H
#define HVD_RUNNER_CAPTURE_H

#include <hvd/types.h>

#include <stddef.h>

#define HVD_CAPTURE_DRAIN_MS 500

typedef struct {
    char *buf;
    size_t cap;   /* > 0; the text kept is NUL-terminated, so at most cap - 1 bytes */
    size_t len;   /* bytes kept */
    int overflow; /* more was printed than fits */
} hvd_capture_buf_t;

typedef struct {
    const char *file;       /* the program's path (no PATH search here) */
    char *const *argv;      /* its argv */
    char *const *envp;      /* its whole environment (NULL: empty) */
    int timeout_ms;         /* > 0 */
    hvd_capture_buf_t *out; /* stdout, and stderr too when err is NULL */
    hvd_capture_buf_t *err; /* stderr, or NULL */
} hvd_capture_config_t;

/* Run it to its end or the deadline. *status_p is the raw wait status, *timed_out_p whether
 * the deadline ended it. HVD_ERR_IO (with the reason) when it could not be started. */
hvd_status_t hvd__capture_run(const hvd_capture_config_t *cfg, int *status_p, int *timed_out_p);

/* The same for `/bin/sh -c command` in this process's environment (the host discovery
 * script, squeue): out keeps its stdout, err its stderr. */
hvd_status_t hvd__capture_shell(const char *command, int timeout_ms, hvd_capture_buf_t *out,
                                hvd_capture_buf_t *err, int *status_p, int *timed_out_p);

/* Append data[0..n) to buf (holding *len of cap bytes, not NUL-terminated), keeping only
 * the last cap bytes: the end of what a program wrote says why it failed. */
void hvd__capture_keep_tail(char *buf, size_t cap, size_t *len, const char *data, size_t n);

/* The last non-empty line of text[0..len), without its line end, into out. */
void hvd__capture_last_line(const char *text, size_t len, char *out, size_t size);

/* Add reason as the last line of b, keeping the reason whole when b is full. */
void hvd__capture_note(hvd_capture_buf_t *b, const char *reason);

#endif
