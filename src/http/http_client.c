/* The rendezvous HTTP client (http_client.h) on the deadline-bound calls of os/socket.h. The
 * response head is read into one HVD_HTTP_MAX_HEAD buffer; the body is allocated only once its
 * Content-Length is known to be within the caller's limit, or up to that limit when the server
 * sends none. */
#include "http/http_client.h"

#include "common/error.h"
#include "os/socket.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void hvd__http_response_fini(hvd_http_response_t *resp) {
    free(resp->body);
    resp->body = NULL;
    resp->body_len = 0;
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

hvd_status_t hvd__http_parse_head(const char *head, size_t len, int *status_p,
                                  long long *content_length_p) {
    /* Status line: "HTTP/1.x NNN reason\r\n" */
    if (len < 12 || memcmp(head, "HTTP/1.", 7) != 0 || !is_digit(head[7]) || head[8] != ' ' ||
        !is_digit(head[9]) || !is_digit(head[10]) || !is_digit(head[11]))
        return hvd__error_set(HVD_ERR_PROTOCOL, "malformed HTTP status line");
    int status = (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
    long long content_length = -1;
    const char *end = head + len;
    const char *line = memchr(head, '\n', len);
    if (!line)
        return hvd__error_set(HVD_ERR_PROTOCOL, "HTTP status line not terminated");
    line++;
    while (line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            return hvd__error_set(HVD_ERR_PROTOCOL, "HTTP header line not terminated");
        size_t n = (size_t)(eol - line);
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (n == 0)
            break; /* blank line: end of head */
        static const char cl[] = "content-length:";
        if (n >= sizeof cl - 1 && strncasecmp(line, cl, sizeof cl - 1) == 0) {
            const char *v = line + sizeof cl - 1, *ve = line + n;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            if (v == ve)
                return hvd__error_set(HVD_ERR_PROTOCOL, "empty Content-Length");
            long long value = 0;
            for (; v < ve && is_digit(*v); v++) {
                if (value > (1LL << 50))
                    return hvd__error_set(HVD_ERR_PROTOCOL, "Content-Length too large");
                value = value * 10 + (*v - '0');
            }
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            if (v != ve || (content_length >= 0 && content_length != value))
                return hvd__error_set(HVD_ERR_PROTOCOL, "malformed Content-Length");
            content_length = value;
        }
        line = eol + 1;
    }
    *status_p = status;
    *content_length_p = content_length;
    return HVD_OK;
}

int hvd__http_head_value(const char *head, size_t len, const char *name, char *out,
                         size_t out_size) {
    size_t nl = strlen(name);
    const char *end = head + len, *line = memchr(head, '\n', len);
    if (out_size)
        out[0] = '\0';
    while (line && ++line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        size_t n = eol ? (size_t)(eol - line) : (size_t)(end - line);
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (n == 0)
            return 0;
        if (n > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1, *ve = line + n;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            if ((size_t)(ve - v) >= out_size)
                return 0;
            for (const char *c = v; c < ve; c++)
                if ((unsigned char)*c < 0x20 && *c != '\t')
                    return 0; /* a control byte (a bare CR) inside: malformed, not a value */
            memcpy(out, v, (size_t)(ve - v));
            out[ve - v] = '\0';
            return 1;
        }
        line = eol;
    }
    return 0;
}

static hvd_status_t send_request(int fd, const hvd_http_request_t *req, const char *peer) {
    char head[4096];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n",
                     req->method, req->target, req->host, req->port, req->body_len);
    for (size_t i = 0; i < req->header_count && n >= 0 && (size_t)n < sizeof head; i++)
        n += snprintf(head + n, sizeof head - (size_t)n, "%s: %s\r\n", req->headers[i].name,
                      req->headers[i].value);
    if (n >= 0 && (size_t)n < sizeof head)
        n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    if (n < 0 || (size_t)n >= sizeof head)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "HTTP request head for %s too long", peer);
    hvd_status_t st = hvd__socket_send_all(fd, head, (size_t)n, req->deadline_ms, peer);
    if (st == HVD_OK && req->body_len)
        st = hvd__socket_send_all(fd, req->body, req->body_len, req->deadline_ms, peer);
    return st;
}

/* Read until the blank line ending the head. Extra bytes read past it (the start of the body)
 * are left at head[*head_len_p .. *total_p). */
static hvd_status_t read_head(int fd, const hvd_http_request_t *req, const char *peer, char *buf,
                              size_t *head_len_p, size_t *total_p) {
    size_t total = 0;
    for (;;) {
        if (total == HVD_HTTP_MAX_HEAD)
            return hvd__error_set(HVD_ERR_PROTOCOL, "HTTP response head from %s exceeds %d bytes",
                                  peer, HVD_HTTP_MAX_HEAD);
        size_t got;
        hvd_status_t st = hvd__socket_recv_some(fd, buf + total, HVD_HTTP_MAX_HEAD - total,
                                                req->deadline_ms, peer, &got);
        if (st != HVD_OK)
            return st;
        if (got == 0)
            return hvd__error_set(HVD_ERR_PEER_LOST,
                                  "%s closed the connection before answering %s %s", peer,
                                  req->method, req->target);
        size_t scan_from = total > 3 ? total - 3 : 0;
        total += got;
        for (size_t i = scan_from; i + 3 < total; i++) {
            if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
                *head_len_p = i + 4;
                *total_p = total;
                return HVD_OK;
            }
        }
    }
}

hvd_status_t hvd__http_request(const hvd_http_request_t *req, hvd_http_response_t *resp_p) {
    char peer[320];
    snprintf(peer, sizeof peer, "%s:%d", req->host, req->port);
    int fd;
    hvd_status_t st = hvd__socket_connect(req->host, req->port, req->deadline_ms, &fd);
    if (st != HVD_OK)
        return st;
    char *head = malloc(HVD_HTTP_MAX_HEAD);
    uint8_t *body = NULL;
    if (!head) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for an HTTP response");
        goto err_close;
    }
    st = send_request(fd, req, peer);
    if (st != HVD_OK)
        goto err_free_head;
    size_t head_len = 0, total = 0;
    st = read_head(fd, req, peer, head, &head_len, &total);
    if (st != HVD_OK)
        goto err_free_head;
    int status;
    long long content_length;
    st = hvd__http_parse_head(head, head_len, &status, &content_length);
    if (st != HVD_OK) {
        st = hvd__error_wrap(st, "response from %s to %s %s", peer, req->method, req->target);
        goto err_free_head;
    }
    /* Without Content-Length the body runs to the end of the connection, still bounded. */
    size_t limit = content_length >= 0 ? (size_t)content_length : req->max_response_body;
    if (content_length >= 0 && (unsigned long long)content_length > req->max_response_body) {
        st = hvd__error_set(HVD_ERR_TOO_LARGE,
                            "response from %s to %s %s is %lld bytes, over the limit of %zu", peer,
                            req->method, req->target, content_length, req->max_response_body);
        goto err_free_head;
    }
    body = malloc(limit + 1);
    if (!body) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a %zu-byte response", limit);
        goto err_free_head;
    }
    size_t have = total - head_len;
    if (have > limit)
        have = limit; /* a server sending more than it announced: ignore the excess */
    memcpy(body, head + head_len, have);
    while (have < limit || content_length < 0) {
        size_t got;
        if (content_length < 0 && have == limit) {
            st = hvd__error_set(HVD_ERR_TOO_LARGE, "response from %s exceeds %zu bytes", peer,
                                limit);
            goto err_free_body;
        }
        st = hvd__socket_recv_some(fd, body + have, limit - have, req->deadline_ms, peer, &got);
        if (st != HVD_OK)
            goto err_free_body;
        if (got == 0) {
            if (content_length < 0)
                break;
            st = hvd__error_set(HVD_ERR_PEER_LOST,
                                "%s closed the connection after %zu of %lld body bytes", peer, have,
                                content_length);
            goto err_free_body;
        }
        have += got;
    }
    body[have] = 0;
    close(fd);
    resp_p->status = status;
    resp_p->body = body;
    resp_p->body_len = have;
    resp_p->want_value[0] = '\0';
    if (req->want_header)
        hvd__http_head_value(head, head_len, req->want_header, resp_p->want_value,
                             sizeof resp_p->want_value);
    free(head);
    return HVD_OK;

err_free_body:
    free(body);
err_free_head:
    free(head);
err_close:
    close(fd);
    return st;
}
