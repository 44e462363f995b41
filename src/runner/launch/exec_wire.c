/* Codecs of the remote-exec wire (layouts in exec_wire.h): the spec, the commands, and a frame
 * reader that compacts its buffer only on the next feed, so a frame's data stays valid until then.
 * Decoded environments are wiped when freed: they carry the job secret. */
#include "runner/launch/exec_wire.h"

#include <hvd/hvd.h>

#include "common/error.h"
#include "wire/le.h"

#include <stdlib.h>
#include <string.h>

static const uint8_t spec_magic[4] = {'H', 'V', 'D', 'X'};

/* ---- the spec ---------------------------------------------------------------------------- */

static size_t strings_size(char *const *v) {
    size_t bytes = 4;
    for (size_t n = 0; v && v[n]; n++)
        bytes += 4 + strlen(v[n]);
    return bytes;
}

static uint8_t *put_string(uint8_t *p, const char *s) {
    size_t n = strlen(s);
    hvd__le32_put(p, (uint32_t)n);
    memcpy(p + 4, s, n);
    return p + 4 + n;
}

static uint8_t *put_strings(uint8_t *p, char *const *v) {
    size_t n = 0;
    while (v && v[n])
        n++;
    hvd__le32_put(p, (uint32_t)n);
    p += 4;
    for (size_t i = 0; i < n; i++)
        p = put_string(p, v[i]);
    return p;
}

hvd_status_t hvd__exec_spec_encode(const hvd_exec_spec_t *spec, uint8_t **buf_p, size_t *len_p) {
    if (spec->nranks == 0 || spec->nranks > HVD_EXEC_MAX_RANKS)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "a remote host's spec must carry 1 to %d ranks, not %zu",
                              HVD_EXEC_MAX_RANKS, spec->nranks);
    size_t payload =
        4 + strlen(spec->cwd) + 4 + strings_size(spec->env) + strings_size(spec->argv) + 4;
    for (size_t r = 0; r < spec->nranks; r++)
        payload += strings_size(spec->rank_env[r]);
    size_t total = HVD_EXEC_SPEC_HEADER_LEN + payload;
    if (total > HVD_EXEC_SPEC_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "the environment and command of a remote host's %zu ranks take "
                              "%zu bytes, more than the %d that can be sent to it; unset large "
                              "environment variables",
                              spec->nranks, total, HVD_EXEC_SPEC_MAX);
    uint8_t *buf = malloc(total);
    if (!buf)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory encoding a remote command");
    memcpy(buf, spec_magic, 4);
    hvd__le16_put(buf + 4, HVD_EXEC_SPEC_VERSION);
    hvd__le16_put(buf + 6, 0);
    hvd__le32_put(buf + 8, (uint32_t)payload);
    uint8_t *p = put_string(buf + HVD_EXEC_SPEC_HEADER_LEN, spec->cwd);
    hvd__le32_put(p, spec->grace_ms);
    p = put_strings(p + 4, spec->env);
    p = put_strings(p, spec->argv);
    hvd__le32_put(p, (uint32_t)spec->nranks);
    p += 4;
    for (size_t r = 0; r < spec->nranks; r++)
        p = put_strings(p, spec->rank_env[r]);
    *buf_p = buf;
    *len_p = total;
    return HVD_OK;
}

hvd_status_t hvd__exec_spec_header(const uint8_t header[HVD_EXEC_SPEC_HEADER_LEN],
                                   size_t *payload_len_p) {
    if (memcmp(header, spec_magic, 4) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "the remote command spec has a wrong magic");
    unsigned version = hvd__le16_get(header + 4);
    if (version != HVD_EXEC_SPEC_VERSION)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "the remote command spec has version %u, this horovodrun reads "
                              "version %d (mixed hvd versions on the hosts?)",
                              version, HVD_EXEC_SPEC_VERSION);
    if (hvd__le16_get(header + 6) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "the remote command spec's reserved bytes are "
                                                "not zero");
    uint32_t len = hvd__le32_get(header + 8);
    if (len > HVD_EXEC_SPEC_MAX - HVD_EXEC_SPEC_HEADER_LEN)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "the remote command spec announces %u bytes, "
                              "more than the bound",
                              len);
    *payload_len_p = len;
    return HVD_OK;
}

typedef struct {
    const uint8_t *p;
    size_t left;
} reader_t;

static int get_u32(reader_t *r, uint32_t *v) {
    if (r->left < 4)
        return -1;
    *v = hvd__le32_get(r->p);
    r->p += 4;
    r->left -= 4;
    return 0;
}

static int get_string(reader_t *r, char **s_p) {
    uint32_t n;
    if (get_u32(r, &n) != 0 || n > r->left || memchr(r->p, 0, n))
        return -1;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return -1;
    memcpy(s, r->p, n);
    s[n] = '\0';
    r->p += n;
    r->left -= n;
    *s_p = s;
    return 0;
}

/* A count followed by that many strings; the count is checked against what is left (each
 * string takes at least 4 bytes) before anything is allocated. */
static int get_strings(reader_t *r, char ***v_p) {
    uint32_t n;
    if (get_u32(r, &n) != 0 || n > r->left / 4)
        return -1;
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v)
        return -1;
    *v_p = v;
    for (uint32_t i = 0; i < n; i++)
        if (get_string(r, &v[i]) != 0)
            return -1;
    return 0;
}

static void free_strings(char **v, int wipe) {
    for (size_t i = 0; v && v[i]; i++) {
        if (wipe)
            explicit_bzero(v[i], strlen(v[i])); /* the secret is among them */
        free(v[i]);
    }
    free(v);
}

void hvd__exec_spec_fini(hvd_exec_spec_t *spec) {
    free(spec->cwd);
    free_strings(spec->env, 1);
    free_strings(spec->argv, 0);
    for (size_t r = 0; spec->rank_env && r < spec->nranks; r++)
        free_strings(spec->rank_env[r], 1);
    free(spec->rank_env);
    memset(spec, 0, sizeof *spec);
}

static int bad_env(char *const *v) {
    for (size_t i = 0; v && v[i]; i++)
        if (!strchr(v[i], '=') || v[i][0] == '=')
            return 1;
    return 0;
}

hvd_status_t hvd__exec_spec_decode(const uint8_t *payload, size_t len, hvd_exec_spec_t *spec_p) {
    hvd_exec_spec_t spec = {0};
    reader_t r = {payload, len};
    const char *bad = NULL;
    uint32_t nranks = 0;
    if (get_string(&r, &spec.cwd) != 0)
        bad = "working directory";
    else if (get_u32(&r, &spec.grace_ms) != 0)
        bad = "grace period";
    else if (get_strings(&r, &spec.env) != 0)
        bad = "environment";
    else if (get_strings(&r, &spec.argv) != 0)
        bad = "command";
    else if (get_u32(&r, &nranks) != 0 || nranks == 0 || nranks > HVD_EXEC_MAX_RANKS ||
             nranks > r.left / 4)
        bad = "rank count";
    else if (!(spec.rank_env = calloc(nranks, sizeof *spec.rank_env)))
        bad = "rank count (out of memory)";
    else
        spec.nranks = nranks;
    for (size_t i = 0; !bad && i < spec.nranks; i++)
        if (get_strings(&r, &spec.rank_env[i]) != 0 || bad_env(spec.rank_env[i]))
            bad = "a rank's environment";
    if (bad)
        ;
    else if (r.left != 0)
        bad = "length (bytes after the ranks)";
    else if (!spec.argv[0] || spec.argv[0][0] == '\0')
        bad = "command (empty)";
    else if (bad_env(spec.env))
        bad = "environment (an entry is not NAME=VALUE)";
    if (bad) {
        hvd__exec_spec_fini(&spec);
        return hvd__error_set(HVD_ERR_PROTOCOL, "the remote command spec is malformed: %s", bad);
    }
    *spec_p = spec;
    return HVD_OK;
}

/* ---- commands ---------------------------------------------------------------------------- */

void hvd__exec_command_encode(uint8_t out[HVD_EXEC_COMMAND_LEN], uint32_t what, uint32_t index) {
    hvd__le32_put(out, what);
    hvd__le32_put(out + 4, index);
}

int hvd__exec_command_decode(const uint8_t in[HVD_EXEC_COMMAND_LEN], size_t nranks,
                             uint32_t *what_p, uint32_t *index_p) {
    uint32_t what = hvd__le32_get(in), index = hvd__le32_get(in + 4);
    if ((what != HVD_EXEC_STOP && what != HVD_EXEC_KILL) || index >= nranks)
        return -1;
    *what_p = what;
    *index_p = index;
    return 0;
}

/* ---- frames ------------------------------------------------------------------------------ */

void hvd__exec_frame_header(uint8_t out[HVD_EXEC_FRAME_HEADER_LEN], uint8_t type, uint32_t index,
                            uint32_t len) {
    out[0] = type;
    out[1] = out[2] = out[3] = 0;
    hvd__le32_put(out + 4, index);
    hvd__le32_put(out + 8, len);
}

void hvd__exec_reader_init(hvd_exec_reader_t *r, size_t nranks) {
    memset(r, 0, sizeof *r);
    r->nranks = nranks;
}

void hvd__exec_reader_fini(hvd_exec_reader_t *r) {
    free(r->buf);
    memset(r, 0, sizeof *r);
}

hvd_status_t hvd__exec_reader_feed(hvd_exec_reader_t *r, const void *data, size_t n) {
    if (r->start > 0) { /* frames handed out before this feed are done with */
        memmove(r->buf, r->buf + r->start, r->len);
        r->start = 0;
    }
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + n)
            cap *= 2;
        uint8_t *grown = realloc(r->buf, cap);
        if (!grown)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory reading a remote host");
        r->buf = grown;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, data, n);
    r->len += n;
    return HVD_OK;
}

int hvd__exec_reader_next(hvd_exec_reader_t *r, hvd_exec_frame_t *frame_p) {
    if (r->len < HVD_EXEC_FRAME_HEADER_LEN)
        return 0;
    const uint8_t *h = r->buf + r->start;
    uint8_t type = h[0];
    uint32_t index = hvd__le32_get(h + 4), len = hvd__le32_get(h + 8);
    const char *bad = NULL;
    if (type < HVD_EXEC_READY || type > HVD_EXEC_STATE)
        bad = "an unknown frame type";
    else if (h[1] || h[2] || h[3])
        bad = "non-zero reserved bytes";
    else if (len > HVD_EXEC_FRAME_MAX)
        bad = "a frame longer than the bound";
    else if (type == HVD_EXEC_READY ? index != 0 || len != 0 : index >= r->nranks)
        bad = "a rank index out of range";
    else if ((type == HVD_EXEC_EXIT && len != 4) || (type == HVD_EXEC_END && len != 0) ||
             (type == HVD_EXEC_STATE && len != HVD_EXEC_STATE_LEN))
        bad = "a frame whose length does not fit its type";
    if (bad) {
        hvd__error_set(HVD_ERR_PROTOCOL, "the remote host's supervisor sent %s", bad);
        return -1;
    }
    if (r->len < HVD_EXEC_FRAME_HEADER_LEN + (size_t)len)
        return 0;
    *frame_p = (hvd_exec_frame_t){
        .type = type, .index = index, .data = h + HVD_EXEC_FRAME_HEADER_LEN, .len = len};
    r->start += HVD_EXEC_FRAME_HEADER_LEN + (size_t)len;
    r->len -= HVD_EXEC_FRAME_HEADER_LEN + (size_t)len;
    return 1;
}
