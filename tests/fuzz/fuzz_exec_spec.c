/* libFuzzer target: what `horovodrun --internal-exec` and horovodrun read from each other over
 * a host's ssh session (runner/launch/exec_wire.h). It comes from the other end of the job's own
 * ssh session, but its decoders must still never crash or read past their input, whatever the
 * bytes. The first byte picks the decoder: even, the spec (what it accepts must encode back to
 * itself); odd, the frame reader fed in pieces, and the commands. */
#include "runner/launch/exec_wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void spec(const uint8_t *data, size_t size) {
    size_t payload;
    if (size >= HVD_EXEC_SPEC_HEADER_LEN)
        (void)hvd__exec_spec_header(data, &payload);
    hvd_exec_spec_t spec;
    if (hvd__exec_spec_decode(data, size, &spec) != 0)
        return;
    uint8_t *again;
    size_t len;
    if (hvd__exec_spec_encode(&spec, &again, &len) != 0)
        abort();
    if (len != HVD_EXEC_SPEC_HEADER_LEN + size ||
        memcmp(again + HVD_EXEC_SPEC_HEADER_LEN, data, size) != 0)
        abort();
    free(again);
    hvd__exec_spec_fini(&spec);
}

static void frames(const uint8_t *data, size_t size) {
    hvd_exec_reader_t r;
    hvd__exec_reader_init(&r, 3);
    size_t cut = size ? data[0] % 17 + 1 : 1;
    for (size_t at = 0; at < size; at += cut) {
        size_t take = size - at < cut ? size - at : cut;
        if (hvd__exec_reader_feed(&r, data + at, take) != 0)
            break;
        hvd_exec_frame_t f;
        int got;
        while ((got = hvd__exec_reader_next(&r, &f)) == 1)
            if (f.index >= 3 || f.len > HVD_EXEC_FRAME_MAX)
                abort();
        if (got < 0)
            break;
    }
    hvd__exec_reader_fini(&r);
    uint32_t what, index;
    for (size_t at = 0; at + HVD_EXEC_COMMAND_LEN <= size; at += HVD_EXEC_COMMAND_LEN)
        if (hvd__exec_command_decode(data + at, 3, &what, &index) == 0 && index >= 3)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    if (data[0] % 2 == 0)
        spec(data + 1, size - 1);
    else
        frames(data + 1, size - 1);
    return 0;
}
