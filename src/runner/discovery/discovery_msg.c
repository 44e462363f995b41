/* Codecs of the NIC discovery messages (layouts in discovery_msg.h). */
#include "runner/discovery/discovery_msg.h"

#include "common/error.h"
#include "wire/le.h"
#include "runner/service/service.h"

#include <stdlib.h>
#include <string.h>

static const uint8_t MAGIC_INPUT[4] = {'H', 'V', 'D', 'T'};
#define INPUT_VERSION 1

static void enc_addrs(hvd_svc_enc_t *e, const hvd_disc_addrs_t *a) {
    if (a->count > HVD_DISC_MAX_ADDRS) {
        e->overflow = 1;
        return;
    }
    hvd__svc_enc_u16(e, (uint16_t)a->count);
    for (size_t i = 0; i < a->count; i++) {
        hvd__svc_enc_str(e, a->items[i].name);
        hvd__svc_enc_str(e, a->items[i].addr);
    }
}

static hvd_status_t dec_count(hvd_svc_dec_t *d, const char *field, size_t max, size_t *n_p) {
    uint16_t n = 0;
    if (hvd__svc_dec_u16(d, field, &n) != HVD_OK)
        return d->status;
    if (n > max)
        return d->status = hvd__error_set(HVD_ERR_PROTOCOL, "%s: %u entries in '%s', at most %zu",
                                          d->what, n, field, max);
    *n_p = n;
    return HVD_OK;
}

static hvd_status_t dec_addrs(hvd_svc_dec_t *d, const char *field, hvd_disc_addrs_t *a) {
    size_t n = 0;
    if (dec_count(d, field, HVD_DISC_MAX_ADDRS, &n) != HVD_OK)
        return d->status;
    a->count = n;
    for (size_t i = 0; i < n; i++) {
        hvd__svc_dec_str(d, "interface name", a->items[i].name, HVD_NIC_NAME_MAX);
        hvd__svc_dec_str(d, "interface address", a->items[i].addr, sizeof a->items[i].addr);
    }
    return d->status;
}

hvd_status_t hvd__disc_register_encode(const hvd_disc_register_t *m, uint8_t *buf, size_t cap,
                                       size_t *len_p) {
    hvd_svc_enc_t e;
    hvd__svc_enc_init(&e, buf, cap);
    hvd__svc_enc_u32(&e, m->index);
    hvd__svc_enc_str(&e, m->host);
    hvd__svc_enc_str(&e, m->host_hash);
    hvd__svc_enc_u16(&e, m->port);
    enc_addrs(&e, &m->addrs);
    if (m->reached_count > HVD_DISC_MAX_ADDRS)
        e.overflow = 1;
    hvd__svc_enc_u16(&e, (uint16_t)m->reached_count);
    for (size_t i = 0; i < m->reached_count && !e.overflow; i++)
        hvd__svc_enc_str(&e, m->reached[i]);
    return hvd__svc_enc_finish(&e, "REGISTER", len_p);
}

hvd_status_t hvd__disc_register_decode(const uint8_t *p, size_t len, hvd_disc_register_t *m_p) {
    hvd_disc_register_t *m = calloc(1, sizeof *m);
    if (!m)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory decoding REGISTER");
    hvd_svc_dec_t d;
    hvd__svc_dec_init(&d, p, len, "REGISTER");
    hvd__svc_dec_u32(&d, "index", &m->index);
    hvd__svc_dec_str(&d, "host", m->host, sizeof m->host);
    hvd__svc_dec_str(&d, "host_hash", m->host_hash, sizeof m->host_hash);
    hvd__svc_dec_u16(&d, "task port", &m->port);
    dec_addrs(&d, "addresses", &m->addrs);
    if (dec_count(&d, "driver addresses reached", HVD_DISC_MAX_ADDRS, &m->reached_count) == HVD_OK)
        for (size_t i = 0; i < m->reached_count; i++)
            hvd__svc_dec_str(&d, "driver address reached", m->reached[i], sizeof m->reached[i]);
    hvd_status_t st = hvd__svc_dec_end(&d);
    if (st == HVD_OK)
        *m_p = *m;
    free(m);
    return st;
}

hvd_status_t hvd__disc_get_task_encode(uint32_t asker, uint32_t index, uint8_t *buf, size_t cap,
                                       size_t *len_p) {
    hvd_svc_enc_t e;
    hvd__svc_enc_init(&e, buf, cap);
    hvd__svc_enc_u32(&e, asker);
    hvd__svc_enc_u32(&e, index);
    return hvd__svc_enc_finish(&e, "GET_TASK", len_p);
}

hvd_status_t hvd__disc_get_task_decode(const uint8_t *p, size_t len, uint32_t *asker_p,
                                       uint32_t *index_p) {
    hvd_svc_dec_t d;
    uint32_t asker = 0, index = 0;
    hvd__svc_dec_init(&d, p, len, "GET_TASK");
    hvd__svc_dec_u32(&d, "asker", &asker);
    hvd__svc_dec_u32(&d, "index", &index);
    hvd_status_t st = hvd__svc_dec_end(&d);
    if (st == HVD_OK)
        *asker_p = asker, *index_p = index;
    return st;
}

hvd_status_t hvd__disc_task_info_encode(const hvd_disc_task_info_t *m, uint8_t *buf, size_t cap,
                                        size_t *len_p) {
    hvd_svc_enc_t e;
    hvd__svc_enc_init(&e, buf, cap);
    hvd__svc_enc_u32(&e, m->index);
    hvd__svc_enc_str(&e, m->host);
    hvd__svc_enc_u16(&e, m->port);
    enc_addrs(&e, &m->addrs);
    return hvd__svc_enc_finish(&e, "TASK_INFO", len_p);
}

hvd_status_t hvd__disc_task_info_decode(const uint8_t *p, size_t len, hvd_disc_task_info_t *m_p) {
    hvd_disc_task_info_t m;
    memset(&m, 0, sizeof m);
    hvd_svc_dec_t d;
    hvd__svc_dec_init(&d, p, len, "TASK_INFO");
    hvd__svc_dec_u32(&d, "index", &m.index);
    hvd__svc_dec_str(&d, "host", m.host, sizeof m.host);
    hvd__svc_dec_u16(&d, "port", &m.port);
    dec_addrs(&d, "addresses", &m.addrs);
    hvd_status_t st = hvd__svc_dec_end(&d);
    if (st == HVD_OK)
        *m_p = m;
    return st;
}

hvd_status_t hvd__disc_report_encode(const hvd_disc_report_t *m, uint8_t *buf, size_t cap,
                                     size_t *len_p) {
    hvd_svc_enc_t e;
    hvd__svc_enc_init(&e, buf, cap);
    hvd__svc_enc_u32(&e, m->from);
    hvd__svc_enc_u32(&e, m->to);
    enc_addrs(&e, &m->reached);
    if (m->failed_count > HVD_DISC_MAX_ADDRS)
        e.overflow = 1;
    if (m->failed_count && !e.overflow) {
        hvd__svc_enc_u16(&e, (uint16_t)m->failed_count);
        for (size_t i = 0; i < m->failed_count; i++) {
            hvd__svc_enc_str(&e, m->failed[i].where.name);
            hvd__svc_enc_str(&e, m->failed[i].where.addr);
            hvd__svc_enc_u8(&e, m->failed[i].cause);
            hvd__svc_enc_str(&e, m->failed[i].detail);
        }
    }
    return hvd__svc_enc_finish(&e, "REPORT", len_p);
}

uint8_t hvd__disc_cause_of(hvd_status_t st, int connected, const char *msg) {
    if (st == HVD_ERR_TIMEOUT)
        return HVD_DISC_CAUSE_TIMEOUT;
    if (!connected && st == HVD_ERR_PEER_LOST && strstr(msg, "refused"))
        return HVD_DISC_CAUSE_REFUSED;
    if (!connected && (strstr(msg, "No route") || strstr(msg, "unreachable")))
        return HVD_DISC_CAUSE_NO_ROUTE;
    if (connected && (st == HVD_ERR_PEER_LOST || strstr(msg, "rejected")))
        return HVD_DISC_CAUSE_SECRET;
    return HVD_DISC_CAUSE_OTHER;
}

const char *hvd__disc_cause_name(uint8_t cause) {
    static const char *const names[] = {"failed", "refused", "no route", "timed out",
                                        "wrong secret"};
    return cause <= HVD_DISC_CAUSE_MAX ? names[cause] : names[0];
}

hvd_status_t hvd__disc_report_decode(const uint8_t *p, size_t len, hvd_disc_report_t *m_p) {
    hvd_disc_report_t m;
    memset(&m, 0, sizeof m);
    hvd_svc_dec_t d;
    hvd__svc_dec_init(&d, p, len, "REPORT");
    hvd__svc_dec_u32(&d, "from", &m.from);
    hvd__svc_dec_u32(&d, "to", &m.to);
    dec_addrs(&d, "reached addresses", &m.reached);
    if (d.status == HVD_OK && d.off < d.len &&
        dec_count(&d, "failed addresses", HVD_DISC_MAX_ADDRS, &m.failed_count) == HVD_OK) {
        if (m.failed_count == 0) /* (written only when there are some: one encoding) */
            d.status = hvd__error_set(HVD_ERR_PROTOCOL, "REPORT: an empty failed list");
        for (size_t i = 0; i < m.failed_count && d.status == HVD_OK; i++) {
            hvd_disc_failure_t *f = &m.failed[i];
            hvd__svc_dec_str(&d, "interface name", f->where.name, HVD_NIC_NAME_MAX);
            hvd__svc_dec_str(&d, "interface address", f->where.addr, sizeof f->where.addr);
            hvd__svc_dec_u8(&d, "cause", &f->cause);
            hvd__svc_dec_str(&d, "detail", f->detail, sizeof f->detail);
            if (d.status == HVD_OK && f->cause > HVD_DISC_CAUSE_MAX)
                d.status = hvd__error_set(HVD_ERR_PROTOCOL, "REPORT: unknown cause %u", f->cause);
        }
    }
    hvd_status_t st = hvd__svc_dec_end(&d);
    if (st == HVD_OK)
        *m_p = m;
    return st;
}

hvd_status_t hvd__disc_index_encode(uint32_t index, uint8_t *buf, size_t cap, size_t *len_p) {
    hvd_svc_enc_t e;
    hvd__svc_enc_init(&e, buf, cap);
    hvd__svc_enc_u32(&e, index);
    return hvd__svc_enc_finish(&e, "index message", len_p);
}

hvd_status_t hvd__disc_index_decode(const uint8_t *p, size_t len, const char *what,
                                    uint32_t *index_p) {
    hvd_svc_dec_t d;
    uint32_t index = 0;
    hvd__svc_dec_init(&d, p, len, what);
    hvd__svc_dec_u32(&d, "index", &index);
    hvd_status_t st = hvd__svc_dec_end(&d);
    if (st == HVD_OK)
        *index_p = index;
    return st;
}

/* --- task input blob ---------------------------------------------------------------------- */

hvd_status_t hvd__disc_input_encode(const hvd_disc_input_t *in, uint8_t **buf_p, size_t *len_p) {
    size_t cap = HVD_DISC_INPUT_HEAD_LEN + HVD_DISC_INPUT_MAX_BODY;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a task's input");
    hvd_svc_enc_t e;
    hvd__svc_enc_init(&e, buf + HVD_DISC_INPUT_HEAD_LEN, HVD_DISC_INPUT_MAX_BODY);
    hvd__svc_enc_bytes(&e, in->secret.bytes, HVD_SECRET_LEN);
    hvd__svc_enc_u32(&e, in->index);
    hvd__svc_enc_u32(&e, in->n);
    hvd__svc_enc_u32(&e, in->timeout_s);
    hvd__svc_enc_str(&e, in->host);
    hvd__svc_enc_u16(&e, in->driver_port);
    if (in->driver_addr_count > HVD_DISC_MAX_ADDRS || in->nic_count > HVD_NIC_FILTER_MAX)
        e.overflow = 1;
    hvd__svc_enc_u16(&e, (uint16_t)in->driver_addr_count);
    for (size_t i = 0; i < in->driver_addr_count && !e.overflow; i++)
        hvd__svc_enc_str(&e, in->driver_addrs[i]);
    hvd__svc_enc_u16(&e, (uint16_t)in->nic_count);
    for (size_t i = 0; i < in->nic_count && !e.overflow; i++)
        hvd__svc_enc_str(&e, in->nics[i]);
    if (in->flags)
        hvd__svc_enc_u16(&e, in->flags);
    size_t body = 0;
    hvd_status_t st = hvd__svc_enc_finish(&e, "task input", &body);
    if (st != HVD_OK) {
        hvd__disc_input_free(buf, cap);
        return st;
    }
    memcpy(buf, MAGIC_INPUT, 4);
    hvd__le16_put(buf + 4, INPUT_VERSION);
    hvd__le16_put(buf + 6, 0);
    hvd__le32_put(buf + 8, (uint32_t)body);
    *buf_p = buf;
    *len_p = HVD_DISC_INPUT_HEAD_LEN + body;
    return HVD_OK;
}

void hvd__disc_input_free(uint8_t *buf, size_t len) {
    if (!buf)
        return;
    explicit_bzero(buf, len);
    free(buf);
}

hvd_status_t hvd__disc_input_head_decode(const uint8_t head[HVD_DISC_INPUT_HEAD_LEN],
                                         size_t *body_len_p) {
    if (memcmp(head, MAGIC_INPUT, 4) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "the task input does not start with the task "
                                                "input magic (was this program started by "
                                                "horovodrun?)");
    uint16_t version = hvd__le16_get(head + 4);
    if (version != INPUT_VERSION)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "task input of version %u, this program reads version %d (a "
                              "different hvd version on this host?)",
                              version, INPUT_VERSION);
    if (hvd__le16_get(head + 6) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "task input with non-zero reserved bytes");
    uint32_t len = hvd__le32_get(head + 8);
    if (len > HVD_DISC_INPUT_MAX_BODY)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "task input of %u bytes, at most %u", len,
                              HVD_DISC_INPUT_MAX_BODY);
    *body_len_p = len;
    return HVD_OK;
}

hvd_status_t hvd__disc_input_body_decode(const uint8_t *p, size_t len, hvd_disc_input_t *in_p) {
    hvd_disc_input_t *in = calloc(1, sizeof *in);
    if (!in)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory decoding the task input");
    hvd_svc_dec_t d;
    hvd__svc_dec_init(&d, p, len, "task input");
    hvd__svc_dec_bytes(&d, "secret", in->secret.bytes, HVD_SECRET_LEN);
    hvd__svc_dec_u32(&d, "index", &in->index);
    hvd__svc_dec_u32(&d, "n", &in->n);
    hvd__svc_dec_u32(&d, "timeout", &in->timeout_s);
    hvd__svc_dec_str(&d, "host", in->host, sizeof in->host);
    hvd__svc_dec_u16(&d, "driver port", &in->driver_port);
    if (dec_count(&d, "driver addresses", HVD_DISC_MAX_ADDRS, &in->driver_addr_count) == HVD_OK)
        for (size_t i = 0; i < in->driver_addr_count; i++)
            hvd__svc_dec_str(&d, "driver address", in->driver_addrs[i], sizeof in->driver_addrs[i]);
    if (dec_count(&d, "network interfaces", HVD_NIC_FILTER_MAX, &in->nic_count) == HVD_OK)
        for (size_t i = 0; i < in->nic_count; i++)
            hvd__svc_dec_str(&d, "network interface", in->nics[i], sizeof in->nics[i]);
    if (d.status == HVD_OK && d.off < d.len &&
        hvd__svc_dec_u16(&d, "flags", &in->flags) == HVD_OK &&
        (in->flags == 0 || (in->flags & ~HVD_DISC_FLAG_MESH)))
        d.status = hvd__error_set(HVD_ERR_PROTOCOL, "task input: flags %#x", in->flags);
    hvd_status_t st = hvd__svc_dec_end(&d);
    if (st == HVD_OK && (in->n == 0 || in->n > HVD_DISC_MAX_HOSTS || in->index >= in->n))
        st = hvd__error_set(HVD_ERR_PROTOCOL, "task input: index %u of %u hosts is out of range",
                            in->index, in->n);
    if (st == HVD_OK && in->driver_addr_count == 0)
        st = hvd__error_set(HVD_ERR_PROTOCOL, "task input: no driver address");
    if (st == HVD_OK)
        *in_p = *in;
    explicit_bzero(in, sizeof *in);
    free(in);
    return st;
}
