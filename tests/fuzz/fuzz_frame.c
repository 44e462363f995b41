/* libFuzzer target: the data-plane decoders see arbitrary bytes from whoever connects to a
 * worker's port; they must never crash, and never accept a HELLO whose mac they did not
 * compute. */
#include "wire/frame.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static hvd_secret_t secret; /* all zero: a fuzzer cannot know a real one either */
    uint8_t buf[HVD_HELLO_LEN] = {0}, nonce[HVD_NONCE_LEN] = {0};
    memcpy(buf, data, size < sizeof buf ? size : sizeof buf);
    hvd_hello_t h;
    /* Passing authentication would mean forging HMAC-SHA256 under a key the input does not
     * carry: the decoder must be checking the wrong bytes. */
    if (hvd__frame_hello_decode(buf, nonce, &secret, &h) == HVD_OK)
        abort();
    memset(&h, 0, sizeof h);
    (void)hvd__frame_challenge_decode(buf, nonce);
    (void)hvd__frame_welcome_check(buf, &h, &secret);
    int kind;
    uint64_t len;
    (void)hvd__frame_header_decode(buf, &kind, &len);
    return 0;
}
