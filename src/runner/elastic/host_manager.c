/* The elastic driver's host view: discovered hosts, blacklist, cooldown, assignment order.
 *
 * Every host the manager knows has a state: discovered now (with its slots), or remembered
 * only because it was blacklisted or has failed before (its failure count drives the
 * exponential cooldown, so it must outlive a host's absence from discovery). States of hosts
 * that are neither discovered nor carry any failure are dropped at each update, which keeps
 * memory bounded by the hosts that matter. A hash index (open addressing, FNV-1a) finds a
 * state by name, so a poll of tens of thousands of hosts stays linear.
 *
 * An update builds the new states, index and order on the side and swaps them in only when
 * everything succeeded, so a failed update leaves the manager as it was. */
#include "runner/elastic/host_manager.h"

#include "common/clock.h"
#include "common/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    int slots;            /* as last discovered; 0 when not discovered */
    bool discovered;      /* listed by the last update */
    bool blacklisted;     /* excluded until an update re-admits it */
    bool in_view;         /* in the assignment order (available) */
    int failures;         /* times a cooldown was started: the c of the formula */
    int64_t cooldown_end; /* ms; meaningful once failures > 0 */
} host_state_t;

struct hvd_host_manager {
    hvd_host_manager_config_t cfg;
    host_state_t *states;
    size_t count, cap;
    uint32_t *index; /* state position + 1; 0 = empty; index_cap is a power of two */
    size_t index_cap;
    size_t *order; /* positions in states of the available hosts, in assignment order */
    size_t order_count;
    uint64_t rng; /* splitmix64 state for the default random source */
};

/* ---- name index ------------------------------------------------------------------------ */

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

/* A power of two at least twice n, so probes stay short. */
static size_t index_cap_for(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

typedef const char *(*name_at_fn)(const void *items, size_t i);

static const char *state_name_at(const void *items, size_t i) {
    return ((const host_state_t *)items)[i].name;
}

static const char *host_name_at(const void *items, size_t i) {
    return ((const hvd_host_t *)items)[i].name;
}

/* The slot holding name, or the empty slot where it would go. */
static size_t index_probe(const uint32_t *index, size_t cap, const void *items, name_at_fn name_at,
                          const char *name) {
    size_t mask = cap - 1;
    for (size_t i = (size_t)name_hash(name) & mask;; i = (i + 1) & mask)
        if (index[i] == 0 || strcmp(name_at(items, index[i] - 1), name) == 0)
            return i;
}

static long index_find(const uint32_t *index, size_t cap, const void *items, name_at_fn name_at,
                       const char *name) {
    if (!index)
        return -1;
    size_t slot = index_probe(index, cap, items, name_at, name);
    return index[slot] ? (long)index[slot] - 1 : -1;
}

static long state_find(const hvd_host_manager_t *hm, const char *name) {
    return index_find(hm->index, hm->index_cap, hm->states, state_name_at, name);
}

static hvd_status_t state_index_build(const host_state_t *states, size_t n, uint32_t **index_p,
                                      size_t *cap_p) {
    size_t cap = index_cap_for(n);
    uint32_t *index = calloc(cap, sizeof(*index));
    if (!index)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory for %zu hosts", n);
    for (size_t i = 0; i < n; i++)
        index[index_probe(index, cap, states, state_name_at, states[i].name)] = (uint32_t)(i + 1);
    *index_p = index;
    *cap_p = cap;
    return HVD_OK;
}

/* ---- validation and randomness ---------------------------------------------------------- */

static hvd_status_t check_name(const char *name, const char *what) {
    if (!name || !name[0])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "host manager: %s: empty host name", what);
    if (strnlen(name, HVD_HOST_MANAGER_NAME_MAX + 1) > HVD_HOST_MANAGER_NAME_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "host manager: %s: host name '%.40s...' is longer than %d "
                              "characters",
                              what, name, HVD_HOST_MANAGER_NAME_MAX);
    return HVD_OK;
}

static double default_random(void *arg) {
    uint64_t *s = arg;
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

static bool has_range(const hvd_host_manager_t *hm) {
    return hm->cfg.cooldown_lower_s > 0;
}

/* Length of the c-th cooldown in ms: L * 2^c + u * L seconds, clamped to [L, U]. */
static int64_t cooldown_ms(hvd_host_manager_t *hm, int c) {
    double lower = hm->cfg.cooldown_lower_s, upper = hm->cfg.cooldown_upper_s;
    double u = hm->cfg.random ? hm->cfg.random(hm->cfg.random_arg) : default_random(&hm->rng);
    if (!(u >= 0.0)) /* also catches NaN */
        u = 0.0;
    if (u > 1.0)
        u = 1.0;
    double delay = ldexp(lower, c > 64 ? 64 : c) + u * lower;
    if (delay > upper)
        delay = upper;
    if (delay < lower)
        delay = lower;
    return (int64_t)(delay * 1000.0);
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

hvd_status_t hvd__host_manager_create(const hvd_host_manager_config_t *cfg,
                                      hvd_host_manager_t **hm_p) {
    hvd_host_manager_config_t c = {0};
    if (cfg)
        c = *cfg;
    bool none = c.cooldown_lower_s == 0 && c.cooldown_upper_s == 0;
    if (!none && (c.cooldown_lower_s < 1 || c.cooldown_upper_s < c.cooldown_lower_s))
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "host manager: blacklist cooldown range %d..%d s is invalid: it "
                              "needs 1 <= lower <= upper",
                              c.cooldown_lower_s, c.cooldown_upper_s);
    hvd_host_manager_t *hm = calloc(1, sizeof(*hm));
    if (!hm)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory");
    hm->cfg = c;
    hm->rng = (uint64_t)hvd__clock_now_us() ^ (uint64_t)(uintptr_t)hm;
    *hm_p = hm;
    return HVD_OK;
}

static void states_free(host_state_t *states, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(states[i].name);
    free(states);
}

void hvd__host_manager_destroy(hvd_host_manager_t *hm) {
    if (!hm)
        return;
    states_free(hm->states, hm->count);
    free(hm->index);
    free(hm->order);
    free(hm);
}

/* ---- update ------------------------------------------------------------------------------- */

/* Names valid, slots >= 1, no name twice. Fills the discovery index the update reuses. */
static hvd_status_t check_discovery(const hvd_host_t *disc, size_t n, uint32_t *dindex,
                                    size_t dcap) {
    for (size_t i = 0; i < n; i++) {
        hvd_status_t st = check_name(disc[i].name, "discovered hosts");
        if (st != HVD_OK)
            return st;
        if (disc[i].slots < 1)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "host manager: discovered host '%s' has %d slots; a host needs "
                                  "at least 1",
                                  disc[i].name, disc[i].slots);
        size_t slot = index_probe(dindex, dcap, disc, host_name_at, disc[i].name);
        if (dindex[slot])
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "host manager: discovery listed host '%s' twice", disc[i].name);
        dindex[slot] = (uint32_t)(i + 1);
    }
    return HVD_OK;
}

hvd_status_t hvd__host_manager_update(hvd_host_manager_t *hm, const hvd_host_t *discovered,
                                      size_t n, int64_t now_ms, hvd_host_update_t *result_p) {
    hvd_status_t st;
    if (n > HVD_HOST_MANAGER_HOSTS_MAX)
        return hvd__error_set(HVD_ERR_TOO_LARGE,
                              "host manager: discovery listed %zu hosts, more than %d", n,
                              HVD_HOST_MANAGER_HOSTS_MAX);
    size_t dcap = index_cap_for(n);
    uint32_t *dindex = calloc(dcap, sizeof(*dindex));
    if (!dindex)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory for %zu hosts", n);
    st = check_discovery(discovered, n, dindex, dcap);
    if (st != HVD_OK)
        goto err_free_dindex;

    /* New states: the discovered hosts first, at their discovery positions, then the
     * undiscovered hosts that must be remembered. */
    size_t ncap = n + hm->count, nn = 0;
    host_state_t *ns = calloc(ncap ? ncap : 1, sizeof(*ns));
    size_t *norder = malloc((n ? n : 1) * sizeof(*norder));
    if (!ns || !norder) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory for %zu hosts", ncap);
        goto err_free_new;
    }
    for (size_t i = 0; i < n; i++, nn++) {
        host_state_t *s = &ns[nn];
        long old = state_find(hm, discovered[i].name);
        if (old >= 0) {
            s->blacklisted = hm->states[old].blacklisted;
            s->failures = hm->states[old].failures;
            s->cooldown_end = hm->states[old].cooldown_end;
        }
        s->slots = discovered[i].slots;
        s->discovered = true;
        s->name = strdup(discovered[i].name);
        if (!s->name) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory");
            goto err_free_new;
        }
    }
    for (size_t i = 0; i < hm->count; i++) {
        const host_state_t *o = &hm->states[i];
        if (index_find(dindex, dcap, discovered, host_name_at, o->name) >= 0)
            continue;
        if (!o->blacklisted && o->failures == 0)
            continue;
        if (nn >= HVD_HOST_MANAGER_HOSTS_MAX) {
            st = hvd__error_set(HVD_ERR_TOO_LARGE,
                                "host manager: more than %d hosts discovered or blacklisted; "
                                "'%s' is one too many",
                                HVD_HOST_MANAGER_HOSTS_MAX, o->name);
            goto err_free_new;
        }
        host_state_t *s = &ns[nn];
        *s = *o;
        s->slots = 0;
        s->discovered = false;
        s->in_view = false;
        s->name = strdup(o->name);
        if (!s->name) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory");
            goto err_free_new;
        }
        nn++;
    }

    /* Re-admit discovered hosts whose cooldown has ended. */
    if (has_range(hm))
        for (size_t i = 0; i < n; i++)
            if (ns[i].blacklisted && ns[i].cooldown_end <= now_ms)
                ns[i].blacklisted = false;

    /* Assignment order: survivors of the old order, then newcomers in discovery order. A host
     * in the old order was available, so it still is if it was discovered again. */
    unsigned flags = HVD_HOST_UPDATE_NONE;
    size_t no = 0;
    for (size_t k = 0; k < hm->order_count; k++) {
        const host_state_t *o = &hm->states[hm->order[k]];
        long j = index_find(dindex, dcap, discovered, host_name_at, o->name);
        if (j < 0) {
            flags |= HVD_HOST_UPDATE_REMOVED;
            continue;
        }
        if (ns[j].slots < o->slots)
            flags |= HVD_HOST_UPDATE_REMOVED;
        else if (ns[j].slots > o->slots)
            flags |= HVD_HOST_UPDATE_ADDED;
        ns[j].in_view = true;
        norder[no++] = (size_t)j;
    }
    for (size_t i = 0; i < n; i++) {
        if (ns[i].blacklisted || ns[i].in_view)
            continue;
        flags |= HVD_HOST_UPDATE_ADDED;
        ns[i].in_view = true;
        norder[no++] = i;
    }

    uint32_t *nindex;
    size_t nindex_cap;
    st = state_index_build(ns, nn, &nindex, &nindex_cap);
    if (st != HVD_OK)
        goto err_free_new;

    states_free(hm->states, hm->count);
    free(hm->index);
    free(hm->order);
    hm->states = ns;
    hm->count = nn;
    hm->cap = ncap;
    hm->index = nindex;
    hm->index_cap = nindex_cap;
    hm->order = norder;
    hm->order_count = no;
    free(dindex);
    *result_p = (hvd_host_update_t)flags;
    return HVD_OK;

err_free_new:
    if (ns)
        states_free(ns, nn);
    free(norder);
err_free_dindex:
    free(dindex);
    return st;
}

/* ---- views -------------------------------------------------------------------------------- */

size_t hvd__host_manager_host_count(const hvd_host_manager_t *hm) {
    return hm->order_count;
}

int64_t hvd__host_manager_slot_count(const hvd_host_manager_t *hm) {
    int64_t total = 0;
    for (size_t k = 0; k < hm->order_count; k++)
        total += hm->states[hm->order[k]].slots;
    return total;
}

hvd_status_t hvd__host_manager_snapshot(const hvd_host_manager_t *hm, hvd_host_list_t *list_p) {
    hvd_host_list_t l = {0};
    if (hm->order_count) {
        l.hosts = calloc(hm->order_count, sizeof(*l.hosts));
        if (!l.hosts)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory");
    }
    for (size_t k = 0; k < hm->order_count; k++, l.count++) {
        const host_state_t *s = &hm->states[hm->order[k]];
        l.hosts[k].slots = s->slots;
        l.hosts[k].name = strdup(s->name);
        if (!l.hosts[k].name) {
            hvd__hosts_fini(&l);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory");
        }
    }
    *list_p = l;
    return HVD_OK;
}

/* ---- blacklist ---------------------------------------------------------------------------- */

/* The state of host, added (not discovered, not blacklisted) if unknown. */
static hvd_status_t state_get_or_add(hvd_host_manager_t *hm, const char *host, size_t *pos_p) {
    long found = state_find(hm, host);
    if (found >= 0) {
        *pos_p = (size_t)found;
        return HVD_OK;
    }
    if (hm->count >= HVD_HOST_MANAGER_HOSTS_MAX)
        return hvd__error_set(HVD_ERR_TOO_LARGE,
                              "host manager: cannot blacklist '%s': more than %d hosts known", host,
                              HVD_HOST_MANAGER_HOSTS_MAX);
    if (hm->count == hm->cap) {
        size_t cap = hm->cap ? 2 * hm->cap : 16;
        host_state_t *states = realloc(hm->states, cap * sizeof(*states));
        if (!states)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory");
        hm->states = states;
        hm->cap = cap;
    }
    char *name = strdup(host);
    if (!name)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "host manager: out of memory");
    hm->states[hm->count] = (host_state_t){.name = name};
    if (2 * (hm->count + 1) > hm->index_cap) {
        uint32_t *index;
        size_t cap;
        hvd_status_t st = state_index_build(hm->states, hm->count + 1, &index, &cap);
        if (st != HVD_OK) {
            free(name);
            return st;
        }
        free(hm->index);
        hm->index = index;
        hm->index_cap = cap;
    } else {
        hm->index[index_probe(hm->index, hm->index_cap, hm->states, state_name_at, host)] =
            (uint32_t)(hm->count + 1);
    }
    *pos_p = hm->count++;
    return HVD_OK;
}

hvd_status_t hvd__host_manager_blacklist(hvd_host_manager_t *hm, const char *host, int64_t now_ms,
                                         bool *newly_p) {
    hvd_status_t st = check_name(host, "blacklist");
    if (st != HVD_OK)
        return st;
    size_t pos = 0;
    st = state_get_or_add(hm, host, &pos);
    if (st != HVD_OK)
        return st;
    host_state_t *s = &hm->states[pos];
    bool newly = !s->blacklisted;
    bool in_cooldown = s->failures > 0 && s->cooldown_end > now_ms;
    if (has_range(hm) && !in_cooldown) {
        s->failures++;
        int64_t ms = cooldown_ms(hm, s->failures);
        s->cooldown_end = now_ms > INT64_MAX - ms ? INT64_MAX : now_ms + ms;
    }
    s->blacklisted = true;
    if (s->in_view) {
        for (size_t k = 0; k < hm->order_count; k++) {
            if (hm->order[k] != pos)
                continue;
            memmove(&hm->order[k], &hm->order[k + 1], (hm->order_count - k - 1) * sizeof(size_t));
            hm->order_count--;
            break;
        }
        s->in_view = false;
    }
    if (newly_p)
        *newly_p = newly;
    return HVD_OK;
}

bool hvd__host_manager_is_blacklisted(const hvd_host_manager_t *hm, const char *host) {
    if (!host)
        return false;
    long pos = state_find(hm, host);
    return pos >= 0 && hm->states[pos].blacklisted;
}

int64_t hvd__host_manager_cooldown_end_ms(const hvd_host_manager_t *hm, const char *host) {
    if (!host)
        return 0;
    long pos = state_find(hm, host);
    if (pos < 0 || !hm->states[pos].blacklisted)
        return 0;
    return has_range(hm) ? hm->states[pos].cooldown_end : INT64_MAX;
}
