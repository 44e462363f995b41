/* libFuzzer target: the elastic protocol's values (assignments and ready records). Whatever
 * parses must format back to a value that parses to the same thing. */
#include "rendezvous/elastic_msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy, so reading past the value is caught */
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    hvd_elastic_assign_t a, b;
    if (hvd__elastic_msg_assign_parse(text, size, &a) == HVD_OK) {
        char out[HVD_ELASTIC_VALUE_MAX + 1];
        int n = hvd__elastic_msg_assign_format(&a, out, sizeof out);
        if (n < 0 || hvd__elastic_msg_assign_parse(out, (size_t)n, &b) != HVD_OK ||
            a.verdict != b.verdict || a.rank != b.rank || a.size != b.size ||
            a.local_rank != b.local_rank || a.local_size != b.local_size ||
            a.cross_rank != b.cross_rank || a.cross_size != b.cross_size || a.sync != b.sync ||
            strcmp(a.message, b.message) != 0)
            abort();
    }
    hvd_elastic_ready_t r;
    if (hvd__elastic_msg_ready_parse(text, size, &r) == HVD_OK &&
        strlen(hvd__elastic_msg_ready_str(r)) != size)
        abort();
    char shown[64];
    hvd__elastic_msg_printable(text, size, shown, sizeof shown);
    if (strlen(shown) >= sizeof shown)
        abort();
    free(text);
    return 0;
}
