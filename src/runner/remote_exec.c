#include "runner/remote_exec.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "os/spawn.h"
#include "runner/env_list.h"
#include "runner/relay.h"
#include "wire/le.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static const uint8_t spec_magic[4] = {'H', 'V', 'D', 'X'};

/* The spec is in ssh's pipe before ssh even connects; this bounds a stalled connection. */
#define SPEC_READ_MS 60000

/* ---- the spec ----------------------------------------------------------------------------------
 */

static size_t strings_size(char *const *v, size_t *count_p) {
    size_t bytes = 0, n = 0;
    for (; v && v[n]; n++)
        bytes += 4 + strlen(v[n]);
    *count_p = n;
    return bytes;
}

static uint8_t *put_string(uint8_t *p, const char *s) {
    size_t n = strlen(s);
    hvd__le32_put(p, (uint32_t)n);
    memcpy(p + 4, s, n);
    return p + 4 + n;
}

hvd_status_t hvd__exec_spec_encode(const char *cwd, char *const *env, char *const *argv,
                                   uint8_t **buf_p, size_t *len_p) {
    size_t n_env, n_argv;
    size_t payload =
        4 + strlen(cwd) + 4 + strings_size(env, &n_env) + 4 + strings_size(argv, &n_argv);
    size_t total = HVD_EXEC_SPEC_HEADER_LEN + payload;
    if (total > HVD_EXEC_SPEC_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "a remote rank's environment and command take %zu bytes, more "
                              "than the %d that can be sent to it; unset large environment "
                              "variables",
                              total, HVD_EXEC_SPEC_MAX);
    uint8_t *buf = malloc(total);
    if (!buf)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory encoding a remote command");
    memcpy(buf, spec_magic, 4);
    hvd__le16_put(buf + 4, HVD_EXEC_SPEC_VERSION);
    hvd__le16_put(buf + 6, 0);
    hvd__le32_put(buf + 8, (uint32_t)payload);
    uint8_t *p = put_string(buf + HVD_EXEC_SPEC_HEADER_LEN, cwd);
    hvd__le32_put(p, (uint32_t)n_env);
    p += 4;
    for (size_t i = 0; i < n_env; i++)
        p = put_string(p, env[i]);
    hvd__le32_put(p, (uint32_t)n_argv);
    p += 4;
    for (size_t i = 0; i < n_argv; i++)
        p = put_string(p, argv[i]);
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
static int get_strings(reader_t *r, char ***v_p, size_t *n_p) {
    uint32_t n;
    if (get_u32(r, &n) != 0 || n > r->left / 4)
        return -1;
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v)
        return -1;
    *v_p = v;
    *n_p = n;
    for (uint32_t i = 0; i < n; i++)
        if (get_string(r, &v[i]) != 0)
            return -1;
    return 0;
}

void hvd__exec_spec_fini(hvd_exec_spec_t *spec) {
    free(spec->cwd);
    for (size_t i = 0; spec->env && spec->env[i]; i++) {
        explicit_bzero(spec->env[i], strlen(spec->env[i])); /* the secret is among them */
        free(spec->env[i]);
    }
    free(spec->env);
    for (size_t i = 0; spec->argv && spec->argv[i]; i++)
        free(spec->argv[i]);
    free(spec->argv);
    memset(spec, 0, sizeof *spec);
}

hvd_status_t hvd__exec_spec_decode(const uint8_t *payload, size_t len, hvd_exec_spec_t *spec_p) {
    hvd_exec_spec_t spec = {0};
    reader_t r = {payload, len};
    const char *bad = NULL;
    if (get_string(&r, &spec.cwd) != 0)
        bad = "working directory";
    else if (get_strings(&r, &spec.env, &spec.env_count) != 0)
        bad = "environment";
    else if (get_strings(&r, &spec.argv, &spec.argc) != 0)
        bad = "command";
    else if (r.left != 0)
        bad = "length (bytes after the command)";
    else if (spec.argc == 0 || spec.argv[0][0] == '\0')
        bad = "command (empty)";
    for (size_t i = 0; !bad && i < spec.env_count; i++)
        if (!strchr(spec.env[i], '=') || spec.env[i][0] == '=')
            bad = "environment (an entry is not NAME=VALUE)";
    if (bad) {
        hvd__exec_spec_fini(&spec);
        return hvd__error_set(HVD_ERR_PROTOCOL, "the remote command spec is malformed: %s", bad);
    }
    *spec_p = spec;
    return HVD_OK;
}

/* ---- the supervisor ---------------------------------------------------------------------------
 */

static hvd_status_t read_exact(int fd, uint8_t *buf, size_t len, int64_t deadline) {
    for (size_t off = 0; off < len;) {
        int64_t left = deadline - hvd__clock_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return hvd__error_set(HVD_ERR_TIMEOUT, "timed out reading the command from the "
                                                   "launcher");
        ssize_t n = read(fd, buf + off, len - off);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return hvd__error_set(HVD_ERR_IO, "the launcher's input ended before the command "
                                              "was complete");
        off += (size_t)n;
    }
    return HVD_OK;
}

static hvd_status_t read_spec(hvd_exec_spec_t *spec) {
    int64_t deadline = hvd__clock_now_ms() + SPEC_READ_MS;
    uint8_t header[HVD_EXEC_SPEC_HEADER_LEN];
    size_t len;
    hvd_status_t st = read_exact(0, header, sizeof header, deadline);
    if (st == HVD_OK)
        st = hvd__exec_spec_header(header, &len);
    if (st != HVD_OK)
        return st;
    uint8_t *payload = malloc(len ? len : 1);
    if (!payload)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory reading the command");
    st = read_exact(0, payload, len, deadline);
    if (st == HVD_OK)
        st = hvd__exec_spec_decode(payload, len, spec);
    explicit_bzero(payload, len);
    free(payload);
    return st;
}

/* The rank's environment: this session's (what ssh gave us), then the spec's on top. */
static hvd_status_t build_env(const hvd_exec_spec_t *spec, hvd_env_list_t *env) {
    hvd__env_list_init(env);
    hvd_status_t st = hvd__env_list_set_entries(env, environ, NULL);
    return st == HVD_OK ? hvd__env_list_set_entries(env, spec->env, NULL) : st;
}

int hvd__remote_exec_main(void) {
    sigset_t mask;
    hvd__spawn_launcher_signals(&mask);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);

    hvd_exec_spec_t spec;
    hvd_status_t st = read_spec(&spec);
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun (on %s): %s\n", host, hvd_last_error());
        return 126;
    }
    /* name the host as the user wrote it (machines may share a host name: containers) */
    for (size_t i = 0; i < spec.env_count; i++)
        if (strncmp(spec.env[i], "HOROVOD_HOSTNAME=", 17) == 0 && spec.env[i][17])
            snprintf(host, sizeof host, "%s", spec.env[i] + 17);
    const char *home = getenv("HOME");
    if (chdir(spec.cwd) != 0)
        fprintf(stderr,
                "horovodrun (on %s): cannot change to the launcher's directory %s (%s); the "
                "command runs in %s\n",
                host, spec.cwd, strerror(errno), home ? home : "the login directory");
    hvd_env_list_t env;
    st = build_env(&spec, &env);
    int code = 126;
    if (st == HVD_OK) {
        /* the end of our stdin is the launcher going away */
        hvd_relay_config_t rc = {.argv = spec.argv, .envp = env.entries, .stop_on_stdin_eof = 1};
        st = hvd__relay_run(&rc, &code);
    }
    for (size_t i = 0; i < env.count; i++)
        explicit_bzero(env.entries[i], strlen(env.entries[i]));
    hvd__env_list_fini(&env);
    hvd__exec_spec_fini(&spec);
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun (on %s): %s\n", host, hvd_last_error());
        return 126;
    }
    return code;
}
