/* Codecs of the negotiation messages (negotiate.h). */
#include "wire/negotiate.h"

#include "common/error.h"
#include "wire/le.h"

#include <stdlib.h>
#include <string.h>

/* ---- writing: a growable buffer; the first failure sticks ---- */

typedef struct {
    uint8_t *buf;
    size_t len, cap;
    int oom;
} writer_t;

static uint8_t *w_take(writer_t *w, size_t n) {
    if (w->oom)
        return NULL;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *b = realloc(w->buf, cap);
        if (!b) {
            w->oom = 1;
            return NULL;
        }
        w->buf = b;
        w->cap = cap;
    }
    uint8_t *p = w->buf + w->len;
    w->len += n;
    return p;
}

static void w_u8(writer_t *w, uint8_t v) {
    uint8_t *p = w_take(w, 1);
    if (p)
        *p = v;
}
static void w_u16(writer_t *w, uint16_t v) {
    uint8_t *p = w_take(w, 2);
    if (p)
        hvd__le16_put(p, v);
}
static void w_u32(writer_t *w, uint32_t v) {
    uint8_t *p = w_take(w, 4);
    if (p)
        hvd__le32_put(p, v);
}
static void w_u64(writer_t *w, uint64_t v) {
    uint8_t *p = w_take(w, 8);
    if (p)
        hvd__le64_put(p, v);
}
static void w_f64(writer_t *w, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    w_u64(w, bits);
}
static void w_bytes(writer_t *w, const void *s, size_t n) {
    uint8_t *p = w_take(w, n);
    if (p && n)
        memcpy(p, s, n);
}

static hvd_status_t check_name(const char *name, const char *what) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > HVD_NEG_NAME_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: a tensor name must have 1 to %d bytes",
                              what, HVD_NEG_NAME_MAX);
    return HVD_OK;
}

static void w_string(writer_t *w, const char *s) {
    size_t n = strlen(s);
    w_u16(w, (uint16_t)n);
    w_bytes(w, s, n);
}

static void w_header(writer_t *w, const char *magic, int shutdown, uint32_t count) {
    w_bytes(w, magic, 4);
    w_u16(w, HVD_NEG_VERSION);
    w_u16(w, shutdown ? 1 : 0);
    w_u32(w, count);
}

static hvd_status_t w_finish(writer_t *w, uint8_t **buf_p, size_t *len_p) {
    if (w->oom) {
        free(w->buf);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory encoding a negotiation message");
    }
    *buf_p = w->buf;
    *len_p = w->len;
    return HVD_OK;
}

hvd_status_t hvd__neg_requests_encode(const hvd_request_list_t *l, uint8_t **buf_p, size_t *len_p) {
    writer_t w = {0};
    w_header(&w, "HVDQ", l->shutdown, l->count);
    for (uint32_t i = 0; i < l->count; i++) {
        const hvd_request_t *r = &l->items[i];
        hvd_status_t st = check_name(r->name, "request");
        if (st == HVD_OK && r->key && strlen(r->key) > HVD_NEG_NAME_MAX)
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "request %s: a key of over %d bytes", r->name,
                                HVD_NEG_NAME_MAX);
        if (st == HVD_OK && r->ndims > HVD_NEG_MAX_DIMS)
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "request %s: %u dimensions (at most %d)",
                                r->name, r->ndims, HVD_NEG_MAX_DIMS);
        if (st != HVD_OK) {
            free(w.buf);
            return st;
        }
        w_u32(&w, (uint32_t)r->rank);
        w_u8(&w, r->type);
        w_u8(&w, r->dtype);
        w_u8(&w, r->op);
        w_u8(&w, r->ndims);
        w_u32(&w, (uint32_t)r->root);
        w_u32(&w, (uint32_t)r->pset);
        w_u32(&w, (uint32_t)r->pset_size);
        w_f64(&w, r->prescale);
        w_f64(&w, r->postscale);
        for (int d = 0; d < r->ndims; d++)
            w_u64(&w, (uint64_t)r->dims[d]);
        w_string(&w, r->name);
        w_u32(&w, r->timeout_ms);
        w_string(&w, r->key ? r->key : "");
    }
    return w_finish(&w, buf_p, len_p);
}

hvd_status_t hvd__neg_responses_encode(const hvd_response_list_t *l, uint8_t **buf_p,
                                       size_t *len_p) {
    writer_t w = {0};
    w_header(&w, "HVDP", l->shutdown, l->count);
    for (uint32_t i = 0; i < l->count; i++) {
        const hvd_response_t *r = &l->items[i];
        const char *err = r->error ? r->error : "";
        hvd_status_t st =
            strlen(err) > HVD_NEG_ERROR_MAX
                ? hvd__error_set(HVD_ERR_INVALID_ARG, "response error message over %d bytes",
                                 HVD_NEG_ERROR_MAX)
                : HVD_OK;
        for (uint32_t k = 0; st == HVD_OK && k < r->nnames; k++)
            st = check_name(r->names[k], "response");
        if (st != HVD_OK) {
            free(w.buf);
            return st;
        }
        w_u8(&w, r->type);
        w_u8(&w, r->dtype);
        w_u8(&w, r->op);
        w_u8(&w, r->status);
        w_u32(&w, (uint32_t)r->last_joined_rank);
        w_u32(&w, (uint32_t)r->pset);
        w_f64(&w, r->prescale);
        w_f64(&w, r->postscale);
        w_u32(&w, r->nnames);
        for (uint32_t k = 0; k < r->nnames; k++)
            w_string(&w, r->names[k]);
        w_u32(&w, r->nsizes);
        for (uint32_t k = 0; k < r->nsizes; k++)
            w_u64(&w, (uint64_t)r->sizes[k]);
        w_string(&w, err);
    }
    return w_finish(&w, buf_p, len_p);
}

/* ---- reading: every take checks what remains; the first failure sticks ---- */

typedef struct {
    const uint8_t *p, *end;
    const char *bad; /* what was wrong, or NULL */
} reader_t;

static const uint8_t *r_take(reader_t *r, size_t n, const char *what) {
    if (r->bad)
        return NULL;
    if ((size_t)(r->end - r->p) < n) {
        r->bad = what;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

static uint8_t r_u8(reader_t *r, const char *what) {
    const uint8_t *p = r_take(r, 1, what);
    return p ? *p : 0;
}
static uint16_t r_u16(reader_t *r, const char *what) {
    const uint8_t *p = r_take(r, 2, what);
    return p ? hvd__le16_get(p) : 0;
}
static uint32_t r_u32(reader_t *r, const char *what) {
    const uint8_t *p = r_take(r, 4, what);
    return p ? hvd__le32_get(p) : 0;
}
static uint64_t r_u64(reader_t *r, const char *what) {
    const uint8_t *p = r_take(r, 8, what);
    return p ? hvd__le64_get(p) : 0;
}
static double r_f64(reader_t *r, const char *what) {
    uint64_t bits = r_u64(r, what);
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

/* A string of at most max bytes (at least min), without NUL; malloc'd. */
static char *r_string(reader_t *r, size_t min, size_t max, const char *what) {
    uint16_t n = r_u16(r, what);
    if (!r->bad && (n < min || n > max))
        r->bad = what;
    const uint8_t *p = r_take(r, n, what);
    if (!p)
        return NULL;
    if (memchr(p, 0, n)) {
        r->bad = what;
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        r->bad = "out of memory";
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Check magic and version, read flags and count; count must fit in what remains at
 * min_item bytes per item. */
static uint32_t r_header(reader_t *r, const char *magic, size_t min_item, int *shutdown_p) {
    const uint8_t *m = r_take(r, 4, "truncated header");
    if (m && memcmp(m, magic, 4) != 0)
        r->bad = "wrong magic";
    uint16_t version = r_u16(r, "truncated header");
    if (!r->bad && version != HVD_NEG_VERSION)
        r->bad = "unsupported version (mixed hvd versions in one job?)";
    uint16_t flags = r_u16(r, "truncated header");
    if (!r->bad && flags > 1)
        r->bad = "unknown flags";
    *shutdown_p = flags & 1;
    uint32_t count = r_u32(r, "truncated header");
    if (!r->bad && (size_t)count > (size_t)(r->end - r->p) / min_item)
        r->bad = "item count larger than the message";
    return r->bad ? 0 : count;
}

static hvd_status_t r_fail(reader_t *r, const char *what) {
    return hvd__error_set(HVD_ERR_PROTOCOL, "malformed %s: %s", what, r->bad);
}

void hvd__neg_requests_fini(hvd_request_list_t *l) {
    for (uint32_t i = 0; l->items && i < l->count; i++) {
        free(l->items[i].name);
        free(l->items[i].key);
    }
    free(l->items);
    memset(l, 0, sizeof *l);
}

void hvd__neg_responses_fini(hvd_response_list_t *l) {
    for (uint32_t i = 0; l->items && i < l->count; i++) {
        hvd_response_t *r = &l->items[i];
        for (uint32_t k = 0; r->names && k < r->nnames; k++)
            free(r->names[k]);
        free(r->names);
        free(r->sizes);
        free(r->error);
    }
    free(l->items);
    memset(l, 0, sizeof *l);
}

hvd_status_t hvd__neg_requests_decode(const uint8_t *buf, size_t len, hvd_request_list_t *l_p) {
    reader_t r = {.p = buf, .end = buf + len};
    hvd_request_list_t l = {0};
    /* the smallest request: fixed fields, a one-byte name, a deadline and an empty key */
    l.count = r_header(&r, "HVDQ", 4 + 4 + 4 + 8 + 16 + 2 + 1 + 4 + 2, &l.shutdown);
    if (r.bad)
        return r_fail(&r, "request list");
    l.items = calloc(l.count ? l.count : 1, sizeof *l.items);
    if (!l.items)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory decoding a request list");
    uint32_t done = 0;
    for (; done < l.count && !r.bad; done++) {
        hvd_request_t *q = &l.items[done];
        q->rank = (int32_t)r_u32(&r, "truncated request");
        q->type = r_u8(&r, "truncated request");
        q->dtype = r_u8(&r, "truncated request");
        q->op = r_u8(&r, "truncated request");
        q->ndims = r_u8(&r, "truncated request");
        if (!r.bad && q->ndims > HVD_NEG_MAX_DIMS)
            r.bad = "too many dimensions";
        q->root = (int32_t)r_u32(&r, "truncated request");
        q->pset = (int32_t)r_u32(&r, "truncated request");
        q->pset_size = (int32_t)r_u32(&r, "truncated request");
        if (!r.bad && (q->pset < 0 || q->pset_size < 0))
            r.bad = "negative process set";
        q->prescale = r_f64(&r, "truncated request");
        q->postscale = r_f64(&r, "truncated request");
        for (int d = 0; d < q->ndims && !r.bad; d++)
            q->dims[d] = (int64_t)r_u64(&r, "truncated dimensions");
        q->name = r_string(&r, 1, HVD_NEG_NAME_MAX, "bad tensor name");
        q->timeout_ms = r_u32(&r, "truncated request");
        q->key = r_string(&r, 0, HVD_NEG_NAME_MAX, "bad key");
        if (q->key && !*q->key) {
            free(q->key);
            q->key = NULL;
        }
    }
    if (!r.bad && r.p != r.end)
        r.bad = "trailing bytes";
    if (r.bad) {
        l.count = done;
        hvd__neg_requests_fini(&l);
        return r_fail(&r, "request list");
    }
    *l_p = l;
    return HVD_OK;
}

hvd_status_t hvd__neg_responses_decode(const uint8_t *buf, size_t len, hvd_response_list_t *l_p) {
    reader_t r = {.p = buf, .end = buf + len};
    hvd_response_list_t l = {0};
    l.count = r_header(&r, "HVDP", 4 + 4 + 4 + 16 + 4 + 4 + 2, &l.shutdown);
    if (r.bad)
        return r_fail(&r, "response list");
    l.items = calloc(l.count ? l.count : 1, sizeof *l.items);
    if (!l.items)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory decoding a response list");
    uint32_t done = 0;
    for (; done < l.count && !r.bad; done++) {
        hvd_response_t *q = &l.items[done];
        q->type = r_u8(&r, "truncated response");
        q->dtype = r_u8(&r, "truncated response");
        q->op = r_u8(&r, "truncated response");
        q->status = r_u8(&r, "truncated response");
        if (!r.bad && q->status > HVD_NEG_FAIL_TIMEOUT)
            r.bad = "unknown status";
        q->last_joined_rank = (int32_t)r_u32(&r, "truncated response");
        q->pset = (int32_t)r_u32(&r, "truncated response");
        q->prescale = r_f64(&r, "truncated response");
        q->postscale = r_f64(&r, "truncated response");
        uint32_t nn = r_u32(&r, "truncated response");
        /* each name takes at least 3 bytes: bound the count before allocating */
        if (!r.bad && nn > (size_t)(r.end - r.p) / 3)
            r.bad = "name count larger than the message";
        if (!r.bad && nn) {
            q->names = calloc(nn, sizeof *q->names);
            if (!q->names)
                r.bad = "out of memory";
        }
        for (uint32_t k = 0; k < nn && !r.bad; k++, q->nnames++)
            q->names[k] = r_string(&r, 1, HVD_NEG_NAME_MAX, "bad tensor name");
        uint32_t ns = r_u32(&r, "truncated response");
        if (!r.bad && ns > (size_t)(r.end - r.p) / 8)
            r.bad = "size count larger than the message";
        if (!r.bad && ns) {
            q->sizes = malloc((size_t)ns * sizeof *q->sizes);
            if (!q->sizes)
                r.bad = "out of memory";
        }
        for (uint32_t k = 0; k < ns && !r.bad; k++, q->nsizes++)
            q->sizes[k] = (int64_t)r_u64(&r, "truncated sizes");
        q->error = r_string(&r, 0, HVD_NEG_ERROR_MAX, "bad error message");
    }
    if (!r.bad && r.p != r.end)
        r.bad = "trailing bytes";
    if (r.bad) {
        l.count = done;
        hvd__neg_responses_fini(&l);
        return r_fail(&r, "response list");
    }
    *l_p = l;
    return HVD_OK;
}

const char *hvd__neg_type_name(int type) {
    static const char *const names[] = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "JOIN",
                                        "ADASUM",    "ALLTOALL",  "BARRIER",   "REDUCESCATTER",
                                        "ERROR",     "P2P"};
    return type >= 0 && type <= HVD_REQ_P2P ? names[type] : "UNKNOWN";
}
