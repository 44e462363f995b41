/* libFuzzer target: verification of rendezvous Authorization headers. Nothing but a real
 * signature may verify. */
#include "rendezvous/kv_auth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static hvd_secret_t secret; /* all zero: fixed, so the fuzzer cannot learn it either way */
    char *header = malloc(size + 1);
    memcpy(header, data, size);
    header[size] = '\0';
    hvd_kv_auth_result_t r =
        hvd__kv_auth_verify(&secret, NULL, header, "PUT", "/s/k", "v", 1, hvd__kv_auth_now_ms());
    if (r == HVD_KV_AUTH_OK)
        abort(); /* forging a signature would be a finding */
    free(header);
    return 0;
}
