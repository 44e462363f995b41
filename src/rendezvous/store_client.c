/* The store client (store_client.h) on http_client.h. Each attempt is signed afresh, so a retry is
 * never taken for a replay; retries pause 20 ms, doubling up to 640 ms. A held read gives the HTTP
 * exchange 2 s beyond the wait it asks for. Also the decoders of the scope and count answers. */
#include "rendezvous/store_client.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "http/http_client.h"
#include "os/socket.h"
#include "rendezvous/kv_auth.h"
#include "rendezvous/kv_protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A server answering a held request is given this long past the wait it was asked for. */
#define WAIT_SLACK_MS 2000
/* Largest scope body a worker accepts (the server's total store bound). */
#define MAX_SCOPE_BODY ((size_t)HVD_KV_DEFAULT_MAX_TOTAL + (64u << 20))

struct hvd_store_client {
    char *host;
    int port;
    hvd_secret_t secret;
};

hvd_status_t hvd__store_client_create(const char *host, int port, const hvd_secret_t *secret,
                                      hvd_store_client_t **client_p) {
    if (!host || !*host || port <= 0 || port > 65535)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "invalid rendezvous address %s:%d",
                              host ? host : "(null)", port);
    hvd_store_client_t *c = calloc(1, sizeof *c);
    if (!c || !(c->host = strdup(host))) {
        free(c);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory creating a store client");
    }
    c->port = port;
    c->secret = *secret;
    *client_p = c;
    return HVD_OK;
}

void hvd__store_client_destroy(hvd_store_client_t *c) {
    if (!c)
        return;
    hvd__secret_wipe(&c->secret);
    free(c->host);
    free(c);
}

typedef struct {
    const char *method;
    const char *scope, *key;
    const void *body;
    size_t body_len;
    int wait_ms;    /* -1: no wait header */
    long min_count; /* -1: no count header */
    size_t max_body;
    int64_t deadline_ms;
    const char *want_header; /* NULL, or a response header to return */
    int count_only;          /* send HVD_KV_COUNT_ONLY_HEADER */
} store_request_t;

/* Send one signed request, retrying transient failures until the deadline. On HVD_OK the
 * response holds a non-transient status for the caller to interpret. */
static hvd_status_t exchange(hvd_store_client_t *c, const store_request_t *r,
                             hvd_http_response_t *resp_p) {
    if (!hvd__kv_name_valid(r->scope, strlen(r->scope), 0) ||
        !hvd__kv_name_valid(r->key, strlen(r->key), 1))
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "invalid rendezvous name '%s/%s' (1-%d characters of "
                              "A-Z a-z 0-9 _ . : -)",
                              r->scope, r->key, HVD_KV_NAME_MAX);
    char target[2 * HVD_KV_NAME_MAX + 4];
    snprintf(target, sizeof target, "/%s/%s", r->scope, r->key);
    int64_t pause = 20;
    int attempt = 0;
    for (;;) {
        attempt++;
        char auth[HVD_KV_AUTH_MAX], wait_buf[24], count_buf[24];
        hvd_status_t st =
            hvd__kv_auth_sign(&c->secret, r->method, target, r->body, r->body_len, auth);
        if (st != HVD_OK)
            return st;
        hvd_http_header_t headers[4] = {{HVD_KV_AUTH_HEADER, auth}};
        size_t nh = 1;
        int64_t http_deadline = r->deadline_ms;
        if (r->wait_ms >= 0) {
            int wait = hvd__clock_remaining_ms(r->deadline_ms);
            if (wait > HVD_KV_MAX_WAIT_MS)
                wait = HVD_KV_MAX_WAIT_MS;
            snprintf(wait_buf, sizeof wait_buf, "%d", wait);
            headers[nh++] = (hvd_http_header_t){HVD_KV_WAIT_HEADER, wait_buf};
            http_deadline = hvd__clock_now_ms() + wait + WAIT_SLACK_MS;
        }
        if (r->min_count >= 0) {
            snprintf(count_buf, sizeof count_buf, "%ld", r->min_count);
            headers[nh++] = (hvd_http_header_t){HVD_KV_COUNT_HEADER, count_buf};
        }
        if (r->count_only)
            headers[nh++] = (hvd_http_header_t){HVD_KV_COUNT_ONLY_HEADER, "1"};
        hvd_http_request_t req = {.host = c->host,
                                  .port = c->port,
                                  .method = r->method,
                                  .target = target,
                                  .headers = headers,
                                  .header_count = nh,
                                  .body = r->body,
                                  .body_len = r->body_len,
                                  .max_response_body = r->max_body,
                                  .want_header = r->want_header,
                                  .deadline_ms = http_deadline};
        st = hvd__http_request(&req, resp_p);
        int transient = st == HVD_ERR_PEER_LOST || st == HVD_ERR_IO ||
                        (st == HVD_OK && resp_p->status >= 500 && resp_p->status != 501 &&
                         resp_p->status != 507);
        if (!transient)
            return st == HVD_OK ? HVD_OK
                                : hvd__error_wrap(st, "rendezvous %s %s", r->method, target);
        if (st == HVD_OK) {
            st = hvd__error_set(HVD_ERR_IO, "rendezvous store at %s:%d answered %d to %s %s",
                                c->host, c->port, resp_p->status, r->method, target);
            hvd__http_response_fini(resp_p);
        }
        if (hvd__clock_remaining_ms(r->deadline_ms) <= pause)
            return hvd__error_wrap(HVD_ERR_TIMEOUT, "gave up after %d attempts", attempt);
        HVD_LOG_D("retrying rendezvous %s %s after: %s", r->method, target, hvd_last_error());
        if (hvd__socket_pause(pause) != HVD_OK)
            return hvd__error_wrap(HVD_ERR_SHUT_DOWN, "rendezvous %s %s", r->method, target);
        if (pause < 500)
            pause *= 2;
    }
}

/* Map a final HTTP status to a status code with a message naming the request. */
static hvd_status_t check_status(hvd_store_client_t *c, const store_request_t *r, int status) {
    switch (status) {
    case 200:
        return HVD_OK;
    case 404:
        return hvd__error_set(HVD_ERR_NOT_FOUND, "key %s/%s not found in the rendezvous store",
                              r->scope, r->key);
    case 401:
    case 403:
        return hvd__error_set(HVD_ERR_AUTH,
                              "rendezvous store at %s:%d refused %s /%s/%s (%d): the job secret "
                              "does not match (is this process started by this job's "
                              "horovodrun?)",
                              c->host, c->port, r->method, r->scope, r->key, status);
    case 413:
    case 507:
        return hvd__error_set(HVD_ERR_TOO_LARGE,
                              "rendezvous store at %s:%d refused %zu bytes for %s/%s (%d)", c->host,
                              c->port, r->body_len, r->scope, r->key, status);
    default:
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "rendezvous store at %s:%d answered %d to %s /%s/%s", c->host,
                              c->port, status, r->method, r->scope, r->key);
    }
}

hvd_status_t hvd__store_put(hvd_store_client_t *c, const char *scope, const char *key,
                            const void *value, size_t len, int64_t deadline_ms) {
    store_request_t r = {"PUT", scope, key, value, len, -1, -1, 4096, deadline_ms, NULL, 0};
    hvd_http_response_t resp;
    hvd_status_t st = exchange(c, &r, &resp);
    if (st != HVD_OK)
        return st;
    st = check_status(c, &r, resp.status);
    hvd__http_response_fini(&resp);
    return st;
}

hvd_status_t hvd__store_get(hvd_store_client_t *c, const char *scope, const char *key, int wait,
                            int64_t deadline_ms, uint8_t **value_p, size_t *len_p) {
    store_request_t r = {"GET",       scope,         key, NULL,
                         0,           wait ? 0 : -1, -1,  HVD_KV_DEFAULT_MAX_VALUE,
                         deadline_ms, NULL,          0};
    for (;;) {
        hvd_http_response_t resp;
        hvd_status_t st = exchange(c, &r, &resp);
        if (st != HVD_OK)
            return st;
        st = check_status(c, &r, resp.status);
        if (st == HVD_OK) {
            *value_p = resp.body;
            *len_p = resp.body_len;
            return HVD_OK;
        }
        hvd__http_response_fini(&resp);
        if (st != HVD_ERR_NOT_FOUND || !wait)
            return st;
        /* A held GET came back empty: the server's wait ended; ours may not have. */
        if (hvd__clock_remaining_ms(deadline_ms) == 0)
            return hvd__error_set(HVD_ERR_TIMEOUT,
                                  "timed out waiting for key %s/%s in the rendezvous store at "
                                  "%s:%d",
                                  scope, key, c->host, c->port);
    }
}

hvd_status_t hvd__store_delete(hvd_store_client_t *c, const char *scope, const char *key,
                               int64_t deadline_ms) {
    store_request_t r = {"DELETE", scope, key, NULL, 0, -1, -1, 4096, deadline_ms, NULL, 0};
    hvd_http_response_t resp;
    hvd_status_t st = exchange(c, &r, &resp);
    if (st != HVD_OK)
        return st;
    st = check_status(c, &r, resp.status);
    hvd__http_response_fini(&resp);
    return st;
}

void hvd__store_scope_fini(hvd_store_scope_t *scope) {
    for (size_t i = 0; i < scope->count; i++) {
        free(scope->entries[i].key);
        free(scope->entries[i].value);
    }
    free(scope->entries);
    scope->entries = NULL;
    scope->count = scope->total = 0;
}

static uint32_t read_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

hvd_status_t hvd__store_scope_decode(const uint8_t *body, size_t len, hvd_store_scope_t *scope_p) {
    hvd_store_scope_t s = {0};
    if (len < 8 || memcmp(body, HVD_KV_SCOPE_MAGIC, 4) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "scope response lacks the %s header",
                              HVD_KV_SCOPE_MAGIC);
    uint32_t count = read_u32le(body + 4);
    size_t off = 8;
    /* Each entry takes at least 8 bytes: a count larger than that allows is a lie. */
    if (count > (len - off) / 8)
        return hvd__error_set(HVD_ERR_PROTOCOL, "scope response claims %u entries in %zu bytes",
                              count, len);
    s.entries = calloc(count ? count : 1, sizeof *s.entries);
    if (!s.entries)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory decoding a scope");
    for (uint32_t i = 0; i < count; i++) {
        if (len - off < 8)
            goto err_truncated;
        uint32_t kl = read_u32le(body + off), vl = read_u32le(body + off + 4);
        off += 8;
        /* a key must be a valid name: no NUL or other bytes a server cannot have stored */
        if (kl > len - off || vl > len - off - kl ||
            !hvd__kv_name_valid((const char *)body + off, kl, 0))
            goto err_truncated;
        hvd_store_entry_t *e = &s.entries[s.count];
        e->key = malloc(kl + 1);
        e->value = malloc(vl + 1);
        if (!e->key || !e->value) {
            free(e->key);
            free(e->value);
            hvd__store_scope_fini(&s);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory decoding a scope");
        }
        memcpy(e->key, body + off, kl);
        e->key[kl] = '\0';
        memcpy(e->value, body + off + kl, vl);
        e->value[vl] = 0;
        e->value_len = vl;
        s.count++;
        off += kl + vl;
    }
    if (off != len)
        goto err_truncated;
    s.total = s.count;
    *scope_p = s;
    return HVD_OK;
err_truncated:
    hvd__store_scope_fini(&s);
    return hvd__error_set(HVD_ERR_PROTOCOL, "scope response is malformed or truncated");
}

const hvd_store_entry_t *hvd__store_scope_find(const hvd_store_scope_t *scope, const char *key) {
    for (size_t i = 0; i < scope->count; i++)
        if (strcmp(scope->entries[i].key, key) == 0)
            return &scope->entries[i];
    return NULL;
}

hvd_status_t hvd__store_count_decode(const uint8_t *body, size_t len, hvd_store_scope_t *scope_p) {
    if (len < 8 || memcmp(body, HVD_KV_COUNT_MAGIC, 4) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "count response lacks the %s header",
                              HVD_KV_COUNT_MAGIC);
    hvd_status_t st = hvd__store_scope_decode(body + 8, len - 8, scope_p);
    if (st == HVD_OK && (scope_p->count > 1 ||
                         (scope_p->count && strcmp(scope_p->entries[0].key, HVD_KV_ABORT_KEY)))) {
        hvd__store_scope_fini(scope_p);
        return hvd__error_set(HVD_ERR_PROTOCOL, "count response carries more than its abort key");
    }
    if (st == HVD_OK)
        scope_p->total = read_u32le(body + 4);
    return st;
}

/* A whole-scope read, or its count (count_only), held until min_count keys or the abort key. */
static hvd_status_t read_scope(hvd_store_client_t *c, const char *scope, size_t min_count,
                               int count_only, int64_t deadline_ms, hvd_store_scope_t *scope_p) {
    store_request_t r = {"GET",
                         scope,
                         "",
                         NULL,
                         0,
                         min_count ? 0 : -1,
                         min_count ? (long)min_count : -1,
                         MAX_SCOPE_BODY,
                         deadline_ms,
                         HVD_KV_AGE_HEADER,
                         count_only};
    for (;;) {
        hvd_http_response_t resp;
        hvd_status_t st = exchange(c, &r, &resp);
        if (st != HVD_OK)
            return st;
        st = check_status(c, &r, resp.status);
        hvd_store_scope_t s = {0};
        if (st == HVD_OK)
            st = count_only ? hvd__store_count_decode(resp.body, resp.body_len, &s)
                            : hvd__store_scope_decode(resp.body, resp.body_len, &s);
        char *end = NULL;
        long long age = strtoll(resp.want_value, &end, 10);
        s.age_ms = resp.want_value[0] && end && !*end && age >= 0 ? (int64_t)age : -1;
        hvd__http_response_fini(&resp);
        if (st != HVD_OK)
            return hvd__error_wrap(st, "reading scope %s from %s:%d", scope, c->host, c->port);
        if (s.total >= min_count || hvd__store_scope_find(&s, HVD_KV_ABORT_KEY)) {
            *scope_p = s;
            return HVD_OK;
        }
        if (hvd__clock_remaining_ms(deadline_ms) == 0) {
            *scope_p = s;
            return hvd__error_set(HVD_ERR_TIMEOUT,
                                  "timed out waiting for %zu keys in scope %s (have %zu)",
                                  min_count, scope, s.total);
        }
        hvd__store_scope_fini(&s);
    }
}

hvd_status_t hvd__store_get_scope(hvd_store_client_t *c, const char *scope, size_t min_count,
                                  int64_t deadline_ms, hvd_store_scope_t *scope_p) {
    return read_scope(c, scope, min_count, 0, deadline_ms, scope_p);
}

hvd_status_t hvd__store_count_scope(hvd_store_client_t *c, const char *scope, size_t min_count,
                                    int64_t deadline_ms, hvd_store_scope_t *scope_p) {
    return read_scope(c, scope, min_count, 1, deadline_ms, scope_p);
}
