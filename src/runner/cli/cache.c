/* The start-up cache file (cache.h). */
#include "runner/cli/cache.h"

#include "common/error.h"
#include "common/log.h"
#include "crypto/hmac.h"
#include "crypto/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_ENTRIES 256
#define FUTURE_SLACK_S 300 /* a time this far ahead of now is a clock that moved: stale */
static const char HEADER[] = "hvd-cache 1\n";

typedef struct {
    char *key, *value;
    int64_t written;
} entry_t;

struct hvd_start_cache {
    char *dir, *path;
    char params_hex[2 * 32 + 1];
    entry_t entries[MAX_ENTRIES];
    size_t count;
};

hvd_status_t hvd__start_cache_params(int np, const char *hosts, int ssh_port,
                                     const char *identity_file, const char *const *nics,
                                     size_t nic_count, char **text_p) {
    size_t len = 64 + strlen(hosts ? hosts : "") + strlen(identity_file ? identity_file : "");
    for (size_t i = 0; i < nic_count; i++)
        len += strlen(nics[i]) + 1;
    char *text = malloc(len);
    if (!text)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    int w = snprintf(text, len, "%d %s %d %s ", np, hosts ? hosts : "", ssh_port,
                     identity_file ? identity_file : "");
    size_t used = w > 0 ? (size_t)w : 0;
    for (size_t i = 0; i < nic_count && used < len; i++) {
        w = snprintf(text + used, len - used, "%s%s", i ? "," : "", nics[i]);
        if (w > 0)
            used += (size_t)w;
    }
    *text_p = text;
    return HVD_OK;
}

hvd_status_t hvd__start_cache_default_dir(const char *home, char *out, size_t out_size) {
    if (!home || !*home)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "HOME is not set: no place for the cache");
    if ((size_t)snprintf(out, out_size, "%s/.horovod", home) >= out_size)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "HOME is too long for the cache path");
    return HVD_OK;
}

/* --- escaping ----------------------------------------------------------------------------- */

static int plain(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("._:/,=-", c));
}

static char *escape(const char *s) {
    size_t n = 0;
    for (const char *p = s; *p; p++)
        n += plain((unsigned char)*p) ? 1 : 3;
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (plain(c)) {
            *o++ = (char)c;
        } else {
            snprintf(o, 4, "%%%02X", c);
            o += 3;
        }
    }
    *o = '\0';
    return out;
}

/* Unescape s[0..len) into a new string; NULL if malformed (or out of memory). */
static char *unescape(const char *s, size_t len) {
    char *out = malloc(len + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            if (!plain((unsigned char)s[i]))
                goto bad;
            *o++ = s[i];
            continue;
        }
        int hi = i + 2 < len ? hvd__hex_digit(s[i + 1]) : -1,
            lo = hi >= 0 ? hvd__hex_digit(s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            goto bad;
        *o++ = (char)(hi * 16 + lo);
        i += 2;
    }
    *o = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

/* --- load and store ----------------------------------------------------------------------- */

static void clear_entries(hvd_start_cache_t *c) {
    for (size_t i = 0; i < c->count; i++) {
        free(c->entries[i].key);
        free(c->entries[i].value);
    }
    c->count = 0;
}

/* Parse one entry line "key time value". 0 ok, -1 malformed. */
static int parse_entry(hvd_start_cache_t *c, const char *line, size_t len) {
    const char *sp1 = memchr(line, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - line)) : NULL;
    if (!sp1 || !sp2 || sp1 == line || c->count == MAX_ENTRIES)
        return -1;
    int64_t t = 0;
    const char *p = sp1 + 1;
    if (p == sp2 || sp2 - p > 18)
        return -1;
    for (; p < sp2; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        t = t * 10 + (*p - '0');
    }
    char *key = unescape(line, (size_t)(sp1 - line));
    char *value = unescape(sp2 + 1, len - (size_t)(sp2 + 1 - line));
    if (!key || !value) {
        free(key);
        free(value);
        return -1;
    }
    c->entries[c->count++] = (entry_t){.key = key, .value = value, .written = t};
    return 0;
}

/* Parse a whole file. 1: loaded; 0: other parameters (discarded); -1: corrupt. */
static int parse_file(hvd_start_cache_t *c, const char *text, size_t len) {
    size_t hl = sizeof HEADER - 1;
    if (len < hl || memcmp(text, HEADER, hl) != 0)
        return -1;
    const char *p = text + hl, *end = text + len;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || (size_t)(nl - p) != 7 + 64 || memcmp(p, "params ", 7) != 0)
        return -1;
    for (const char *h = p + 7; h < nl; h++)
        if (hvd__hex_digit(*h) < 0 || (*h >= 'A' && *h <= 'F'))
            return -1;
    int same = memcmp(p + 7, c->params_hex, 64) == 0;
    for (p = nl + 1; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || parse_entry(c, p, (size_t)(nl - p)) != 0) {
            clear_entries(c);
            return -1;
        }
    }
    if (!same)
        clear_entries(c);
    return same;
}

static hvd_status_t ensure_dir(const char *dir) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return hvd__error_set(HVD_ERR_IO, "cannot create the cache directory %s: %s", dir,
                              strerror(errno));
    return HVD_OK;
}

static int stale(int64_t written, int64_t now_s) {
    return now_s - written > HVD_START_CACHE_STALE_S || written > now_s + FUTURE_SLACK_S;
}

/* Write every fresh entry to a temporary file and rename it over the cache file. */
static hvd_status_t store(hvd_start_cache_t *c, int64_t now_s) {
    hvd_status_t st = ensure_dir(c->dir);
    if (st != HVD_OK)
        return st;
    size_t tlen = strlen(c->path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    snprintf(tmp, tlen, "%s.tmp.%ld", c->path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        st = hvd__error_set(HVD_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        st = hvd__error_set(HVD_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        goto err_unlink;
    }
    fprintf(f, "%sparams %s\n", HEADER, c->params_hex);
    for (size_t i = 0; i < c->count; i++) {
        if (stale(c->entries[i].written, now_s))
            continue;
        char *k = escape(c->entries[i].key), *v = escape(c->entries[i].value);
        if (k && v)
            fprintf(f, "%s %" PRId64 " %s\n", k, c->entries[i].written, v);
        free(k);
        free(v);
    }
    int bad = ferror(f) | fflush(f) | fsync(fileno(f));
    if (fclose(f) != 0 || bad) {
        st = hvd__error_set(HVD_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        goto err_unlink;
    }
    if (rename(tmp, c->path) != 0) {
        st = hvd__error_set(HVD_ERR_IO, "cannot replace %s: %s", c->path, strerror(errno));
        goto err_unlink;
    }
    free(tmp);
    return HVD_OK;
err_unlink:
    unlink(tmp);
    free(tmp);
    return st;
}

/* Read the file (at most HVD_START_CACHE_MAX_BYTES + 1 bytes). 1 read, 0 missing, -1 error/too big.
 */
static int read_file(const char *path, char **text_p, size_t *len_p) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    char *buf = malloc(HVD_START_CACHE_MAX_BYTES + 1);
    size_t have = 0;
    while (buf && have <= HVD_START_CACHE_MAX_BYTES) {
        ssize_t n = read(fd, buf + have, HVD_START_CACHE_MAX_BYTES + 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n < 0)
                have = HVD_START_CACHE_MAX_BYTES + 1;
            break;
        }
        have += (size_t)n;
    }
    close(fd);
    if (!buf || have > HVD_START_CACHE_MAX_BYTES) {
        free(buf);
        return -1;
    }
    *text_p = buf;
    *len_p = have;
    return 1;
}

hvd_status_t hvd__start_cache_open(const char *dir, const char *params, int64_t now_s,
                                   hvd_start_cache_t **cache_p) {
    hvd_start_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    size_t plen = strlen(dir) + sizeof HVD_START_CACHE_FILE + 1;
    c->dir = strdup(dir);
    c->path = malloc(plen);
    if (!c->dir || !c->path) {
        hvd__start_cache_close(c);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    snprintf(c->path, plen, "%s/%s", dir, HVD_START_CACHE_FILE);
    uint8_t digest[32];
    if (hvd__sha256(params, strlen(params), digest) != 0) {
        hvd__start_cache_close(c);
        return hvd__error_set(HVD_ERR_IO, "SHA-256 failed");
    }
    hvd__hex_encode(digest, sizeof digest, c->params_hex);

    char *text = NULL;
    size_t len = 0;
    int r = read_file(c->path, &text, &len);
    int corrupt = r < 0 || (r == 1 && parse_file(c, text, len) < 0);
    free(text);
    if (corrupt) {
        HVD_LOG_D("the cache file %s is unreadable or corrupt: rewriting it", c->path);
        hvd_status_t st = store(c, now_s);
        if (st != HVD_OK) {
            hvd__start_cache_close(c);
            return st;
        }
    }
    *cache_p = c;
    return HVD_OK;
}

const char *hvd__start_cache_get(hvd_start_cache_t *c, const char *key, int64_t now_s) {
    for (size_t i = 0; i < c->count; i++)
        if (strcmp(c->entries[i].key, key) == 0)
            return stale(c->entries[i].written, now_s) ? NULL : c->entries[i].value;
    return NULL;
}

hvd_status_t hvd__start_cache_put(hvd_start_cache_t *c, const char *key, const char *value,
                                  int64_t now_s) {
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    /* drop this key and stale entries; make room if the table is full (oldest first) */
    size_t w = 0;
    for (size_t i = 0; i < c->count; i++) {
        entry_t *e = &c->entries[i];
        if (strcmp(e->key, key) == 0 || stale(e->written, now_s)) {
            free(e->key);
            free(e->value);
        } else {
            c->entries[w++] = *e;
        }
    }
    c->count = w;
    if (c->count == MAX_ENTRIES) {
        free(c->entries[0].key);
        free(c->entries[0].value);
        memmove(c->entries, c->entries + 1, (MAX_ENTRIES - 1) * sizeof *c->entries);
        c->count--;
    }
    c->entries[c->count++] = (entry_t){.key = k, .value = v, .written = now_s};
    return store(c, now_s);
}

void hvd__start_cache_close(hvd_start_cache_t *c) {
    if (!c)
        return;
    clear_entries(c);
    free(c->dir);
    free(c->path);
    free(c);
}

/* --- the cached facts --------------------------------------------------------------------- */

static char *key_for(const char *what, const char *hosts) {
    size_t n = strlen(what) + strlen(hosts) + 2;
    char *k = malloc(n);
    if (k)
        snprintf(k, n, "%s:%s", what, hosts);
    return k;
}

int hvd__start_cache_get_ssh_ok(hvd_start_cache_t *c, const char *hosts, int64_t now_s) {
    char *k = key_for("ssh_ok", hosts);
    const char *v = k ? hvd__start_cache_get(c, k, now_s) : NULL;
    free(k);
    return v && strcmp(v, "1") == 0;
}

hvd_status_t hvd__start_cache_put_ssh_ok(hvd_start_cache_t *c, const char *hosts, int64_t now_s) {
    char *k = key_for("ssh_ok", hosts);
    if (!k)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    hvd_status_t st = hvd__start_cache_put(c, k, "1", now_s);
    free(k);
    return st;
}

hvd_status_t hvd__start_cache_get_discovery(hvd_start_cache_t *c, const char *hosts, int64_t now_s,
                                            hvd_disc_result_t *r_p) {
    char *k = key_for("discovery", hosts);
    const char *v = k ? hvd__start_cache_get(c, k, now_s) : NULL;
    free(k);
    if (!v)
        return hvd__error_set(HVD_ERR_NOT_FOUND, "no fresh discovery result in the cache");
    hvd_status_t st = hvd__disc_result_parse(v, r_p);
    return st == HVD_OK ? HVD_OK : hvd__error_wrap(HVD_ERR_NOT_FOUND, "cache");
}

hvd_status_t hvd__start_cache_put_discovery(hvd_start_cache_t *c, const char *hosts,
                                            const hvd_disc_result_t *r, int64_t now_s) {
    char *text = NULL;
    hvd_status_t st = hvd__disc_result_format(r, &text);
    if (st != HVD_OK)
        return st;
    char *k = key_for("discovery", hosts);
    st = k ? hvd__start_cache_put(c, k, text, now_s)
           : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    free(k);
    free(text);
    return st;
}
