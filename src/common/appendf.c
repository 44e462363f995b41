/* Messages built piece by piece (appendf.h). */
#include "common/appendf.h"

#include <stdarg.h>
#include <stdio.h>

void hvd__appendf(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    if (*len + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (w > 0)
        *len = *len + (size_t)w < size ? *len + (size_t)w : size - 1;
}
