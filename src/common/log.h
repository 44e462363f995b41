/* Logging in Horovod's format:
 *   [YYYY-MM-DD HH:MM:SS.uuuuuu: L file:line] message
 * or "[L file:line] ..." when the time is hidden; with a rank set, "[<rank>]: " precedes the
 * message. TRACE, DEBUG and INFO go to stdout, WARNING and above to stderr, each line with
 * one write() so lines from several threads never interleave. */
#ifndef HVD_COMMON_LOG_H
#define HVD_COMMON_LOG_H

typedef enum {
    HVD_LOG_TRACE = 0,
    HVD_LOG_DEBUG = 1,
    HVD_LOG_INFO = 2,
    HVD_LOG_WARNING = 3,
    HVD_LOG_ERROR = 4,
    HVD_LOG_FATAL = 5
} hvd_log_level_t;

/* The threshold is read on every log call, so it is a plain global set once at start-up. */
extern hvd_log_level_t hvd__log_threshold;

/* Parse "trace".."fatal" (any case). Returns 0 and sets *level_p, or -1 if unknown. */
int hvd__log_level_parse(const char *text, hvd_log_level_t *level_p);

/* Configure threshold, whether to hide the time, and the rank prefix (-1: none). */
void hvd__log_configure(hvd_log_level_t threshold, int hide_time, int rank);

/* Redirect output (tests): fds for the stdout-class and stderr-class levels. */
void hvd__log_set_fds(int out_fd, int err_fd);

void hvd__log_write(hvd_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define HVD_LOG(level, ...)                                                                        \
    do {                                                                                           \
        if ((level) >= hvd__log_threshold)                                                         \
            hvd__log_write((level), __FILE__, __LINE__, __VA_ARGS__);                              \
    } while (0)

#define HVD_LOG_T(...) HVD_LOG(HVD_LOG_TRACE, __VA_ARGS__)
#define HVD_LOG_D(...) HVD_LOG(HVD_LOG_DEBUG, __VA_ARGS__)
#define HVD_LOG_I(...) HVD_LOG(HVD_LOG_INFO, __VA_ARGS__)
#define HVD_LOG_W(...) HVD_LOG(HVD_LOG_WARNING, __VA_ARGS__)
#define HVD_LOG_E(...) HVD_LOG(HVD_LOG_ERROR, __VA_ARGS__)

#endif
