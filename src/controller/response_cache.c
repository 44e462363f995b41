/* The response cache (response_cache.h). Entries live in one array indexed by bit, so a bit
 * is found in O(1); a hash table of bit chains finds a name in O(1) on average; a doubly
 * linked list through the entries, least recently used first, gives the recency order, so
 * touch and eviction are O(1) too. Only put, touch and erase change that list (moving an entry
 * to its tail), which makes the order a pure function of the calls every rank makes alike.
 * Free bits below the highest bit ever handed out wait in a min-heap, so that the lowest free
 * bit is found in O(log n) and a new entry never lengthens the bit vector needlessly. */
#include "controller/response_cache.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define INITIAL_SLOTS 16u
#define INITIAL_BUCKETS 16u

typedef struct {
    hvd_request_t req;   /* req.name == NULL while the bit is free */
    uint64_t hash;       /* of req.name, kept for rehashing and quick compares */
    uint32_t chain;      /* next bit in the same hash bucket */
    uint32_t prev, next; /* recency list: prev is less recently used */
} entry_t;

struct hvd_cache {
    uint32_t capacity;
    entry_t *ents; /* slots [0, frontier) are initialised */
    uint32_t ents_alloc;
    uint32_t frontier;   /* bits below it have been handed out at least once */
    uint32_t *free_heap; /* min-heap of the free bits below frontier */
    uint32_t nfree, heap_alloc;
    uint32_t *buckets; /* head bit of each chain, NONE when empty */
    size_t nbuckets;   /* a power of two */
    uint32_t count, nbits;
    uint32_t lru, mru; /* ends of the recency list, NONE when empty */
};

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static uint32_t *bucket_of(const hvd_cache_t *c, uint64_t h) {
    return &c->buckets[h & (c->nbuckets - 1)];
}

hvd_status_t hvd__cache_create(uint32_t capacity, hvd_cache_t **c_p) {
    if (capacity == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "response cache capacity must be at least 1");
    hvd_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        goto err_nomem;
    c->capacity = capacity;
    c->ents_alloc = c->heap_alloc = capacity < INITIAL_SLOTS ? capacity : INITIAL_SLOTS;
    c->ents = malloc(c->ents_alloc * sizeof *c->ents);
    if (!c->ents)
        goto err_free_cache;
    c->free_heap = malloc(c->heap_alloc * sizeof *c->free_heap);
    if (!c->free_heap)
        goto err_free_ents;
    c->nbuckets = INITIAL_BUCKETS;
    c->buckets = malloc(c->nbuckets * sizeof *c->buckets);
    if (!c->buckets)
        goto err_free_heap;
    memset(c->buckets, 0xff, c->nbuckets * sizeof *c->buckets); /* every bucket NONE */
    c->lru = c->mru = NONE;
    *c_p = c;
    return HVD_OK;

err_free_heap:
    free(c->free_heap);
err_free_ents:
    free(c->ents);
err_free_cache:
    free(c);
err_nomem:
    return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a response cache of %u entries",
                          capacity);
}

void hvd__cache_destroy(hvd_cache_t *c) {
    if (!c)
        return;
    for (uint32_t b = 0; b < c->frontier; b++)
        free(c->ents[b].req.name);
    free(c->buckets);
    free(c->free_heap);
    free(c->ents);
    free(c);
}

uint32_t hvd__cache_nbits(const hvd_cache_t *c) {
    return c->nbits;
}

uint32_t hvd__cache_capacity(const hvd_cache_t *c) {
    return c->capacity;
}

static int in_use(const hvd_cache_t *c, uint32_t bit) {
    return bit < c->frontier && c->ents[bit].req.name != NULL;
}

static uint32_t find(const hvd_cache_t *c, const char *name, uint64_t h) {
    for (uint32_t b = *bucket_of(c, h); b != NONE; b = c->ents[b].chain)
        if (c->ents[b].hash == h && strcmp(c->ents[b].req.name, name) == 0)
            return b;
    return NONE;
}

/* ---- the recency list ---- */

static void list_unlink(hvd_cache_t *c, uint32_t b) {
    entry_t *e = &c->ents[b];
    if (e->prev != NONE)
        c->ents[e->prev].next = e->next;
    else
        c->lru = e->next;
    if (e->next != NONE)
        c->ents[e->next].prev = e->prev;
    else
        c->mru = e->prev;
}

static void list_append(hvd_cache_t *c, uint32_t b) {
    entry_t *e = &c->ents[b];
    e->prev = c->mru;
    e->next = NONE;
    if (c->mru != NONE)
        c->ents[c->mru].next = b;
    else
        c->lru = b;
    c->mru = b;
}

/* ---- the free-bit min-heap ---- */

static void heap_push(hvd_cache_t *c, uint32_t bit) {
    uint32_t *h = c->free_heap, i = c->nfree++;
    while (i > 0 && h[(i - 1) / 2] > bit) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = bit;
}

static uint32_t heap_pop(hvd_cache_t *c) {
    uint32_t *h = c->free_heap, top = h[0], last = h[--c->nfree], i = 0;
    for (;;) {
        uint32_t l = 2 * i + 1, m;
        if (l >= c->nfree)
            break;
        m = (l + 1 < c->nfree && h[l + 1] < h[l]) ? l + 1 : l;
        if (h[m] >= last)
            break;
        h[i] = h[m];
        i = m;
    }
    if (c->nfree > 0)
        h[i] = last;
    return top;
}

/* ---- growth: called before any state changes, so a failure leaves the cache as it was ---- */

/* Make room for slot `need - 1` in the entry array and the heap (which can hold every bit
 * below frontier, so that erase, which cannot fail, never needs to grow it). */
static hvd_status_t ensure_slots(hvd_cache_t *c, uint32_t need) {
    if (need <= c->ents_alloc && need <= c->heap_alloc)
        return HVD_OK;
    size_t n = c->ents_alloc;
    while (n < need)
        n *= 2;
    if (n > c->capacity)
        n = c->capacity;
    if (c->ents_alloc < n) {
        entry_t *e = realloc(c->ents, n * sizeof *e);
        if (!e)
            goto err_nomem;
        c->ents = e;
        c->ents_alloc = (uint32_t)n;
    }
    if (c->heap_alloc < n) {
        uint32_t *h = realloc(c->free_heap, n * sizeof *h);
        if (!h)
            goto err_nomem;
        c->free_heap = h;
        c->heap_alloc = (uint32_t)n;
    }
    return HVD_OK;

err_nomem:
    return hvd__error_set(HVD_ERR_NO_MEMORY,
                          "out of memory growing the response cache to %zu entries", n);
}

/* Keep the load factor at most 1 so that chains stay short. */
static hvd_status_t ensure_buckets(hvd_cache_t *c, uint32_t count) {
    if (count <= c->nbuckets)
        return HVD_OK;
    size_t n = c->nbuckets * 2;
    uint32_t *nb = malloc(n * sizeof *nb);
    if (!nb)
        return hvd__error_set(
            HVD_ERR_NO_MEMORY,
            "out of memory growing the response cache's name index to %zu buckets", n);
    memset(nb, 0xff, n * sizeof *nb);
    for (uint32_t b = 0; b < c->frontier; b++) {
        entry_t *e = &c->ents[b];
        if (!e->req.name)
            continue;
        e->chain = nb[e->hash & (n - 1)];
        nb[e->hash & (n - 1)] = b;
    }
    free(c->buckets);
    c->buckets = nb;
    c->nbuckets = n;
    return HVD_OK;
}

/* ---- entries ---- */

static void copy_params(hvd_request_t *dst, const hvd_request_t *src) {
    char *name = dst->name;
    *dst = *src;
    dst->name = name;
    dst->rank = -1;
    /* a key and a deadline belong to one operation, not to its name */
    dst->key = NULL;
    dst->timeout_ms = 0;
    /* dims past ndims are not part of the request; zero them so get() shows no leftovers */
    memset(dst->dims + src->ndims, 0, (HVD_NEG_MAX_DIMS - src->ndims) * sizeof dst->dims[0]);
}

/* Take bit out of the name index and the recency list and free its copy. */
static void remove_entry(hvd_cache_t *c, uint32_t bit) {
    entry_t *e = &c->ents[bit];
    uint32_t *pp = bucket_of(c, e->hash);
    while (*pp != bit)
        pp = &c->ents[*pp].chain;
    *pp = e->chain;
    list_unlink(c, bit);
    free(e->req.name);
    e->req.name = NULL;
    c->count--;
}

hvd_cache_state_t hvd__cache_lookup(const hvd_cache_t *c, const hvd_request_t *req,
                                    uint32_t *bit_p) {
    if (!req->name)
        return HVD_CACHE_MISS;
    uint32_t b = find(c, req->name, hash_name(req->name));
    if (b == NONE)
        return HVD_CACHE_MISS;
    const hvd_request_t *have = &c->ents[b].req;
    /* ndims is compared first: a cached one is <= HVD_NEG_MAX_DIMS, so the dims compare
     * below stays inside both arrays */
    int same = have->type == req->type && have->dtype == req->dtype && have->op == req->op &&
               have->root == req->root && have->pset == req->pset && have->ndims == req->ndims &&
               memcmp(have->dims, req->dims, have->ndims * sizeof have->dims[0]) == 0 &&
               memcmp(&have->prescale, &req->prescale, sizeof have->prescale) == 0 &&
               memcmp(&have->postscale, &req->postscale, sizeof have->postscale) == 0;
    if (bit_p)
        *bit_p = b;
    return same ? HVD_CACHE_HIT : HVD_CACHE_INVALID;
}

hvd_status_t hvd__cache_put(hvd_cache_t *c, const hvd_request_t *req, uint32_t *bit_p,
                            int *evicted_p) {
    if (!req->name)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "cannot cache a request without a name");
    if (req->ndims > HVD_NEG_MAX_DIMS)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "cannot cache '%s': %d dimensions, at most %d are supported",
                              req->name, req->ndims, HVD_NEG_MAX_DIMS);
    uint64_t h = hash_name(req->name);
    uint32_t bit = find(c, req->name, h);
    int evicted = 0;
    if (bit != NONE) {
        /* same name: same bit, so other ranks' bit vectors keep meaning the same name */
        copy_params(&c->ents[bit].req, req);
        list_unlink(c, bit);
        list_append(c, bit);
        goto out;
    }

    char *name = strdup(req->name);
    if (!name)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory caching '%s'", req->name);
    hvd_status_t st;
    if (c->count == c->capacity) {
        /* full, so every bit is in use: the least recently used one is the bit to reuse */
        bit = c->lru;
        remove_entry(c, bit);
        evicted = 1;
    } else if (c->nfree > 0) {
        if ((st = ensure_buckets(c, c->count + 1)) != HVD_OK)
            goto err_free_name;
        bit = heap_pop(c);
    } else {
        if ((st = ensure_slots(c, c->frontier + 1)) != HVD_OK ||
            (st = ensure_buckets(c, c->count + 1)) != HVD_OK)
            goto err_free_name;
        bit = c->frontier++;
    }

    entry_t *e = &c->ents[bit];
    e->req.name = name;
    copy_params(&e->req, req);
    e->hash = h;
    e->chain = *bucket_of(c, h);
    *bucket_of(c, h) = bit;
    list_append(c, bit);
    c->count++;
    if (bit >= c->nbits)
        c->nbits = bit + 1;

out:
    if (bit_p)
        *bit_p = bit;
    if (evicted_p)
        *evicted_p = evicted;
    return HVD_OK;

err_free_name:
    free(name);
    return st;
}

const hvd_request_t *hvd__cache_get(const hvd_cache_t *c, uint32_t bit) {
    return in_use(c, bit) ? &c->ents[bit].req : NULL;
}

void hvd__cache_touch(hvd_cache_t *c, uint32_t bit) {
    if (!in_use(c, bit) || c->mru == bit)
        return;
    list_unlink(c, bit);
    list_append(c, bit);
}

void hvd__cache_erase(hvd_cache_t *c, uint32_t bit) {
    if (!in_use(c, bit))
        return;
    remove_entry(c, bit);
    heap_push(c, bit);
    /* the highest bit in use only drops here; each step down passes a free bit that a later
     * put had to climb over one at a time (lowest free bit first), so this is amortised O(1) */
    while (c->nbits > 0 && !in_use(c, c->nbits - 1))
        c->nbits--;
}
