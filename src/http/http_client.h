/* A small HTTP/1.1 client for the workers' rendezvous requests: one request per connection
 * (Connection: close), an absolute deadline over the whole exchange, and bounded reads (the
 * response head and body limits are checked before anything is allocated). It is in-house
 * so that training processes do not load a general HTTP library. */
#ifndef HVD_HTTP_HTTP_CLIENT_H
#define HVD_HTTP_HTTP_CLIENT_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

/* Longest response head (status line and headers) accepted. */
#define HVD_HTTP_MAX_HEAD 16384

typedef struct {
    const char *name;
    const char *value;
} hvd_http_header_t;

typedef struct {
    int status;    /* e.g. 200 */
    uint8_t *body; /* malloc'd, NUL-terminated for convenience (not counted in body_len) */
    size_t body_len;
    char want_value[32]; /* the request's want_header, "" when absent (or longer than this) */
} hvd_http_response_t;

typedef struct {
    const char *host; /* name or numeric address */
    int port;
    const char *method; /* "GET", "PUT", ... */
    const char *target; /* "/scope/key" */
    const hvd_http_header_t *headers;
    size_t header_count;
    const void *body; /* may be NULL when body_len is 0 */
    size_t body_len;
    size_t max_response_body; /* larger responses fail with HVD_ERR_TOO_LARGE */
    const char *want_header;  /* NULL, or a response header whose value the caller wants */
    int64_t deadline_ms;      /* absolute, clock.h */
} hvd_http_request_t;

/* Perform one request. On HVD_OK, *resp_p holds any status code the server sent (the caller
 * interprets it) and must be released with hvd__http_response_fini. Errors: HVD_ERR_PEER_LOST
 * (refused or closed before a response), HVD_ERR_TIMEOUT, HVD_ERR_PROTOCOL (malformed
 * response), HVD_ERR_TOO_LARGE, HVD_ERR_IO; the message names host:port and the target.
 * Blocks until the deadline at most; thread safe. */
hvd_status_t hvd__http_request(const hvd_http_request_t *req, hvd_http_response_t *resp_p);

void hvd__http_response_fini(hvd_http_response_t *resp);

/* Parse a response head (text up to and including the blank line). Exposed for tests and
 * fuzzing. Sets *status_p and *content_length_p (-1 when absent). HVD_ERR_PROTOCOL if
 * malformed. */
hvd_status_t hvd__http_parse_head(const char *head, size_t len, int *status_p,
                                  long long *content_length_p);

/* The value of header `name` (case-insensitive) in a response head that
 * hvd__http_parse_head accepted, without surrounding blanks, into out: 1, or 0 when the head
 * has no such header, or its value does not fit out_size or holds a control byte (out is
 * then ""). Exposed for tests and fuzzing. */
int hvd__http_head_value(const char *head, size_t len, const char *name, char *out,
                         size_t out_size);

#endif
