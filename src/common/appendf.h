/* Messages built piece by piece into a fixed buffer (reports, error texts): each piece is
 * appended at *len, and what does not fit is cut at the buffer's end instead of overflowing
 * it, the text staying NUL-terminated. */
#ifndef HVD_COMMON_APPENDF_H
#define HVD_COMMON_APPENDF_H

#include <stddef.h>

/* snprintf at buf + *len, advancing *len, never past size - 1. Nothing when the buffer is
 * already full (or size is 0). */
void hvd__appendf(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
