/* The per-cycle control message (cycle.h). */
#include "wire/cycle.h"

#include "common/error.h"
#include "wire/le.h"

#include <string.h>

size_t hvd__cycle_size(const hvd_cycle_msg_t *m) {
    size_t words = (size_t)m->nwords * 8;
    return HVD_CYC_HEADER_LEN + words + (m->invalid ? words : 0) + m->payload_len + m->reason_len +
           ((m->flags & HVD_CYC_TUNE) ? HVD_CYC_TUNE_LEN : 0) +
           ((m->ext & HVD_CYC_EXT_STACKS) ? 2 + (size_t)m->nstacks * 4 : 0);
}

void hvd__cycle_encode(const hvd_cycle_msg_t *m, uint8_t *out) {
    out[0] = 'H';
    out[1] = 'C';
    out[2] = HVD_CYC_VERSION;
    out[3] = (uint8_t)((m->flags & ~HVD_CYC_INVALID) | (m->invalid ? HVD_CYC_INVALID : 0));
    out[4] = m->comm;
    out[5] = m->ext;
    hvd__le32_put(out + 6, m->nwords);
    hvd__le32_put(out + 10, m->payload_len);
    hvd__le16_put(out + 14, m->reason_len);
    hvd__sig_encode(out + 16, &m->sig);
    uint8_t *p = out + HVD_CYC_HEADER_LEN;
    size_t words = (size_t)m->nwords * 8;
    if (words)
        memcpy(p, m->hits, words);
    p += words;
    if (m->invalid) {
        memcpy(p, m->invalid, words);
        p += words;
    }
    if (m->payload_len)
        memcpy(p, m->payload, m->payload_len);
    p += m->payload_len;
    if (m->reason_len)
        memcpy(p, m->reason, m->reason_len);
    p += m->reason_len;
    if (m->flags & HVD_CYC_TUNE) {
        hvd__le64_put(p, m->tune_fusion);
        hvd__le32_put(p + 8, m->tune_cycle_us);
        hvd__le32_put(p + 12, m->tune_knobs);
        p += HVD_CYC_TUNE_LEN;
    }
    if (m->ext & HVD_CYC_EXT_STACKS) {
        hvd__le16_put(p, m->nstacks);
        if (m->nstacks)
            memcpy(p + 2, m->stacks, (size_t)m->nstacks * 4);
    }
}

hvd_status_t hvd__cycle_decode(const uint8_t *buf, size_t len, uint32_t max_words,
                               size_t max_payload, int from_rank, hvd_cycle_msg_t *m) {
    const char *why;
    if (len < HVD_CYC_HEADER_LEN) {
        why = "truncated header";
        goto bad;
    }
    if (buf[0] != 'H' || buf[1] != 'C' || buf[2] != HVD_CYC_VERSION) {
        why = "bad magic or version";
        goto bad;
    }
    /* Unknown ext flags are refused: a later version may give them a meaning. */
    if (buf[5] & ~HVD_CYC_EXT_STACKS) {
        why = "unknown ext flags set";
        goto bad;
    }
    hvd_cycle_msg_t d = {.flags = buf[3], .comm = buf[4], .ext = buf[5]};
    d.nwords = hvd__le32_get(buf + 6);
    d.payload_len = hvd__le32_get(buf + 10);
    d.reason_len = hvd__le16_get(buf + 14);
    if (d.nwords > max_words || d.payload_len > max_payload || d.reason_len > HVD_CYC_REASON_MAX) {
        why = "a bound exceeded";
        goto bad;
    }
    hvd__sig_decode(buf + 16, &d.sig);
    size_t words = (size_t)d.nwords * 8;
    size_t need = HVD_CYC_HEADER_LEN + words + ((d.flags & HVD_CYC_INVALID) ? words : 0) +
                  d.payload_len + d.reason_len + ((d.flags & HVD_CYC_TUNE) ? HVD_CYC_TUNE_LEN : 0);
    if ((d.ext & HVD_CYC_EXT_STACKS) && need + 2 <= len) {
        d.nstacks = hvd__le16_get(buf + need);
        if (d.nstacks > HVD_CYC_STACKS_MAX) {
            why = "a bound exceeded";
            goto bad;
        }
        d.stacks = buf + need + 2;
        need += 2 + (size_t)d.nstacks * 4;
    } else if (d.ext & HVD_CYC_EXT_STACKS) {
        need += 2;
    }
    if (need != len) {
        why = need > len ? "truncated" : "trailing bytes";
        goto bad;
    }
    const uint8_t *p = buf + HVD_CYC_HEADER_LEN;
    d.hits = p;
    p += words;
    if (d.flags & HVD_CYC_INVALID) {
        d.invalid = p;
        p += words;
    }
    d.payload = d.payload_len ? p : NULL;
    p += d.payload_len;
    d.reason = (const char *)p;
    p += d.reason_len;
    if (d.flags & HVD_CYC_TUNE) {
        d.tune_fusion = hvd__le64_get(p);
        d.tune_cycle_us = hvd__le32_get(p + 8);
        d.tune_knobs = hvd__le32_get(p + 12);
    }
    *m = d;
    return HVD_OK;
bad:
    return hvd__error_set(HVD_ERR_PROTOCOL, "malformed cycle message of %zu bytes from rank %d: %s",
                          len, from_rank, why);
}

int hvd__cycle_stack_rank(const hvd_cycle_msg_t *m, uint16_t i) {
    return (int)hvd__le32_get(m->stacks + (size_t)i * 4);
}

uint64_t hvd__cycle_word(const uint8_t *words, uint32_t w) {
    return hvd__le64_get(words + (size_t)w * 8);
}
