/* libFuzzer target: decoding of whole-scope and count responses from the rendezvous store
 * (every input goes to both decoders). */
#include "rendezvous/store_client.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *body = malloc(size ? size : 1);
    memcpy(body, data, size);
    hvd_store_scope_t scope;
    if (hvd__store_scope_decode(body, size, &scope) == HVD_OK) {
        size_t total = 8;
        for (size_t i = 0; i < scope.count; i++)
            total += 8 + strlen(scope.entries[i].key) + scope.entries[i].value_len;
        if (total != size) /* a decoded scope accounts for every byte */
            abort();
        hvd__store_scope_fini(&scope);
    }
    if (hvd__store_count_decode(body, size, &scope) == HVD_OK) {
        if (scope.count > 1 || (scope.count && strcmp(scope.entries[0].key, "abort")))
            abort(); /* a count answer carries the abort key alone */
        hvd__store_scope_fini(&scope);
    }
    free(body);
    return 0;
}
