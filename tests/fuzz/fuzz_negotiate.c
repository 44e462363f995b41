/* libFuzzer target: negotiation messages come from other ranks; decoding arbitrary bytes
 * must never crash or leak, and whatever decodes must re-encode to the same bytes. */
#include "wire/negotiate.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf;
    size_t len;
    hvd_request_list_t q;
    if (hvd__neg_requests_decode(data, size, &q) == HVD_OK) {
        if (hvd__neg_requests_encode(&q, &buf, &len) != HVD_OK || len != size ||
            memcmp(buf, data, size) != 0)
            abort();
        free(buf);
        hvd__neg_requests_fini(&q);
    }
    hvd_response_list_t p;
    if (hvd__neg_responses_decode(data, size, &p) == HVD_OK) {
        if (hvd__neg_responses_encode(&p, &buf, &len) != HVD_OK || len != size ||
            memcmp(buf, data, size) != 0)
            abort();
        free(buf);
        hvd__neg_responses_fini(&p);
    }
    return 0;
}
