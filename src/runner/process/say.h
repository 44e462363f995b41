/* The launcher's own messages on its console (its --verbose lines, its errors): each one
 * formatted whole and written with as few writes as the descriptor takes, so that it never
 * splits, or is split by, the ranks' tagged lines that the launcher relays on the same
 * descriptor. A console that is gone is not a reason to stop the job: failures to write are
 * ignored. */
#ifndef HVD_RUNNER_PROCESS_SAY_H
#define HVD_RUNNER_PROCESS_SAY_H

#include <stdarg.h>
#include <stddef.h>

void hvd__say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hvd__vsay(int fd, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* len bytes as they are. */
void hvd__say_bytes(int fd, const char *p, size_t len);
/* prefix, then text whole however long (a reachability matrix of many hosts), then a
 * newline. */
void hvd__say_text(int fd, const char *prefix, const char *text);

#endif
