/* Capturing what hvd logs, for tests that assert on a warning: include after cmocka.h.
 * capture_start() sends the stderr-class levels (WARNING and above) into a pipe, and
 * capture_read() returns everything logged since (capture goes on), capture_end() the same
 * and restores stdout/stderr. One capture at a time per test program. */
#ifndef HVD_TESTS_LOG_CAPTURE_H
#define HVD_TESTS_LOG_CAPTURE_H

#include "common/log.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static int log_pipe[2];
static char log_text[65536];
static size_t log_len;

static void capture_start(void) {
    assert_int_equal(pipe(log_pipe), 0);
    fcntl(log_pipe[0], F_SETFL, O_NONBLOCK);
    log_len = 0;
    log_text[0] = '\0';
    hvd__log_set_fds(STDOUT_FILENO, log_pipe[1]);
}

static const char *capture_read(void) {
    for (;;) {
        ssize_t n = read(log_pipe[0], log_text + log_len, sizeof log_text - 1 - log_len);
        if (n <= 0)
            break;
        log_len += (size_t)n;
    }
    log_text[log_len] = '\0';
    return log_text;
}

static const char *capture_end(void) {
    hvd__log_set_fds(STDOUT_FILENO, STDERR_FILENO);
    close(log_pipe[1]);
    capture_read();
    close(log_pipe[0]);
    return log_text;
}

#endif
