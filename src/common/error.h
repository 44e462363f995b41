/* Internal error reporting: every failing function records a detailed, thread-local message
 * once, where the error is decided, and returns its status. */
#ifndef HVD_COMMON_ERROR_H
#define HVD_COMMON_ERROR_H

#include <hvd/types.h>

/* Record fmt as this thread's last error and return status (for `return hvd__error_set(...)`). */
hvd_status_t hvd__error_set(hvd_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefix the current message with more context ("while X: <old message>"); returns status. */
hvd_status_t hvd__error_wrap(hvd_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "what: <this thread's error>", unless the error starts with "what: " already (the layer
 * below named the operation itself). Returns status. */
hvd_status_t hvd__error_prefix(hvd_status_t status, const char *what);

/* Return status for a failure whose message is set already: by the call that failed (an
 * allocator such as hvd__group_scratch, a read), or left for the caller to word (a status it
 * handles itself, a fallback). A bare `return HVD_ERR_...;` is refused by
 * tests/unit/check_error_messages.sh, so that a new one cannot leave hvd_last_error() empty
 * or stale. */
static inline hvd_status_t hvd__error_pass(hvd_status_t status) {
    return status;
}

/* Forget this thread's last error. */
void hvd__error_clear(void);

#endif
