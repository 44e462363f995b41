/* libFuzzer target: the service wire and the NIC discovery messages arrive from whoever
 * connects to a driver or task service port, and the task input and cached results are
 * parsed from stdin and a file. Decoding arbitrary bytes must never crash, read past the
 * input or leak; no REQUEST or RESPONSE may pass authentication under a key the input does
 * not carry; and every discovery message that decodes must re-encode to the same bytes.
 *
 * The first byte picks the decoder, so seeds of every kind share one corpus. */
#include "runner/discovery/discovery.h"
#include "runner/discovery/discovery_msg.h"
#include "runner/service/service.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[HVD_SVC_MAX_BODY];

static void same_bytes(const uint8_t *in, size_t in_len, size_t out_len) {
    if (out_len != in_len || memcmp(out, in, in_len) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static hvd_secret_t secret; /* all zero: a fuzzer cannot know a real one either */
    static const uint8_t nonce_s[HVD_SVC_NONCE_LEN], nonce_c[HVD_SVC_NONCE_LEN];
    if (size < 1)
        return 0;
    uint8_t kind = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    /* a copy of exactly n bytes on the heap, so ASan sees any over-read */
    uint8_t *in = malloc(n ? n : 1);
    if (!in)
        return 0;
    memcpy(in, p, n);
    hvd_svc_head_t h;
    const uint8_t *body;
    size_t len = 0;

    switch (kind % 10) {
    case 0:
        if (hvd__svc_request_parse(in, n, nonce_s, 0, &secret, &h, &body) == HVD_OK)
            abort();
        break;
    case 1:
        if (hvd__svc_response_parse(in, n, nonce_s, nonce_c, 0, &secret, &h, &body) == HVD_OK)
            abort();
        break;
    case 2: {
        uint8_t ch[HVD_SVC_CHALLENGE_LEN] = {0}, got[HVD_SVC_NONCE_LEN];
        memcpy(ch, in, n < sizeof ch ? n : sizeof ch);
        (void)hvd__svc_challenge_decode(ch, got);
        uint8_t pre[HVD_SVC_REQ_PREFIX_LEN] = {0};
        memcpy(pre, in, n < sizeof pre ? n : sizeof pre);
        (void)hvd__svc_request_head_decode(pre, &h);
        (void)hvd__svc_response_head_decode(pre, &h);
        break;
    }
    case 3: {
        hvd_disc_register_t *m = malloc(sizeof *m);
        if (m && hvd__disc_register_decode(in, n, m) == HVD_OK) {
            if (hvd__disc_register_encode(m, out, sizeof out, &len) != HVD_OK)
                abort();
            same_bytes(in, n, len);
        }
        free(m);
        break;
    }
    case 4: {
        hvd_disc_task_info_t *m = malloc(sizeof *m);
        if (m && hvd__disc_task_info_decode(in, n, m) == HVD_OK) {
            if (hvd__disc_task_info_encode(m, out, sizeof out, &len) != HVD_OK)
                abort();
            same_bytes(in, n, len);
        }
        free(m);
        break;
    }
    case 5: {
        hvd_disc_report_t *m = malloc(sizeof *m);
        if (m && hvd__disc_report_decode(in, n, m) == HVD_OK) {
            if (hvd__disc_report_encode(m, out, sizeof out, &len) != HVD_OK)
                abort();
            same_bytes(in, n, len);
        }
        free(m);
        break;
    }
    case 6: {
        uint32_t a, b;
        if (hvd__disc_get_task_decode(in, n, &a, &b) == HVD_OK) {
            if (hvd__disc_get_task_encode(a, b, out, sizeof out, &len) != HVD_OK)
                abort();
            same_bytes(in, n, len);
        }
        if (hvd__disc_index_decode(in, n, "fuzz", &a) == HVD_OK) {
            if (hvd__disc_index_encode(a, out, sizeof out, &len) != HVD_OK)
                abort();
            same_bytes(in, n, len);
        }
        break;
    }
    case 7: {
        size_t body_len = 0;
        hvd_disc_input_t *m = malloc(sizeof *m);
        if (m && n >= HVD_DISC_INPUT_HEAD_LEN &&
            hvd__disc_input_head_decode(in, &body_len) == HVD_OK &&
            body_len == n - HVD_DISC_INPUT_HEAD_LEN &&
            hvd__disc_input_body_decode(in + HVD_DISC_INPUT_HEAD_LEN, body_len, m) == HVD_OK) {
            uint8_t *blob = NULL;
            if (hvd__disc_input_encode(m, &blob, &len) != HVD_OK || len != n ||
                memcmp(blob, in, n) != 0)
                abort();
            hvd__disc_input_free(blob, len);
        }
        free(m);
        break;
    }
    case 8: {
        char *text = malloc(n + 1);
        hvd_disc_result_t r;
        if (text) {
            memcpy(text, in, n);
            text[n] = '\0';
            if (hvd__disc_result_parse(text, &r) == HVD_OK) {
                char *again = NULL;
                if (hvd__disc_result_format(&r, &again) != HVD_OK)
                    abort();
                hvd_disc_result_t r2;
                if (hvd__disc_result_parse(again, &r2) != HVD_OK || r2.host_count != r.host_count)
                    abort();
                hvd__disc_result_fini(&r2);
                free(again);
                hvd__disc_result_fini(&r);
            }
            free(text);
        }
        break;
    }
    default: {
        /* the generic decoder: a run of length-prefixed strings into a small field */
        hvd_svc_dec_t d;
        char s[16];
        uint32_t v;
        hvd__svc_dec_init(&d, in, n, "fuzz");
        while (hvd__svc_dec_str(&d, "s", s, sizeof s) == HVD_OK)
            if (strlen(s) >= sizeof s)
                abort();
        hvd__svc_dec_init(&d, in, n, "fuzz");
        while (hvd__svc_dec_u32(&d, "v", &v) == HVD_OK) {
        }
        break;
    }
    }
    free(in);
    return 0;
}
