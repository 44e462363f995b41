/* libFuzzer target: the workers' parser of HTTP response heads, and its reader of a header. */
#include "http/http_client.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* exact-size copy: any read past the end is an ASan report */
    char *head = malloc(size ? size : 1);
    memcpy(head, data, size);
    int status;
    long long content_length;
    if (hvd__http_parse_head(head, size, &status, &content_length) == HVD_OK) {
        if (status < 0 || status > 999 || content_length < -1)
            abort();
        /* the store client's reader of one header (the scope's age): a found value fits,
         * holds no line break and is trimmed of blanks; an absent one is empty */
        char v[32];
        int found = hvd__http_head_value(head, size, "X-Hvd-Scope-Age-Ms", v, sizeof v);
        size_t n = strnlen(v, sizeof v);
        if (n >= sizeof v || (!found && n) || strpbrk(v, "\r\n") ||
            (n && (v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t')))
            abort();
    }
    free(head);
    return 0;
}
