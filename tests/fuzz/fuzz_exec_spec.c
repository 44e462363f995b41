/* libFuzzer target: the remote command spec that `horovodrun --internal-exec` reads from its
 * stdin. It comes from the launcher through ssh, but its decoder must still never crash or
 * read past its input, whatever the bytes; what it accepts must encode back to itself. */
#include "runner/remote_exec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t payload;
    if (size >= HVD_EXEC_SPEC_HEADER_LEN)
        (void)hvd__exec_spec_header(data, &payload);
    hvd_exec_spec_t spec;
    if (hvd__exec_spec_decode(data, size, &spec) != HVD_OK)
        return 0;
    uint8_t *again;
    size_t len;
    if (hvd__exec_spec_encode(spec.cwd, spec.env, spec.argv, &again, &len) != HVD_OK)
        abort();
    if (len != HVD_EXEC_SPEC_HEADER_LEN + size ||
        memcmp(again + HVD_EXEC_SPEC_HEADER_LEN, data, size) != 0)
        abort();
    free(again);
    hvd__exec_spec_fini(&spec);
    return 0;
}
