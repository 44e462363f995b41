/* libFuzzer target: the workers' parser of HTTP response heads. */
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
    }
    free(head);
    return 0;
}
