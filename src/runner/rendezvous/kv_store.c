/* The store's data (kv_store.h): reference-counted blobs, intrusive chained hash tables of scopes
 * and of each scope's keys (seeded FNV-1a), and per scope a cached sorted key list and snapshot,
 * dropped when the scope changes. */
#include "runner/rendezvous/kv_store.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "rendezvous/kv_protocol.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- blobs ---- */

struct hvd_kv_blob {
    atomic_size_t refs;
    size_t len;
    uint8_t data[]; /* len bytes, then a NUL */
};

static hvd_kv_blob_t *blob_alloc(size_t len) {
    if (len > SIZE_MAX - sizeof(hvd_kv_blob_t) - 1)
        return NULL;
    hvd_kv_blob_t *b = malloc(sizeof *b + len + 1);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    b->len = len;
    b->data[len] = 0;
    return b;
}

static hvd_kv_blob_t *blob_ref(hvd_kv_blob_t *b) {
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void hvd__kv_blob_unref(hvd_kv_blob_t *b) {
    /* acq_rel: the last owner must see every write made through the others before freeing */
    if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
        free(b);
}

const uint8_t *hvd__kv_blob_data(const hvd_kv_blob_t *b) {
    return b->data;
}

size_t hvd__kv_blob_len(const hvd_kv_blob_t *b) {
    return b->len;
}

/* ---- intrusive chained hash table of names ---- */

typedef struct node {
    struct node *next;
    uint64_t hash;
    size_t name_len;
    const char *name; /* in the owning object */
} node_t;

typedef struct {
    node_t **slots;
    size_t nslots; /* 0 or a power of two */
    size_t count;
} table_t;

static node_t *table_find(const table_t *t, const char *name, size_t len, uint64_t hash) {
    if (t->nslots == 0)
        return NULL;
    for (node_t *n = t->slots[hash & (t->nslots - 1)]; n; n = n->next)
        if (n->hash == hash && n->name_len == len && memcmp(n->name, name, len) == 0)
            return n;
    return NULL;
}

/* Make room for one more node at load factor 1. Only a table without slots can fail: a
 * failed growth merely lengthens the chains. */
static int table_reserve(table_t *t) {
    if (t->count < t->nslots)
        return 0;
    size_t n = t->nslots ? t->nslots * 2 : 8;
    node_t **slots = calloc(n, sizeof *slots);
    if (!slots)
        return t->nslots ? 0 : -1;
    for (size_t i = 0; i < t->nslots; i++) {
        node_t *x = t->slots[i];
        while (x) {
            node_t *next = x->next;
            size_t j = x->hash & (n - 1);
            x->next = slots[j];
            slots[j] = x;
            x = next;
        }
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = n;
    return 0;
}

static void table_link(table_t *t, node_t *x) {
    size_t j = x->hash & (t->nslots - 1);
    x->next = t->slots[j];
    t->slots[j] = x;
    t->count++;
}

static void table_unlink(table_t *t, node_t *x) {
    node_t **pp = &t->slots[x->hash & (t->nslots - 1)];
    while (*pp != x)
        pp = &(*pp)->next;
    *pp = x->next;
    t->count--;
}

/* ---- store objects ---- */

typedef struct {
    node_t node; /* first: a node_t * is an entry_t * */
    hvd_kv_blob_t *value;
    char key[];
} entry_t;

typedef struct {
    node_t node; /* first: a node_t * is a scope_t * */
    table_t entries;
    size_t size;       /* > 0: predefined, sized by the slot plan */
    uint8_t *finished; /* predefined: bitmap of the ranks that finished */
    size_t n_finished;
    entry_t **sorted; /* entries in key order; valid while sorted_valid */
    int sorted_valid;
    hvd_kv_blob_t *snapshot; /* cached encoding, NULL when stale */
    int64_t changed_ms;      /* clock.h time of the last PUT into the scope */
    char name[];
} scope_t;

struct hvd_kv_store {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* CLOCK_MONOTONIC; broadcast on PUT and reset */
    unsigned n_waiting;     /* threads in hvd__kv_store_wait */
    hvd_kv_limits_t limits;
    table_t scopes;
    size_t total_bytes, total_keys;
    _Atomic uint64_t version;
    uint64_t seed;
    hvd_kv_store_notify_fn notify;
    void *notify_arg;
};

/* FNV-1a with a per-store seed and a 64-bit finaliser. Only authenticated clients choose
 * names, so this is about spreading real names, not about resisting chosen collisions. */
static uint64_t hash_name(uint64_t seed, const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}

/* 1 when s is a valid scope or key name (kv_protocol.h); its length in *len_p. */
static int name_ok(const char *s, size_t *len_p) {
    if (!s)
        return 0;
    size_t n = strnlen(s, HVD_KV_NAME_MAX + 1);
    *len_p = n;
    return hvd__kv_name_valid(s, n, 0);
}

static scope_t *scope_find(hvd_kv_store_t *s, const char *name, size_t len) {
    return (scope_t *)table_find(&s->scopes, name, len, hash_name(s->seed, name, len));
}

static entry_t *entry_find(hvd_kv_store_t *s, scope_t *sc, const char *key, size_t len) {
    return (entry_t *)table_find(&sc->entries, key, len, hash_name(s->seed, key, len));
}

/* A new scope, not yet linked into the store. */
static scope_t *scope_new(hvd_kv_store_t *s, const char *name, size_t len, size_t size) {
    scope_t *sc = calloc(1, sizeof *sc + len + 1);
    if (!sc)
        return NULL;
    memcpy(sc->name, name, len);
    sc->node.name = sc->name;
    sc->node.name_len = len;
    sc->node.hash = hash_name(s->seed, name, len);
    sc->size = size;
    if (size > 0 && !(sc->finished = calloc((size + 7) / 8, 1))) {
        free(sc);
        return NULL;
    }
    return sc;
}

static void scope_invalidate(scope_t *sc, int keys_changed) {
    hvd__kv_blob_unref(sc->snapshot);
    sc->snapshot = NULL;
    if (keys_changed)
        sc->sorted_valid = 0;
}

/* Drop every entry of the scope (with the store's accounting) and its finished list. */
static void scope_clear(hvd_kv_store_t *s, scope_t *sc) {
    for (size_t i = 0; i < sc->entries.nslots; i++) {
        node_t *n = sc->entries.slots[i];
        while (n) {
            node_t *next = n->next;
            entry_t *e = (entry_t *)n;
            s->total_bytes -= n->name_len + e->value->len;
            s->total_keys--;
            hvd__kv_blob_unref(e->value);
            free(e);
            n = next;
        }
    }
    free(sc->entries.slots);
    sc->entries = (table_t){0};
    free(sc->sorted);
    sc->sorted = NULL;
    scope_invalidate(sc, 1);
    if (sc->finished)
        memset(sc->finished, 0, (sc->size + 7) / 8);
    sc->n_finished = 0;
    sc->changed_ms = 0;
}

static void scope_free(hvd_kv_store_t *s, scope_t *sc) {
    if (!sc)
        return;
    scope_clear(s, sc);
    free(sc->finished);
    free(sc);
}

static void clear_all(hvd_kv_store_t *s) {
    for (size_t i = 0; i < s->scopes.nslots; i++) {
        node_t *n = s->scopes.slots[i];
        while (n) {
            node_t *next = n->next;
            scope_free(s, (scope_t *)n);
            n = next;
        }
    }
    free(s->scopes.slots);
    s->scopes = (table_t){0};
}

/* Called locked after every change. A PUT (sc and key set) or a reset (sc NULL, wake set) may
 * satisfy readers; a removal never does. The version is bumped before anyone is told: see
 * hvd__kv_store_ready. */
static void changed(hvd_kv_store_t *s, const scope_t *sc, const char *key, int wake) {
    atomic_fetch_add(&s->version, 1);
    if (!wake)
        return;
    if (s->notify)
        s->notify(s->notify_arg, sc ? sc->name : NULL, sc ? key : NULL, sc ? sc->entries.count : 0);
    if (s->n_waiting)
        pthread_cond_broadcast(&s->changed);
}

/* ---- public ---- */

hvd_status_t hvd__kv_store_create(const hvd_kv_limits_t *limits, hvd_kv_store_t **store_p) {
    hvd_kv_limits_t lim = limits ? *limits : (hvd_kv_limits_t){0};
    if (!lim.max_value_bytes)
        lim.max_value_bytes = HVD_KV_DEFAULT_MAX_VALUE;
    if (!lim.max_total_bytes)
        lim.max_total_bytes = HVD_KV_DEFAULT_MAX_TOTAL;
    if (!lim.max_keys)
        lim.max_keys = HVD_KV_DEFAULT_MAX_KEYS;
    if (lim.max_value_bytes > UINT32_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "KV store: a value limit of %zu bytes does not fit the scope "
                              "encoding (at most %u)",
                              lim.max_value_bytes, (unsigned)UINT32_MAX);
    hvd_kv_store_t *s = calloc(1, sizeof *s);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory creating the KV store");
    s->limits = lim;
    atomic_init(&s->version, 1);
    if (getrandom(&s->seed, sizeof s->seed, GRND_NONBLOCK) != (ssize_t)sizeof s->seed)
        s->seed = (uint64_t)(uintptr_t)s ^ (uint64_t)hvd__clock_now_ms();
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        goto err_free;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&s->changed, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        goto err_free;
    if (pthread_mutex_init(&s->lock, NULL) != 0)
        goto err_cond;
    *store_p = s;
    return HVD_OK;

err_cond:
    pthread_cond_destroy(&s->changed);
err_free:
    free(s);
    return hvd__error_set(HVD_ERR_NO_MEMORY, "KV store: cannot create its lock");
}

void hvd__kv_store_destroy(hvd_kv_store_t *s) {
    if (!s)
        return;
    clear_all(s);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->changed);
    free(s);
}

void hvd__kv_store_set_notify(hvd_kv_store_t *s, hvd_kv_store_notify_fn fn, void *arg) {
    pthread_mutex_lock(&s->lock);
    s->notify = fn;
    s->notify_arg = arg;
    pthread_mutex_unlock(&s->lock);
}

hvd_status_t hvd__kv_store_put(hvd_kv_store_t *s, const char *scope, const char *key,
                               const void *value, size_t len) {
    size_t sl, kl;
    if (!name_ok(scope, &sl) || !name_ok(key, &kl))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "KV store: invalid scope or key name");
    if (len > s->limits.max_value_bytes)
        return hvd__error_set(HVD_ERR_TOO_LARGE,
                              "KV store: value of %zu bytes for %s/%s exceeds the limit of %zu",
                              len, scope, key, s->limits.max_value_bytes);
    if (len && !value)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "KV store: NULL value of %zu bytes", len);

    hvd_status_t st;
    pthread_mutex_lock(&s->lock);
    scope_t *sc = scope_find(s, scope, sl);
    entry_t *e = sc ? entry_find(s, sc, key, kl) : NULL;
    size_t old = e ? kl + e->value->len : 0, add = kl + len;
    /* Bounds before any allocation. */
    if (!e && s->total_keys >= s->limits.max_keys) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "KV store full: %zu keys (the limit) refusing %s/%s",
                            s->total_keys, scope, key);
        goto out_unlock;
    }
    if (add > s->limits.max_total_bytes || s->total_bytes - old > s->limits.max_total_bytes - add) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY,
                            "KV store full: %zu of %zu bytes used, refusing %zu more for %s/%s",
                            s->total_bytes, s->limits.max_total_bytes, add, scope, key);
        goto out_unlock;
    }
    hvd_kv_blob_t *blob = blob_alloc(len);
    if (!blob)
        goto err_nomem;
    if (len)
        memcpy(blob->data, value, len);
    scope_t *fresh = NULL;
    if (!sc) {
        if (!(fresh = scope_new(s, scope, sl, 0)) || table_reserve(&s->scopes) != 0)
            goto err_free_fresh;
        sc = fresh;
    }
    if (e) {
        hvd__kv_blob_unref(e->value);
        e->value = blob;
        scope_invalidate(sc, 0);
    } else {
        if (table_reserve(&sc->entries) != 0 || !(e = calloc(1, sizeof *e + kl + 1)))
            goto err_free_fresh;
        memcpy(e->key, key, kl);
        e->node.name = e->key;
        e->node.name_len = kl;
        e->node.hash = hash_name(s->seed, key, kl);
        e->value = blob;
        if (fresh)
            table_link(&s->scopes, &fresh->node);
        table_link(&sc->entries, &e->node);
        s->total_keys++;
        scope_invalidate(sc, 1);
    }
    s->total_bytes = s->total_bytes - old + add;
    sc->changed_ms = hvd__clock_now_ms();
    changed(s, sc, e->key, 1);
    st = HVD_OK;
    goto out_unlock;

err_free_fresh:
    scope_free(s, fresh);
    hvd__kv_blob_unref(blob);
err_nomem:
    st = hvd__error_set(HVD_ERR_NO_MEMORY, "KV store: out of memory storing %s/%s", scope, key);
out_unlock:
    pthread_mutex_unlock(&s->lock);
    return st;
}

hvd_status_t hvd__kv_store_get_blob(hvd_kv_store_t *s, const char *scope, const char *key,
                                    hvd_kv_blob_t **blob_p) {
    size_t sl, kl;
    if (!name_ok(scope, &sl) || !name_ok(key, &kl))
        return hvd__error_set(HVD_ERR_NOT_FOUND, "KV store: no such key (invalid name)");
    pthread_mutex_lock(&s->lock);
    scope_t *sc = scope_find(s, scope, sl);
    entry_t *e = sc ? entry_find(s, sc, key, kl) : NULL;
    hvd_kv_blob_t *b = e ? blob_ref(e->value) : NULL;
    pthread_mutex_unlock(&s->lock);
    if (!b)
        return hvd__error_set(HVD_ERR_NOT_FOUND, "KV store: %s/%s not found", scope, key);
    *blob_p = b;
    return HVD_OK;
}

hvd_status_t hvd__kv_store_get(hvd_kv_store_t *s, const char *scope, const char *key,
                               uint8_t **value_p, size_t *len_p) {
    hvd_kv_blob_t *b;
    hvd_status_t st = hvd__kv_store_get_blob(s, scope, key, &b);
    if (st != HVD_OK)
        return st;
    uint8_t *copy = malloc(b->len + 1);
    if (!copy) {
        hvd__kv_blob_unref(b);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "KV store: out of memory reading %s/%s", scope,
                              key);
    }
    memcpy(copy, b->data, b->len + 1);
    *len_p = b->len;
    *value_p = copy;
    hvd__kv_blob_unref(b);
    return HVD_OK;
}

/* A rank of a predefined scope: decimal digits naming a number below size. */
static int parse_rank(const char *key, size_t len, size_t size, size_t *rank_p) {
    if (len == 0 || len > 19)
        return 0;
    uint64_t r = 0;
    for (size_t i = 0; i < len; i++) {
        if (key[i] < '0' || key[i] > '9')
            return 0;
        r = r * 10 + (uint64_t)(key[i] - '0');
    }
    if (r >= size)
        return 0;
    *rank_p = (size_t)r;
    return 1;
}

hvd_status_t hvd__kv_store_delete(hvd_kv_store_t *s, const char *scope, const char *key) {
    size_t sl, kl;
    if (!name_ok(scope, &sl) || !name_ok(key, &kl))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "KV store: invalid scope or key name");
    pthread_mutex_lock(&s->lock);
    scope_t *sc = scope_find(s, scope, sl);
    if (!sc)
        goto out_unlock;
    if (sc->size > 0) {
        size_t rank;
        if (!parse_rank(key, kl, sc->size, &rank)) {
            HVD_LOG_D("rendezvous: DELETE %s/%s ignored: not a rank below the scope's size %zu",
                      scope, key, sc->size);
            goto out_unlock;
        }
        uint8_t bit = (uint8_t)(1u << (rank % 8));
        if (!(sc->finished[rank / 8] & bit)) {
            sc->finished[rank / 8] |= bit;
            sc->n_finished++;
        }
        if (sc->n_finished == sc->size) {
            /* Only this scope's data and list: the reference cleared every list here. */
            HVD_LOG_D("rendezvous: all %zu ranks finished with scope %s; clearing it", sc->size,
                      scope);
            scope_clear(s, sc);
        }
    } else {
        entry_t *e = entry_find(s, sc, key, kl);
        if (e) {
            table_unlink(&sc->entries, &e->node);
            s->total_bytes -= kl + e->value->len;
            s->total_keys--;
            hvd__kv_blob_unref(e->value);
            free(e);
            scope_invalidate(sc, 1);
        }
        if (sc->entries.count == 0) {
            table_unlink(&s->scopes, &sc->node);
            scope_free(s, sc);
        }
    }
    changed(s, NULL, NULL, 0);
out_unlock:
    pthread_mutex_unlock(&s->lock);
    return HVD_OK;
}

int hvd__kv_store_has(hvd_kv_store_t *s, const char *scope, const char *key) {
    return key && hvd__kv_store_ready(s, scope, key, 0, NULL);
}

size_t hvd__kv_store_count(hvd_kv_store_t *s, const char *scope) {
    size_t sl;
    if (!name_ok(scope, &sl))
        return 0;
    pthread_mutex_lock(&s->lock);
    scope_t *sc = scope_find(s, scope, sl);
    size_t n = sc ? sc->entries.count : 0;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void hvd__kv_store_usage(hvd_kv_store_t *s, size_t *keys_p, size_t *bytes_p) {
    pthread_mutex_lock(&s->lock);
    *keys_p = s->total_keys;
    *bytes_p = s->total_bytes;
    pthread_mutex_unlock(&s->lock);
}

static int cmp_entries(const void *a, const void *b) {
    /* strcmp compares as unsigned char: byte order, and names hold no NUL */
    return strcmp((*(entry_t *const *)a)->key, (*(entry_t *const *)b)->key);
}

static void put_u32le(uint8_t *p, size_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The scope's encoding (cached); NULL when out of memory. Called locked; sc may be NULL. */
static hvd_kv_blob_t *scope_encode(scope_t *sc) {
    if (sc && sc->snapshot)
        return sc->snapshot;
    size_t count = sc ? sc->entries.count : 0;
    if (count && !sc->sorted_valid) {
        entry_t **sorted = realloc(sc->sorted, count * sizeof *sorted);
        if (!sorted)
            return NULL;
        sc->sorted = sorted;
        size_t k = 0;
        for (size_t i = 0; i < sc->entries.nslots; i++)
            for (node_t *n = sc->entries.slots[i]; n; n = n->next)
                sorted[k++] = (entry_t *)n;
        qsort(sorted, count, sizeof *sorted, cmp_entries);
        sc->sorted_valid = 1;
    }
    /* The size cannot overflow: the store's limits bound it, and every length fits u32. */
    size_t len = 8;
    for (size_t i = 0; i < count; i++)
        len += 8 + sc->sorted[i]->node.name_len + sc->sorted[i]->value->len;
    hvd_kv_blob_t *b = blob_alloc(len);
    if (!b)
        return NULL;
    uint8_t *p = b->data;
    memcpy(p, HVD_KV_SCOPE_MAGIC, 4);
    put_u32le(p + 4, count);
    p += 8;
    for (size_t i = 0; i < count; i++) {
        const entry_t *e = sc->sorted[i];
        put_u32le(p, e->node.name_len);
        put_u32le(p + 4, e->value->len);
        memcpy(p + 8, e->key, e->node.name_len);
        memcpy(p + 8 + e->node.name_len, e->value->data, e->value->len);
        p += 8 + e->node.name_len + e->value->len;
    }
    if (sc)
        sc->snapshot = b; /* the scope holds this reference until it changes */
    return b;
}

hvd_status_t hvd__kv_store_snapshot_blob(hvd_kv_store_t *s, const char *scope,
                                         hvd_kv_blob_t **blob_p) {
    size_t sl;
    int valid = name_ok(scope, &sl);
    pthread_mutex_lock(&s->lock);
    scope_t *sc = valid ? scope_find(s, scope, sl) : NULL;
    hvd_kv_blob_t *b = scope_encode(sc);
    if (b && sc)
        blob_ref(b); /* one for the caller; an unknown scope's encoding is the caller's alone */
    pthread_mutex_unlock(&s->lock);
    if (!b)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "KV store: out of memory encoding scope %s",
                              valid ? scope : "(invalid)");
    *blob_p = b;
    return HVD_OK;
}

hvd_status_t hvd__kv_store_snapshot(hvd_kv_store_t *s, const char *scope, uint8_t **body_p,
                                    size_t *len_p) {
    hvd_kv_blob_t *b;
    hvd_status_t st = hvd__kv_store_snapshot_blob(s, scope, &b);
    if (st != HVD_OK)
        return st;
    uint8_t *copy = malloc(b->len);
    if (!copy) {
        hvd__kv_blob_unref(b);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "KV store: out of memory copying scope %s", scope);
    }
    memcpy(copy, b->data, b->len);
    *len_p = b->len;
    *body_p = copy;
    hvd__kv_blob_unref(b);
    return HVD_OK;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

hvd_status_t hvd__kv_store_reset(hvd_kv_store_t *s, const char *const *names, const int *sizes,
                                 size_t n) {
    /* Check everything before clearing anything. */
    size_t len;
    for (size_t i = 0; i < n; i++) {
        if (!name_ok(names[i], &len))
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "KV store: predefined scope #%zu has an invalid name", i);
        if (sizes[i] <= 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "KV store: predefined scope %s has size %d (must be > 0)",
                                  names[i], sizes[i]);
    }
    if (n > 1) {
        const char **sorted = malloc(n * sizeof *sorted);
        if (!sorted)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "KV store: out of memory checking scopes");
        memcpy(sorted, names, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_names);
        const char *dup = NULL;
        for (size_t i = 1; i < n && !dup; i++)
            if (strcmp(sorted[i - 1], sorted[i]) == 0)
                dup = sorted[i];
        free(sorted);
        if (dup)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "KV store: predefined scope %s is declared twice", dup);
    }

    hvd_status_t st = HVD_OK;
    pthread_mutex_lock(&s->lock);
    clear_all(s);
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(names[i]);
        scope_t *sc = scope_new(s, names[i], nl, (size_t)sizes[i]);
        if (!sc || table_reserve(&s->scopes) != 0) {
            scope_free(s, sc);
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "KV store: out of memory declaring scope %s",
                                names[i]);
            break;
        }
        table_link(&s->scopes, &sc->node);
    }
    changed(s, NULL, NULL, 1);
    pthread_mutex_unlock(&s->lock);
    return st;
}

int64_t hvd__kv_store_scope_age_ms(hvd_kv_store_t *s, const char *scope) {
    size_t sl;
    if (!name_ok(scope, &sl))
        return -1;
    pthread_mutex_lock(&s->lock);
    scope_t *sc = scope_find(s, scope, sl);
    int64_t age = sc && sc->changed_ms ? hvd__clock_now_ms() - sc->changed_ms : -1;
    pthread_mutex_unlock(&s->lock);
    return age;
}

uint64_t hvd__kv_store_version(hvd_kv_store_t *s) {
    return atomic_load(&s->version);
}

/* Called locked. */
static size_t count_locked(hvd_kv_store_t *s, const char *scope, size_t sl) {
    scope_t *sc = scope_find(s, scope, sl);
    return sc ? sc->entries.count : 0;
}

/* Called locked. */
static int ready_locked(hvd_kv_store_t *s, const char *scope, size_t sl, const char *key, size_t kl,
                        size_t min_count) {
    scope_t *sc = scope_find(s, scope, sl);
    if (!key) /* enough keys, or the word that there never will be */
        return (sc ? sc->entries.count : 0) >= min_count ||
               (sc && entry_find(s, sc, HVD_KV_ABORT_KEY, strlen(HVD_KV_ABORT_KEY)));
    return sc && entry_find(s, sc, key, kl) != NULL;
}

int hvd__kv_store_ready(hvd_kv_store_t *s, const char *scope, const char *key, size_t min_count,
                        uint64_t *version_p) {
    size_t sl, kl = 0;
    int valid = name_ok(scope, &sl) && (!key || name_ok(key, &kl));
    pthread_mutex_lock(&s->lock);
    int ready = valid && ready_locked(s, scope, sl, key, kl, min_count);
    if (version_p)
        *version_p = atomic_load(&s->version);
    pthread_mutex_unlock(&s->lock);
    return ready;
}

hvd_status_t hvd__kv_store_wait(hvd_kv_store_t *s, const char *scope, const char *key,
                                size_t min_count, int64_t deadline_ms) {
    size_t sl, kl = 0;
    if (!name_ok(scope, &sl) || (key && !name_ok(key, &kl)))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "KV store: invalid scope or key name");
    hvd_status_t st = HVD_OK;
    pthread_mutex_lock(&s->lock);
    s->n_waiting++;
    while (!ready_locked(s, scope, sl, key, kl, min_count)) {
        int left = hvd__clock_remaining_ms(deadline_ms);
        if (left == 0) {
            if (key)
                st = hvd__error_set(HVD_ERR_TIMEOUT, "KV store: timed out waiting for %s/%s", scope,
                                    key);
            else
                st = hvd__error_set(HVD_ERR_TIMEOUT,
                                    "KV store: timed out waiting for scope %s to hold %zu keys "
                                    "(it has %zu)",
                                    scope, min_count, count_locked(s, scope, sl));
            break;
        }
        /* Sleep in slices of at most a second so a far deadline needs no overflow care. */
        if (left > 1000)
            left = 1000;
        struct timespec ts = hvd__clock_abstime(CLOCK_MONOTONIC, left);
        pthread_cond_timedwait(&s->changed, &s->lock, &ts);
    }
    s->n_waiting--;
    pthread_mutex_unlock(&s->lock);
    return st;
}
