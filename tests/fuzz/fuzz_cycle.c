/* libFuzzer target: a cycle message comes from another rank every cycle; decoding arbitrary
 * bytes must never crash or read out of bounds, and whatever decodes must re-encode to the
 * same bytes (no field is ignored on the way in). */
#include "wire/cycle.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hvd_cycle_msg_t m;
    if (hvd__cycle_decode(data, size, 64, 4096, 1, &m) != HVD_OK)
        return 0;
    size_t len = hvd__cycle_size(&m);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        abort();
    hvd__cycle_encode(&m, buf);
    if (len != size || memcmp(buf, data, size) != 0)
        abort();
    for (uint32_t w = 0; w < m.nwords; w++)
        (void)hvd__cycle_word(m.hits, w);
    free(buf);
    return 0;
}
