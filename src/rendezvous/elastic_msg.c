/* Names, formatting and strict parsing of the elastic protocol's keys and values (elastic_msg.h). A
 * rejected value is quoted in the error made printable (control bytes and non-ASCII as '?'), so a
 * driver's garbage never reaches a terminal raw. */
#include "rendezvous/elastic_msg.h"

#include "common/error.h"
#include "rendezvous/kv_protocol.h"

#include <stdio.h>
#include <string.h>

void hvd__elastic_msg_scope(hvd_elastic_scope_t kind, int round, char *out) {
    static const char *const prefix[] = {
        [HVD_ELASTIC_SCOPE_INIT] = "init",
        [HVD_ELASTIC_SCOPE_EVENTS] = "elastic_ev",
        [HVD_ELASTIC_SCOPE_READY] = "elastic_ready",
        [HVD_ELASTIC_SCOPE_ASSIGN] = "elastic_assign",
    };
    snprintf(out, HVD_ELASTIC_NAME_MAX, "%s.r%d", prefix[kind], round);
}

hvd_status_t hvd__elastic_msg_slot(const char *host, int local_rank, char *out) {
    char slot[HVD_ELASTIC_NAME_MAX];
    int n = snprintf(slot, sizeof slot, "%s:%d", host ? host : "", local_rank);
    if (n < 0 || (size_t)n >= sizeof slot || local_rank < 0 ||
        !hvd__kv_name_valid(slot, (size_t)n, 0)) {
        char shown[80];
        hvd__elastic_msg_printable(host ? host : "", host ? strlen(host) : 0, shown, sizeof shown);
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "HOROVOD_HOSTNAME='%s' with local rank %d does not make a valid "
                              "elastic slot name (1-%d characters of A-Z a-z 0-9 _ . : -)",
                              shown, local_rank, HVD_KV_NAME_MAX);
    }
    memcpy(out, slot, (size_t)n + 1);
    return HVD_OK;
}

void hvd__elastic_msg_printable(const char *text, size_t len, char *out, size_t out_size) {
    if (out_size == 0)
        return;
    size_t room = out_size - 1, i = 0;
    int cut = len > room;
    if (cut)
        room = room > 3 ? room - 3 : 0;
    for (; i < len && i < room; i++) {
        unsigned char c = (unsigned char)text[i];
        out[i] = c < 0x20 || c > 0x7e ? '?' : (char)c;
    }
    if (cut && out_size > 4) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
}

static hvd_status_t garbage(const char *what, const char *text, size_t len, const char *why) {
    char shown[160];
    hvd__elastic_msg_printable(text, len, shown, sizeof shown);
    return hvd__error_set(HVD_ERR_PROTOCOL, "malformed %s from the elastic driver: '%s' (%s)", what,
                          shown, why);
}

const char *hvd__elastic_msg_ready_str(hvd_elastic_ready_t reason) {
    return reason == HVD_ELASTIC_READY_UPDATE ? "update" : "failure";
}

hvd_status_t hvd__elastic_msg_ready_parse(const char *text, size_t len,
                                          hvd_elastic_ready_t *reason_p) {
    if (len == 7 && memcmp(text, "failure", 7) == 0) {
        *reason_p = HVD_ELASTIC_READY_FAILURE;
        return HVD_OK;
    }
    if (len == 6 && memcmp(text, "update", 6) == 0) {
        *reason_p = HVD_ELASTIC_READY_UPDATE;
        return HVD_OK;
    }
    char shown[80];
    hvd__elastic_msg_printable(text, len, shown, sizeof shown);
    return hvd__error_set(HVD_ERR_PROTOCOL,
                          "malformed elastic ready record '%s' (want failure or update)", shown);
}

/* A stop message: printable ASCII, tab and newline (a driver's message may span lines). */
static int message_ok(const char *m, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)m[i];
        if ((c < 0x20 && c != '\t' && c != '\n') || c > 0x7e)
            return 0;
    }
    return 1;
}

/* An unsigned decimal of at most 9 digits, no sign, no leading zero: 0 and the value, or
 * -1. */
static int parse_uint(const char *s, size_t len, int *out) {
    if (len == 0 || len > 9 || (len > 1 && s[0] == '0'))
        return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

static const char *const FIELDS[] = {"rank",       "size",       "local_rank", "local_size",
                                     "cross_rank", "cross_size", "sync"};
#define NFIELDS 7

hvd_status_t hvd__elastic_msg_assign_parse(const char *text, size_t len,
                                           hvd_elastic_assign_t *out) {
    static const char what[] = "assignment";
    if (!text)
        return hvd__error_set(HVD_ERR_PROTOCOL, "no elastic assignment");
    if (len > HVD_ELASTIC_VALUE_MAX)
        return garbage(what, text, len, "too long");
    hvd_elastic_assign_t a;
    memset(&a, 0, sizeof a);
    if (len == 7 && memcmp(text, "removed", 7) == 0) {
        a.verdict = HVD_ELASTIC_REMOVED;
        *out = a;
        return HVD_OK;
    }
    if (len >= 4 && memcmp(text, "stop", 4) == 0 && (len == 4 || text[4] == ' ')) {
        const char *m = len > 4 ? text + 5 : text + 4;
        size_t mlen = len > 4 ? len - 5 : 0;
        if (!message_ok(m, mlen))
            return garbage(what, text, len, "control characters in the stop message");
        a.verdict = HVD_ELASTIC_STOP;
        memcpy(a.message, m, mlen);
        a.message[mlen] = '\0';
        *out = a;
        return HVD_OK;
    }
    int values[NFIELDS], seen[NFIELDS] = {0};
    size_t pos = 0;
    while (pos < len) {
        const char *tok = text + pos;
        const char *sp = memchr(tok, ' ', len - pos);
        size_t tlen = sp ? (size_t)(sp - tok) : len - pos;
        if (sp && (size_t)(sp - text) + 1 == len)
            return garbage(what, text, len, "trailing space");
        const char *eq = memchr(tok, '=', tlen);
        if (!eq)
            return garbage(what, text, len, "a field without '='");
        size_t klen = (size_t)(eq - tok);
        int k = -1;
        for (int i = 0; i < NFIELDS; i++)
            if (strlen(FIELDS[i]) == klen && memcmp(FIELDS[i], tok, klen) == 0)
                k = i;
        if (k < 0)
            return garbage(what, text, len, "unknown field");
        if (seen[k])
            return garbage(what, text, len, "a field given twice");
        if (parse_uint(eq + 1, tlen - klen - 1, &values[k]) != 0)
            return garbage(what, text, len, "a value that is not an unsigned decimal");
        seen[k] = 1;
        pos += tlen + (sp ? 1 : 0);
    }
    for (int i = 0; i < NFIELDS; i++)
        if (!seen[i]) {
            char why[48];
            snprintf(why, sizeof why, "no %s", FIELDS[i]);
            return garbage(what, text, len, why);
        }
    a.verdict = HVD_ELASTIC_ASSIGNED;
    a.rank = values[0];
    a.size = values[1];
    a.local_rank = values[2];
    a.local_size = values[3];
    a.cross_rank = values[4];
    a.cross_size = values[5];
    a.sync = values[6];
    if (a.sync > 1)
        return garbage(what, text, len, "sync is not 0 or 1");
    if (a.size < 1 || a.rank >= a.size || a.local_rank >= a.local_size || a.local_size > a.size ||
        a.cross_rank >= a.cross_size || a.cross_size > a.size)
        return garbage(what, text, len, "inconsistent ranks and sizes");
    *out = a;
    return HVD_OK;
}

int hvd__elastic_msg_assign_format(const hvd_elastic_assign_t *a, char *out, size_t n) {
    int w;
    switch (a->verdict) {
    case HVD_ELASTIC_REMOVED:
        w = snprintf(out, n, "removed");
        break;
    case HVD_ELASTIC_STOP: {
        size_t mlen = strnlen(a->message, sizeof a->message);
        if (!message_ok(a->message, mlen))
            return -1;
        w = mlen ? snprintf(out, n, "stop %s", a->message) : snprintf(out, n, "stop");
        break;
    }
    case HVD_ELASTIC_ASSIGNED:
        w = snprintf(out, n,
                     "rank=%d size=%d local_rank=%d local_size=%d cross_rank=%d cross_size=%d "
                     "sync=%d",
                     a->rank, a->size, a->local_rank, a->local_size, a->cross_rank, a->cross_size,
                     a->sync ? 1 : 0);
        break;
    default:
        return -1;
    }
    if (w < 0 || (size_t)w >= n || w > HVD_ELASTIC_VALUE_MAX)
        return -1;
    return w;
}
