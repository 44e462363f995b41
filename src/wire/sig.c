/* The signature's codec (sig.h). */
#include "wire/sig.h"

#include "wire/le.h"

void hvd__sig_encode(uint8_t *out, const hvd_sig_t *s) {
    out[0] = s->coll;
    out[1] = s->dtype;
    out[2] = s->op;
    out[3] = s->flags;
    hvd__le32_put(out + 4, (uint32_t)s->root);
    hvd__le64_put(out + 8, s->count);
    hvd__le64_put(out + 16, s->extra);
    hvd__le32_put(out + 24, s->seq);
}

void hvd__sig_decode(const uint8_t *in, hvd_sig_t *s) {
    s->coll = in[0];
    s->dtype = in[1];
    s->op = in[2];
    s->flags = in[3];
    s->root = (int32_t)hvd__le32_get(in + 4);
    s->count = hvd__le64_get(in + 8);
    s->extra = hvd__le64_get(in + 16);
    s->seq = hvd__le32_get(in + 24);
}

int hvd__sig_equal(const hvd_sig_t *a, const hvd_sig_t *b) {
    return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op && a->flags == b->flags &&
           a->root == b->root && a->count == b->count && a->extra == b->extra && a->seq == b->seq;
}
