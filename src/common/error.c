/* The thread-local last error (error.h) and the public calls that read it: hvd_last_error,
 * hvd_status_str and hvd_version. Messages are cut at 1 KiB; a wrap keeps its new context and as
 * much of the cause as fits. */
#include "common/error.h"

#include <hvd/hvd.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Large enough for a message naming several ranks and a host; longer ones are truncated. */
#define ERROR_MSG_MAX 1024

static _Thread_local char last_error[ERROR_MSG_MAX];

hvd_status_t hvd__error_set(hvd_status_t status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

hvd_status_t hvd__error_wrap(hvd_status_t status, const char *fmt, ...) {
    char prev[ERROR_MSG_MAX];
    memcpy(prev, last_error, sizeof prev);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    /* The cause is cut short when it does not fit: using snprintf's result says so to the
     * compiler (-Wformat-truncation in unoptimised builds). */
    if (n >= 0 && (size_t)n < sizeof last_error &&
        snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", prev) < 0)
        last_error[n] = '\0';
    return status;
}

hvd_status_t hvd__error_prefix(hvd_status_t status, const char *what) {
    size_t n = strlen(what);
    if (strncmp(last_error, what, n) == 0 && strncmp(last_error + n, ": ", 2) == 0)
        return status;
    return hvd__error_wrap(status, "%s", what);
}

void hvd__error_clear(void) {
    last_error[0] = '\0';
}

const char *hvd_last_error(void) {
    return last_error;
}

const char *hvd_status_str(hvd_status_t status) {
    switch (status) {
    case HVD_OK:
        return "HVD_OK";
    case HVD_ERR_INVALID_ARG:
        return "HVD_ERR_INVALID_ARG";
    case HVD_ERR_TIMEOUT:
        return "HVD_ERR_TIMEOUT";
    case HVD_ERR_PEER_LOST:
        return "HVD_ERR_PEER_LOST";
    case HVD_ERR_HOSTS_UPDATED:
        return "HVD_ERR_HOSTS_UPDATED";
    case HVD_ERR_SHUT_DOWN:
        return "HVD_ERR_SHUT_DOWN";
    case HVD_ERR_MISMATCH:
        return "HVD_ERR_MISMATCH";
    case HVD_ERR_NO_MEMORY:
        return "HVD_ERR_NO_MEMORY";
    case HVD_ERR_IO:
        return "HVD_ERR_IO";
    case HVD_ERR_PROTOCOL:
        return "HVD_ERR_PROTOCOL";
    case HVD_ERR_AUTH:
        return "HVD_ERR_AUTH";
    case HVD_ERR_NOT_FOUND:
        return "HVD_ERR_NOT_FOUND";
    case HVD_ERR_TOO_LARGE:
        return "HVD_ERR_TOO_LARGE";
    case HVD_ERR_UNSUPPORTED:
        return "HVD_ERR_UNSUPPORTED";
    case HVD_ERR_STATE:
        return "HVD_ERR_STATE";
    default:
        return "HVD_ERR_UNKNOWN";
    }
}

const char *hvd_version(void) {
#define HVD_STR2(x) #x
#define HVD_STR(x) HVD_STR2(x)
    return HVD_STR(HVD_VERSION_MAJOR) "." HVD_STR(HVD_VERSION_MINOR) "." HVD_STR(HVD_VERSION_PATCH);
}
