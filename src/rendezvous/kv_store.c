#include "rendezvous/kv_store.h"

#include "common/error.h"
#include "rendezvous/kv_protocol.h"

#include <pthread.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

/* Keys and scopes live in glibc's balanced trees (tsearch): O(log n) per operation and an
 * in-order walk gives the byte-ordered snapshot for free. */

typedef struct {
    char *key;
    uint8_t *value;
    size_t len;
} entry_t;

typedef struct {
    char *name;
    int size;      /* > 0: predefined (sized by the slot plan) */
    void *entries; /* tree of entry_t */
    size_t count;
    void *finished; /* tree of char* (ranks finished with the scope) */
    size_t n_finished;
} scope_t;

struct hvd_kv_store {
    pthread_mutex_t lock;
    hvd_kv_limits_t limits;
    void *scopes; /* tree of scope_t */
    size_t total_bytes, total_keys;
};

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const entry_t *)a)->key, ((const entry_t *)b)->key);
}
static int cmp_scope(const void *a, const void *b) {
    return strcmp(((const scope_t *)a)->name, ((const scope_t *)b)->name);
}
static int cmp_str(const void *a, const void *b) {
    return strcmp(a, b);
}

hvd_status_t hvd__kv_store_create(const hvd_kv_limits_t *limits, hvd_kv_store_t **store_p) {
    hvd_kv_store_t *s = calloc(1, sizeof *s);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory creating the KV store");
    s->limits.max_value_bytes =
        limits && limits->max_value_bytes ? limits->max_value_bytes : HVD_KV_DEFAULT_MAX_VALUE;
    s->limits.max_total_bytes =
        limits && limits->max_total_bytes ? limits->max_total_bytes : HVD_KV_DEFAULT_MAX_TOTAL;
    s->limits.max_keys = limits && limits->max_keys ? limits->max_keys : HVD_KV_DEFAULT_MAX_KEYS;
    pthread_mutex_init(&s->lock, NULL);
    *store_p = s;
    return HVD_OK;
}

static void free_entry(void *p) {
    entry_t *e = p;
    free(e->key);
    free(e->value);
    free(e);
}

static void clear_scope_data(hvd_kv_store_t *s, scope_t *sc) {
    /* account first: the tree walk frees the entries */
    s->total_keys -= sc->count;
    tdestroy(sc->entries, free_entry);
    sc->entries = NULL;
    sc->count = 0;
    tdestroy(sc->finished, free);
    sc->finished = NULL;
    sc->n_finished = 0;
}

static void free_scope(void *p) {
    scope_t *sc = p;
    tdestroy(sc->entries, free_entry);
    tdestroy(sc->finished, free);
    free(sc->name);
    free(sc);
}

void hvd__kv_store_destroy(hvd_kv_store_t *s) {
    if (!s)
        return;
    tdestroy(s->scopes, free_scope);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static scope_t *find_scope(hvd_kv_store_t *s, const char *name) {
    scope_t probe = {.name = (char *)name};
    scope_t **found = tfind(&probe, &s->scopes, cmp_scope);
    return found ? *found : NULL;
}

static scope_t *add_scope(hvd_kv_store_t *s, const char *name, int size) {
    scope_t *sc = calloc(1, sizeof *sc);
    if (!sc || !(sc->name = strdup(name))) {
        free(sc);
        return NULL;
    }
    sc->size = size;
    if (!tsearch(sc, &s->scopes, cmp_scope)) {
        free(sc->name);
        free(sc);
        return NULL;
    }
    return sc;
}

static entry_t *find_entry(scope_t *sc, const char *key) {
    entry_t probe = {.key = (char *)key};
    entry_t **found = tfind(&probe, &sc->entries, cmp_entry);
    return found ? *found : NULL;
}

/* Walk state for accounting the bytes of a scope being cleared. */
static _Thread_local size_t walk_bytes;
static void sum_bytes(const void *node, VISIT which, int depth) {
    (void)depth;
    if (which == postorder || which == leaf) {
        const entry_t *e = *(entry_t *const *)node;
        walk_bytes += strlen(e->key) + e->len;
    }
}

static void clear_scope(hvd_kv_store_t *s, scope_t *sc) {
    walk_bytes = 0;
    twalk(sc->entries, sum_bytes);
    s->total_bytes -= walk_bytes;
    clear_scope_data(s, sc);
}

hvd_status_t hvd__kv_store_put(hvd_kv_store_t *s, const char *scope, const char *key,
                               const void *value, size_t len) {
    if (len > s->limits.max_value_bytes)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "value of %zu bytes for %s/%s exceeds %zu", len,
                              scope, key, s->limits.max_value_bytes);
    hvd_status_t st = HVD_OK;
    pthread_mutex_lock(&s->lock);
    scope_t *sc = find_scope(s, scope);
    entry_t *e = sc ? find_entry(sc, key) : NULL;
    size_t old = e ? strlen(e->key) + e->len : 0;
    size_t add = strlen(key) + len;
    if (s->total_bytes - old + add > s->limits.max_total_bytes ||
        (!e && s->total_keys + 1 > s->limits.max_keys)) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "the store is full (%zu keys, %zu bytes)",
                            s->total_keys, s->total_bytes);
        goto out;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        goto err_nomem;
    if (len)
        memcpy(copy, value, len);
    if (!sc && !(sc = add_scope(s, scope, 0))) {
        free(copy);
        goto err_nomem;
    }
    if (e) {
        free(e->value);
        e->value = copy;
        e->len = len;
    } else {
        e = calloc(1, sizeof *e);
        if (!e || !(e->key = strdup(key)) || !tsearch(e, &sc->entries, cmp_entry)) {
            if (e)
                free(e->key);
            free(e);
            free(copy);
            goto err_nomem;
        }
        e->value = copy;
        e->len = len;
        sc->count++;
        s->total_keys++;
    }
    s->total_bytes = s->total_bytes - old + add;
    goto out;
err_nomem:
    st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory storing %s/%s", scope, key);
out:
    pthread_mutex_unlock(&s->lock);
    return st;
}

hvd_status_t hvd__kv_store_get(hvd_kv_store_t *s, const char *scope, const char *key,
                               uint8_t **value_p, size_t *len_p) {
    hvd_status_t st = HVD_OK;
    pthread_mutex_lock(&s->lock);
    scope_t *sc = find_scope(s, scope);
    entry_t *e = sc ? find_entry(sc, key) : NULL;
    if (!e) {
        st = hvd__error_set(HVD_ERR_NOT_FOUND, "%s/%s not found", scope, key);
        goto out;
    }
    uint8_t *copy = malloc(e->len + 1);
    if (!copy) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory reading %s/%s", scope, key);
        goto out;
    }
    memcpy(copy, e->value, e->len);
    copy[e->len] = 0;
    *value_p = copy;
    *len_p = e->len;
out:
    pthread_mutex_unlock(&s->lock);
    return st;
}

void hvd__kv_store_delete(hvd_kv_store_t *s, const char *scope, const char *key) {
    pthread_mutex_lock(&s->lock);
    scope_t *sc = find_scope(s, scope);
    if (!sc)
        goto out;
    if (sc->size > 0) {
        if (!tfind(key, &sc->finished, cmp_str)) {
            char *copy = strdup(key);
            if (!copy || !tsearch(copy, &sc->finished, cmp_str)) {
                free(copy);
                goto out;
            }
            sc->n_finished++;
        }
        if (sc->n_finished >= (size_t)sc->size)
            clear_scope(s, sc);
        goto out;
    }
    entry_t *e = find_entry(sc, key);
    if (e) {
        s->total_bytes -= strlen(e->key) + e->len;
        s->total_keys--;
        sc->count--;
        tdelete(e, &sc->entries, cmp_entry);
        free_entry(e);
    }
    if (sc->count == 0) {
        tdelete(sc, &s->scopes, cmp_scope);
        free_scope(sc);
    }
out:
    pthread_mutex_unlock(&s->lock);
}

int hvd__kv_store_has(hvd_kv_store_t *s, const char *scope, const char *key) {
    pthread_mutex_lock(&s->lock);
    scope_t *sc = find_scope(s, scope);
    int has = sc && find_entry(sc, key) != NULL;
    pthread_mutex_unlock(&s->lock);
    return has;
}

size_t hvd__kv_store_count(hvd_kv_store_t *s, const char *scope) {
    pthread_mutex_lock(&s->lock);
    scope_t *sc = find_scope(s, scope);
    size_t n = sc ? sc->count : 0;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static void put_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static _Thread_local uint8_t *walk_out;
static void encode_entry(const void *node, VISIT which, int depth) {
    (void)depth;
    if (which != postorder && which != leaf)
        return; /* postorder of an inner node and leaf = in-order position */
    const entry_t *e = *(entry_t *const *)node;
    size_t kl = strlen(e->key);
    put_u32le(walk_out, (uint32_t)kl);
    put_u32le(walk_out + 4, (uint32_t)e->len);
    memcpy(walk_out + 8, e->key, kl);
    memcpy(walk_out + 8 + kl, e->value, e->len);
    walk_out += 8 + kl + e->len;
}

hvd_status_t hvd__kv_store_snapshot(hvd_kv_store_t *s, const char *scope, uint8_t **body_p,
                                    size_t *len_p) {
    pthread_mutex_lock(&s->lock);
    scope_t *sc = find_scope(s, scope);
    size_t count = sc ? sc->count : 0;
    walk_bytes = 0;
    if (sc)
        twalk(sc->entries, sum_bytes);
    size_t len = 8 + count * 8 + walk_bytes;
    uint8_t *body = malloc(len);
    if (!body) {
        pthread_mutex_unlock(&s->lock);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory encoding scope %s", scope);
    }
    memcpy(body, HVD_KV_SCOPE_MAGIC, 4);
    put_u32le(body + 4, (uint32_t)count);
    walk_out = body + 8;
    if (sc)
        twalk(sc->entries, encode_entry);
    pthread_mutex_unlock(&s->lock);
    *body_p = body;
    *len_p = len;
    return HVD_OK;
}

hvd_status_t hvd__kv_store_reset(hvd_kv_store_t *s, const char *const *scopes, const int *sizes,
                                 size_t n) {
    hvd_status_t st = HVD_OK;
    pthread_mutex_lock(&s->lock);
    tdestroy(s->scopes, free_scope);
    s->scopes = NULL;
    s->total_bytes = 0;
    s->total_keys = 0;
    for (size_t i = 0; i < n; i++) {
        scope_t *sc = find_scope(s, scopes[i]);
        if (sc) {
            sc->size = sizes[i];
        } else if (!add_scope(s, scopes[i], sizes[i])) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory declaring scope %s", scopes[i]);
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}
