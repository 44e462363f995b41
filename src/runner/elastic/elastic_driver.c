/* The elastic driver; see elastic_driver.h, and rendezvous/elastic_msg.h for the protocol. */
#include "runner/elastic/elastic_driver.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/hash.h"
#include "os/spawn.h"
#include "rendezvous/elastic_msg.h"
#include "runner/rendezvous/kv_store.h"
#include "runner/elastic/host_manager.h"
#include "runner/launch/stopped_ranks.h"
#include "runner/hosts/store_scopes.h"
#include "runner/elastic/worker_registry.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The loop's longest sleep: deadlines (silence, slots) are checked at least this often. */
#define TICK_MS 100
/* How often the driver says whom it still waits for after a round failed. */
#define STRAGGLER_FIRST_SAY_MS 5000
#define STRAGGLER_SAY_MS 30000

typedef enum { PHASE_WAIT_SLOTS, PHASE_RUNNING, PHASE_ENDING } phase_t;

/* A slot host:local_rank, known since a worker first ran on it; kept for the whole job. */
typedef struct {
    char *host;
    int local_rank;
    char key[HVD_ELASTIC_NAME_MAX]; /* "host:local_rank", the protocol's name for it */
    long worker;                    /* the pool id of its live worker, -1 when none */
    long reg; /* its index in the current round's registry (= rank), -1 when none */
    int remote;
    int64_t started_ms;  /* its worker's start */
    int64_t beat_ms;     /* its worker's last heartbeat, 0 before the first (beat_lock) */
    int start_round;     /* round its worker was started for */
    int rank;            /* rank in the current round, -1 when it has none */
    int leaving_failure; /* its ready record said `failure` */
} slot_t;

typedef struct {
    const hvd_elastic_config_t *cfg;
    hvd_workers_config_t wcfg;
    hvd_workers_t *workers;
    hvd_kv_store_t *store;

    /* Hosts: the discovery thread updates the manager under hm_lock and raises hosts_changed
     * (with the flags of the change); the loop reads snapshots. */
    pthread_mutex_t hm_lock;
    pthread_cond_t hm_cond; /* stop_discovery, for the thread's sleep */
    hvd_host_manager_t *hm;
    hvd_host_discovery_t *script;
    pthread_t discovery_thread;
    int discovery_started;
    bool stop_discovery;
    bool discovered_once;
    hvd_status_t discovery_status; /* the first run's failure: fatal */
    char discovery_error[1024];
    atomic_int hosts_changed; /* hvd_host_update_t flags since the loop last looked */
    /* Hosts discovery found, checked once (discovery thread only): local, reachable over
     * ssh, or not reachable until retry_ms. */
    struct reach {
        char *host;
        int ok;
        int64_t retry_ms;
    } * reach;
    size_t nreach, reach_cap;

    /* Slots, and their heartbeats (written by the store watcher under beat_lock). */
    pthread_mutex_t beat_lock;
    slot_t **slots;
    size_t nslots, slots_cap;
    /* Lookups in O(1), for heartbeats under the store's lock and for big jobs: slots by key
     * (open addressing, at most half full; changed only by the loop, under beat_lock) and by
     * worker id. */
    slot_t **by_key;
    size_t by_key_cap;
    slot_t **by_worker;
    size_t by_worker_cap;
    atomic_int ready_dirty;                  /* a ready record arrived */
    char ready_prefix[HVD_ELASTIC_NAME_MAX]; /* every round's ready scope starts with it */

    phase_t phase;
    int round, resets;
    hvd_worker_registry_t reg;
    long *reg_slot;             /* registry index -> slots index */
    hvd_host_list_t plan_hosts; /* the current round's hosts (the plan borrows names) */
    hvd_slot_plan_t plan;
    bool announced;                  /* elastic_ev.r<round>/hosts was written */
    bool aborted;                    /* the abort keys of this round were written */
    int64_t aborted_ms;              /* when */
    int64_t waiting_said_ms;         /* last "waiting for ..." message */
    int64_t success_ms;              /* first SUCCESS of the round, 0 if none */
    hvd_stopped_ranks_t left_behind; /* after a SUCCESS: workers stopped (stopped_ranks.h) */
    size_t *live_ids;                /* scratch: the round's remaining workers */
    int64_t wait_start_ms;
    long first_failure; /* slots index of the job's first failure, -1 */
    int first_failure_worker;
    int failure_code; /* exit code of the job's first failure, 0 before */
    int exit_code;
    char stop_message[512];
    int verbose;
} driver_t;

/* ---- messages ------------------------------------------------------------------------------ */

#define SAY(d, ...) hvd__workers_say((d)->workers, __VA_ARGS__)

static void describe_slot(const slot_t *s, char *out, size_t size) {
    if (s->rank >= 0)
        snprintf(out, size, "rank %d (host %s, local rank %d)", s->rank, s->host, s->local_rank);
    else
        snprintf(out, size, "the worker on host %s, local rank %d", s->host, s->local_rank);
}

/* ---- store --------------------------------------------------------------------------------- */

static void put_text(driver_t *d, const char *scope, const char *key, const char *text) {
    hvd_status_t st = hvd__kv_store_put(d->store, scope, key, text, strlen(text));
    if (st != HVD_OK)
        SAY(d, "horovodrun: elastic: cannot write %s/%s to the rendezvous store: %s\n", scope, key,
            hvd_last_error());
}

/* Tell the round's workers that it failed: pending check-ins and collectives end now. */
static void abort_round(driver_t *d, const char *why) {
    if (d->aborted)
        return;
    d->aborted = true;
    d->aborted_ms = hvd__clock_now_ms();
    /* the first "still waiting for" after STRAGGLER_FIRST_SAY_MS, then every STRAGGLER_SAY_MS */
    d->waiting_said_ms = d->aborted_ms - STRAGGLER_SAY_MS + STRAGGLER_FIRST_SAY_MS;
    char scope[HVD_ELASTIC_NAME_MAX];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_INIT, d->round, scope);
    put_text(d, scope, HVD_ELASTIC_ABORT_KEY, why);
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_EVENTS, d->round, scope);
    put_text(d, scope, HVD_ELASTIC_ABORT_KEY, why);
}

/* The slot named key, or NULL. */
static slot_t *slot_by_key(const driver_t *d, const char *key) {
    if (!d->by_key_cap)
        return NULL;
    size_t mask = d->by_key_cap - 1;
    for (size_t j = hvd__hash_fnv1a(HVD_HASH_FNV_BASIS, key) & mask; d->by_key[j];
         j = (j + 1) & mask)
        if (strcmp(d->by_key[j]->key, key) == 0)
            return d->by_key[j];
    return NULL;
}

/* Called by the store after every PUT (store lock held: no store calls, no blocking). */
static void on_store_put(void *arg, const char *scope, const char *key) {
    driver_t *d = arg;
    if (strcmp(scope, HVD_ELASTIC_ALIVE_SCOPE) == 0) {
        int64_t now = hvd__clock_now_ms();
        pthread_mutex_lock(&d->beat_lock);
        slot_t *s = slot_by_key(d, key);
        if (s)
            s->beat_ms = now;
        pthread_mutex_unlock(&d->beat_lock);
    } else if (strncmp(scope, d->ready_prefix, strlen(d->ready_prefix)) == 0) {
        atomic_store(&d->ready_dirty, 1);
        hvd__workers_wake(d->workers);
    }
}

/* ---- slots --------------------------------------------------------------------------------- */

static slot_t *find_slot(driver_t *d, const char *host, int local_rank) {
    char key[HVD_ELASTIC_NAME_MAX];
    return hvd__elastic_msg_slot(host, local_rank, key) == HVD_OK ? slot_by_key(d, key) : NULL;
}

static slot_t *slot_of_worker(driver_t *d, size_t id) {
    slot_t *s = id < d->by_worker_cap ? d->by_worker[id] : NULL;
    return s && s->worker == (long)id ? s : NULL;
}

/* Remember that worker id runs slot s. */
static hvd_status_t set_worker(driver_t *d, slot_t *s, size_t id) {
    if (id >= d->by_worker_cap) {
        size_t cap = d->by_worker_cap ? d->by_worker_cap : 16;
        while (cap <= id)
            cap *= 2;
        slot_t **grown = realloc(d->by_worker, cap * sizeof *grown);
        if (!grown)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for workers");
        memset(grown + d->by_worker_cap, 0, (cap - d->by_worker_cap) * sizeof *grown);
        d->by_worker = grown;
        d->by_worker_cap = cap;
    }
    d->by_worker[id] = s;
    s->worker = (long)id;
    return HVD_OK;
}

/* Put s in the key index (beat_lock held), growing it to stay at most half full. */
static hvd_status_t index_slot(driver_t *d, slot_t *s) {
    if (2 * (d->nslots + 1) > d->by_key_cap) {
        size_t cap = d->by_key_cap ? 2 * d->by_key_cap : 64;
        slot_t **t = calloc(cap, sizeof *t);
        if (!t)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for slots");
        for (size_t i = 0; i < d->nslots; i++) {
            size_t j = hvd__hash_fnv1a(HVD_HASH_FNV_BASIS, d->slots[i]->key) & (cap - 1);
            while (t[j])
                j = (j + 1) & (cap - 1);
            t[j] = d->slots[i];
        }
        free(d->by_key);
        d->by_key = t;
        d->by_key_cap = cap;
    }
    size_t j = hvd__hash_fnv1a(HVD_HASH_FNV_BASIS, s->key) & (d->by_key_cap - 1);
    while (d->by_key[j])
        j = (j + 1) & (d->by_key_cap - 1);
    d->by_key[j] = s;
    return HVD_OK;
}

static hvd_status_t add_slot(driver_t *d, const char *host, int local_rank, slot_t **s_p) {
    slot_t *s = calloc(1, sizeof *s);
    if (!s || !(s->host = strdup(host))) {
        free(s);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a slot");
    }
    s->local_rank = local_rank;
    s->worker = -1;
    s->reg = -1;
    s->rank = -1;
    hvd_status_t st = hvd__elastic_msg_slot(host, local_rank, s->key);
    if (st != HVD_OK) {
        free(s->host);
        free(s);
        return st;
    }
    s->remote = (d->cfg->workers->ssh && d->cfg->workers->ssh->agent) ||
                !hvd__netif_is_local_host(host, d->cfg->ifs, d->cfg->nifs);
    pthread_mutex_lock(&d->beat_lock);
    if (d->nslots == d->slots_cap) {
        size_t cap = d->slots_cap ? 2 * d->slots_cap : 16;
        slot_t **grown = realloc(d->slots, cap * sizeof *grown);
        if (grown) {
            d->slots = grown;
            d->slots_cap = cap;
        } else {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for slots");
        }
    }
    if (st == HVD_OK)
        st = index_slot(d, s);
    if (st == HVD_OK)
        d->slots[d->nslots++] = s;
    pthread_mutex_unlock(&d->beat_lock);
    if (st != HVD_OK) {
        free(s->host);
        free(s);
        return st;
    }
    *s_p = s;
    return HVD_OK;
}

static int64_t last_beat(driver_t *d, const slot_t *s) {
    pthread_mutex_lock(&d->beat_lock);
    int64_t b = s->beat_ms;
    pthread_mutex_unlock(&d->beat_lock);
    return b;
}

/* ---- discovery thread ---------------------------------------------------------------------- */

static hvd_status_t discover(driver_t *d, hvd_host_list_t *list) {
    if (d->script) {
        int stale = 0;
        return hvd__host_discovery_poll(d->script, list, &stale);
    }
    list->hosts = calloc(d->cfg->fixed->count ? d->cfg->fixed->count : 1, sizeof *list->hosts);
    list->count = 0;
    if (!list->hosts)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < d->cfg->fixed->count; i++) {
        list->hosts[i].slots = d->cfg->fixed->hosts[i].slots;
        if (!(list->hosts[i].name = strdup(d->cfg->fixed->hosts[i].name))) {
            hvd__hosts_fini(list);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        }
        list->count = i + 1;
    }
    return HVD_OK;
}

/* The entry of host in the reach table, added (not yet checked: ok 0, retry_ms 0) if new;
 * NULL when out of memory. */
static struct reach *reach_of(driver_t *d, const char *host) {
    for (size_t i = 0; i < d->nreach; i++)
        if (strcmp(d->reach[i].host, host) == 0)
            return &d->reach[i];
    if (d->nreach == d->reach_cap) {
        size_t cap = d->reach_cap ? 2 * d->reach_cap : 16;
        struct reach *grown = realloc(d->reach, cap * sizeof *grown);
        if (!grown)
            return NULL;
        d->reach = grown;
        d->reach_cap = cap;
    }
    struct reach *r = &d->reach[d->nreach];
    *r = (struct reach){.host = strdup(host)};
    if (!r->host)
        return NULL;
    d->nreach++;
    return r;
}

/* Keep only the discovered hosts workers can be started on: this machine's, and remote ones
 * that answered ssh (each checked once, as horovodrun checks the hosts it starts with; one
 * that does not answer is left out and tried again after HVD_ELASTIC_SSH_RETRY_MS). Without
 * this, an unreachable new host would cost the job a reset: its worker would fail to start
 * while the others wait for it. */
static void keep_reachable(driver_t *d, hvd_host_list_t *list) {
    size_t kept = 0;
    int64_t now = hvd__clock_now_ms();
    for (size_t i = 0; i < list->count; i++) {
        hvd_host_t *h = &list->hosts[i];
        struct reach *r = reach_of(d, h->name);
        if (r && !r->ok && r->retry_ms <= now) {
            if ((d->cfg->workers->ssh && d->cfg->workers->ssh->agent) ||
                hvd__netif_is_local_host(h->name, d->cfg->ifs, d->cfg->nifs)) {
                r->ok = 1;
            } else {
                const char *one[] = {h->name};
                r->ok = hvd__ssh_check_hosts(d->cfg->workers->ssh, one, 1, d->cfg->start_timeout_s,
                                             d->verbose, d->cfg->workers->out_fd,
                                             d->cfg->workers->err_fd) == HVD_OK;
                if (!r->ok) {
                    r->retry_ms = hvd__clock_now_ms() + HVD_ELASTIC_SSH_RETRY_MS;
                    SAY(d,
                        "horovodrun: elastic: discovered host %s does not answer ssh; not "
                        "using it (next try in %d s).\n",
                        h->name, HVD_ELASTIC_SSH_RETRY_MS / 1000);
                }
            }
        }
        if (r && r->ok)
            list->hosts[kept++] = *h;
        else
            free(h->name);
    }
    list->count = kept;
}

static void *discovery_main(void *arg) {
    driver_t *d = arg;
    int interval = d->cfg->discovery_interval_ms > 0 ? d->cfg->discovery_interval_ms
                                                     : HVD_ELASTIC_DISCOVERY_INTERVAL_MS;
    pthread_mutex_lock(&d->hm_lock);
    while (!d->stop_discovery) {
        pthread_mutex_unlock(&d->hm_lock);
        hvd_host_list_t list = {0};
        hvd_status_t st = discover(d, &list);
        if (st == HVD_OK)
            keep_reachable(d, &list);
        char error[1024];
        snprintf(error, sizeof error, "%s", st == HVD_OK ? "" : hvd_last_error());
        pthread_mutex_lock(&d->hm_lock);
        hvd_host_update_t res = HVD_HOST_UPDATE_NONE;
        if (st == HVD_OK)
            st = hvd__host_manager_update(d->hm, list.hosts, list.count, hvd__clock_now_ms(), &res);
        if (st != HVD_OK && !d->discovered_once) {
            /* the job cannot start without hosts (as in Horovod, the first failure is fatal) */
            d->discovery_status = st;
            snprintf(d->discovery_error, sizeof d->discovery_error, "%s",
                     *error ? error : hvd_last_error());
            d->stop_discovery = true;
        } else if (st == HVD_OK) {
            if (!d->discovered_once)
                res = HVD_HOST_UPDATE_ADDED;
            d->discovered_once = true;
        }
        hvd__hosts_fini(&list);
        if (res != HVD_HOST_UPDATE_NONE)
            atomic_fetch_or(&d->hosts_changed, (int)res);
        if (res != HVD_HOST_UPDATE_NONE || d->discovery_status != HVD_OK)
            hvd__workers_wake(d->workers);
        if (d->stop_discovery)
            break;
        struct timespec ts = hvd__clock_abstime(CLOCK_MONOTONIC, interval);
        while (!d->stop_discovery && pthread_cond_timedwait(&d->hm_cond, &d->hm_lock, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&d->hm_lock);
    return NULL;
}

static bool is_blacklisted(void *arg, const char *host) {
    driver_t *d = arg;
    pthread_mutex_lock(&d->hm_lock);
    bool b = hvd__host_manager_is_blacklisted(d->hm, host);
    pthread_mutex_unlock(&d->hm_lock);
    return b;
}

/* ---- plans --------------------------------------------------------------------------------- */

/* The plan the current hosts give (Horovod's get_host_assignments: every available slot up to
 * max_np); HVD_ERR_NOT_FOUND while fewer than min_np slots are available. */
static hvd_status_t plan_now(driver_t *d, int min_np, hvd_host_list_t *hosts,
                             hvd_slot_plan_t *plan) {
    pthread_mutex_lock(&d->hm_lock);
    int64_t avail = hvd__host_manager_slot_count(d->hm);
    hvd_status_t st =
        avail >= min_np ? hvd__host_manager_snapshot(d->hm, hosts) : HVD_ERR_NOT_FOUND;
    pthread_mutex_unlock(&d->hm_lock);
    if (st != HVD_OK)
        return st;
    int np = avail > INT32_MAX ? INT32_MAX : (int)avail;
    if (d->cfg->max_np > 0 && np > d->cfg->max_np)
        np = d->cfg->max_np;
    st = hvd__slot_plan_create(hosts, np, plan);
    if (st != HVD_OK)
        hvd__hosts_fini(hosts);
    return st;
}

static bool same_plan(const hvd_slot_plan_t *a, const hvd_slot_plan_t *b) {
    if (a->count != b->count)
        return false;
    for (size_t i = 0; i < a->count; i++)
        if (a->slots[i].local_rank != b->slots[i].local_rank ||
            strcmp(a->slots[i].host, b->slots[i].host) != 0)
            return false;
    return true;
}

/* ---- worker outcomes ----------------------------------------------------------------------- */

static void kill_host(driver_t *d, const char *host, const slot_t *except);

/* A worker of the current round failed (its process ended badly, or it went silent): record
 * it, tell the round, blacklist its host and end the other workers there (as in Horovod: a
 * host's failure ends every process on it). */
static void fail_slot(driver_t *d, slot_t *s, const char *cause) {
    long i = s->reg;
    if (i < 0 || !hvd__registry_record(&d->reg, (size_t)i, HVD_WORKER_FAILURE))
        return;
    char who[400];
    describe_slot(s, who, sizeof who);
    if (d->first_failure < 0) {
        for (size_t k = 0; k < d->nslots; k++)
            if (d->slots[k] == s)
                d->first_failure = (long)k;
    }
    char why[600];
    snprintf(why, sizeof why, "%s %s", who, cause);
    SAY(d, "horovodrun: elastic: %s.\n", why);
    abort_round(d, why);
    bool newly = false;
    pthread_mutex_lock(&d->hm_lock);
    hvd_status_t st = hvd__host_manager_blacklist(d->hm, s->host, hvd__clock_now_ms(), &newly);
    int64_t until = hvd__host_manager_cooldown_end_ms(d->hm, s->host);
    pthread_mutex_unlock(&d->hm_lock);
    if (st == HVD_OK && newly) {
        if (until == INT64_MAX)
            SAY(d, "horovodrun: elastic: blacklisting host %s for the rest of the job.\n", s->host);
        else
            SAY(d, "horovodrun: elastic: blacklisting host %s for %lld s.\n", s->host,
                (long long)((until - hvd__clock_now_ms() + 999) / 1000));
    }
    kill_host(d, s->host, s);
}

/* End every worker on host but except: their host is blacklisted, so they cannot go on. */
static void kill_host(driver_t *d, const char *host, const slot_t *except) {
    for (size_t k = 0; k < d->nslots; k++) {
        slot_t *o = d->slots[k];
        if (o == except || strcmp(o->host, host) != 0)
            continue;
        long i = o->reg;
        if (i >= 0)
            hvd__registry_record(&d->reg, (size_t)i, HVD_WORKER_FAILURE);
        if (o->worker >= 0)
            hvd__workers_stop(d->workers, (size_t)o->worker);
    }
}

/* Whether slot s's worker checked in at the current round's rendezvous (a round of one worker
 * has none: every worker of it counts as checked in). */
static bool checked_in(driver_t *d, const slot_t *s) {
    if (d->reg.count < 2)
        return true;
    char scope[HVD_ELASTIC_NAME_MAX], key[32];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_INIT, d->round, scope);
    snprintf(key, sizeof key, "rank_%d", s->rank);
    return s->rank >= 0 && hvd__kv_store_has(d->store, scope, key);
}

static void on_worker_exit(void *arg, size_t id, int status, int stopped) {
    driver_t *d = arg;
    slot_t *s = slot_of_worker(d, id);
    if (!s)
        return;
    s->worker = -1;
    int code = hvd__spawn_exit_code(status);
    long i = s->reg;
    if (i < 0 || stopped || d->phase == PHASE_ENDING) {
        if (d->verbose)
            SAY(d, "horovodrun: elastic: worker on %s exited with status %d (not in round %d).\n",
                s->key, code, d->round);
        return;
    }
    if (is_blacklisted(d, s->host))
        return; /* its host already failed; this exit is a consequence */
    if (code == 0 && !checked_in(d, s) && d->reg.slots[i].state == HVD_WORKER_PENDING) {
        /* it left before joining this round: the others would wait for it until their
         * timeout; fail its slot like any worker's failure, so that the round ends now */
        char cause[160];
        snprintf(cause, sizeof cause,
                 "exited with status 0 before joining round %d (before hvd_init)", d->round);
        if (d->first_failure < 0)
            d->first_failure_worker = (int)id;
        fail_slot(d, s, cause);
        return;
    }
    if (code == 0) {
        if (hvd__registry_record(&d->reg, (size_t)i, HVD_WORKER_SUCCESS) && !d->success_ms)
            d->success_ms = hvd__clock_now_ms();
        return;
    }
    if (d->first_failure < 0) /* the worker whose end is reported with the first failure */
        d->first_failure_worker = (int)id;
    char cause[160], what[96];
    hvd__spawn_describe_status(status, what, sizeof what);
    snprintf(cause, sizeof cause, "failed: %s", what);
    if (!d->failure_code)
        d->failure_code = code;
    fail_slot(d, s, cause);
}

/* Ready records of the current round: workers leaving it to re-initialise. */
static void read_ready(driver_t *d) {
    if (!atomic_exchange(&d->ready_dirty, 0))
        return;
    char scope[HVD_ELASTIC_NAME_MAX];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_READY, d->round, scope);
    for (size_t k = 0; k < d->nslots; k++) {
        slot_t *s = d->slots[k];
        long i = s->reg;
        if (i < 0 || d->reg.slots[i].state != HVD_WORKER_PENDING)
            continue;
        uint8_t *v = NULL;
        size_t len = 0;
        if (hvd__kv_store_get(d->store, scope, s->key, &v, &len) != HVD_OK)
            continue;
        hvd_elastic_ready_t why = HVD_ELASTIC_READY_FAILURE;
        if (hvd__elastic_msg_ready_parse((const char *)v, len, &why) != HVD_OK)
            SAY(d, "horovodrun: elastic: %s: %s; taken as a failure.\n", s->key, hvd_last_error());
        s->leaving_failure = why != HVD_ELASTIC_READY_UPDATE;
        free(v);
        hvd__registry_record(&d->reg, (size_t)i, HVD_WORKER_READY);
        if (d->verbose)
            SAY(d, "horovodrun: elastic: %s left round %d (%s).\n", s->key, d->round,
                s->leaving_failure ? "failure" : "host update");
    }
}

/* Workers that stopped sending heartbeats (stopped, hung, or their host cut off). */
static void check_silence(driver_t *d) {
    if (d->success_ms)
        return; /* a worker completed the job: check_left_behind's rule, not this one */
    int64_t now = hvd__clock_now_ms();
    for (size_t k = 0; k < d->nslots; k++) {
        slot_t *s = d->slots[k];
        long i = s->reg;
        if (s->worker < 0 || i < 0 || d->reg.slots[i].state == HVD_WORKER_SUCCESS ||
            d->reg.slots[i].state == HVD_WORKER_FAILURE)
            continue;
        int64_t beat = last_beat(d, s);
        int64_t limit_ms =
            (int64_t)(beat ? d->cfg->silence_timeout_s : d->cfg->start_timeout_s) * 1000;
        int64_t since = beat ? beat : s->started_ms;
        if (now - since < limit_ms)
            continue;
        char cause[200];
        if (beat)
            snprintf(cause, sizeof cause,
                     "sent no heartbeat for %d s (HOROVOD_GLOO_TIMEOUT_SECONDS): stopped, hung or "
                     "cut off; killing it",
                     d->cfg->silence_timeout_s);
        else
            snprintf(cause, sizeof cause,
                     "did not call hvd_init within %d s of its start (--start-timeout); killing it",
                     d->cfg->start_timeout_s);
        hvd__workers_kill(d->workers, (size_t)s->worker);
        if (d->reg.slots[i].state == HVD_WORKER_READY) {
            /* a survivor waiting for the next round: it can no longer take part */
            hvd__registry_record(&d->reg, (size_t)i, HVD_WORKER_FAILURE);
        }
        if (!d->failure_code)
            d->failure_code = 1;
        fail_slot(d, s, cause);
    }
}

/* Once a worker completed the job, the others should follow. One that is stopped (it can make
 * no progress) is named, and killed after the silence timeout, failing the job; one that runs
 * (a long checkpoint) is left alone, and said to be waited for every 30 s (stopped_ranks.h).
 * The heartbeat rule no longer applies then: a worker past hvd_shutdown sends none. */
static void check_left_behind(driver_t *d) {
    if (!d->success_ms)
        return;
    size_t n = 0;
    for (size_t k = 0; k < d->nslots && n < HVD_ELASTIC_MAX_WORKERS; k++) {
        slot_t *s = d->slots[k];
        if (s->reg >= 0 && s->worker >= 0 && d->reg.slots[s->reg].state == HVD_WORKER_PENDING)
            d->live_ids[n++] = (size_t)s->worker;
    }
    hvd_stopped_ranks_ops_t ops = hvd__stopped_ranks_workers_ops(d->workers);
    long id = hvd__stopped_ranks_check(&d->left_behind, &ops, d->live_ids, n,
                                       hvd__registry_count(&d->reg, HVD_WORKER_SUCCESS),
                                       d->reg.count, hvd__clock_now_ms());
    slot_t *s = id >= 0 ? slot_of_worker(d, (size_t)id) : NULL;
    if (!s || s->reg < 0 || !hvd__registry_record(&d->reg, (size_t)s->reg, HVD_WORKER_FAILURE))
        return;
    if (d->first_failure < 0) {
        for (size_t k = 0; k < d->nslots; k++)
            if (d->slots[k] == s)
                d->first_failure = (long)k;
        d->first_failure_worker = (int)id;
    }
    if (!d->failure_code)
        d->failure_code = 128 + SIGKILL;
}

/* After a failure, live workers that have not left the round yet: alive (they send heartbeats)
 * but not calling hvd, e.g. in a long step of their own. Say every STRAGGLER_SAY_MS whom the
 * driver waits for; after --elastic-timeout they are ended as failed (the reference waits on
 * its barrier for ever). */
static void check_stragglers(driver_t *d) {
    if (!d->aborted)
        return;
    int64_t now = hvd__clock_now_ms();
    bool expired = now - d->aborted_ms >= (int64_t)d->cfg->elastic_timeout_s * 1000;
    bool say = now - d->waiting_said_ms >= STRAGGLER_SAY_MS;
    char list[512] = "";
    size_t used = 0, n = 0;
    for (size_t k = 0; k < d->nslots; k++) {
        slot_t *s = d->slots[k];
        long i = s->reg;
        if (i < 0 || d->reg.slots[i].state != HVD_WORKER_PENDING)
            continue;
        n++;
        if (used < sizeof list)
            used +=
                (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", s->key);
        if (!expired)
            continue;
        char cause[160];
        snprintf(cause, sizeof cause,
                 "did not leave round %d within %d s (--elastic-timeout) after it failed; "
                 "ending it",
                 d->round, d->cfg->elastic_timeout_s);
        if (s->worker >= 0)
            hvd__workers_kill(d->workers, (size_t)s->worker);
        if (!d->failure_code)
            d->failure_code = 1;
        fail_slot(d, s, cause);
    }
    if (n && say && !expired) {
        d->waiting_said_ms = now;
        SAY(d,
            "horovodrun: elastic: round %d failed %lld s ago; still waiting for %zu worker%s to "
            "leave it: %s\n",
            d->round, (long long)((now - d->aborted_ms) / 1000), n, n == 1 ? "" : "s", list);
    }
}

/* Discovery changed the hosts during the round: tell its workers if the world would change. */
static void check_hosts(driver_t *d) {
    int flags = atomic_exchange(&d->hosts_changed, 0);
    if (!flags || d->phase != PHASE_RUNNING || d->announced)
        return;
    hvd_host_list_t hosts = {0};
    hvd_slot_plan_t plan = {0};
    if (plan_now(d, d->cfg->min_np, &hosts, &plan) == HVD_OK) {
        bool same = same_plan(&plan, &d->plan);
        hvd__slot_plan_fini(&plan);
        hvd__hosts_fini(&hosts);
        if (same)
            return;
    }
    int res = flags;
    const char *what = res == HVD_HOST_UPDATE_MIXED     ? "mixed"
                       : res == HVD_HOST_UPDATE_REMOVED ? "removed"
                                                        : "added";
    char scope[HVD_ELASTIC_NAME_MAX];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_EVENTS, d->round, scope);
    put_text(d, scope, HVD_ELASTIC_HOSTS_KEY, what);
    d->announced = true;
    SAY(d, "horovodrun: elastic: hosts %s; the workers of round %d re-form at their next commit.\n",
        what, d->round);
}

/* The exit code of a job stopped by failures: the first failure's. */
static int failure_code(const driver_t *d) {
    return d->failure_code ? d->failure_code : 1;
}

/* ---- rounds -------------------------------------------------------------------------------- */

static void end_job(driver_t *d, const char *message, int code) {
    d->phase = PHASE_ENDING;
    d->exit_code = code;
    if (message) {
        snprintf(d->stop_message, sizeof d->stop_message, "%s", message);
        SAY(d, "horovodrun: %s\n", message);
    }
    /* survivors waiting for their next place learn that there is none */
    char scope[HVD_ELASTIC_NAME_MAX], text[HVD_ELASTIC_VALUE_MAX + 1];
    hvd_elastic_assign_t stop = {.verdict = HVD_ELASTIC_STOP};
    snprintf(stop.message, sizeof stop.message, "%s",
             message ? message : "the elastic job is complete");
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_ASSIGN, d->round + 1, scope);
    if (hvd__elastic_msg_assign_format(&stop, text, sizeof text) < 0)
        snprintf(text, sizeof text, "stop");
    for (size_t k = 0; k < d->nslots; k++)
        if (d->slots[k]->worker >= 0)
            put_text(d, scope, d->slots[k]->key, text);
    hvd__workers_stop_all(d->workers);
}

static hvd_status_t extra_env(driver_t *d, int round, hvd_env_list_t *env) {
    hvd__env_list_init(env);
    hvd_status_t st = hvd__env_list_set(env, "HOROVOD_ELASTIC", "1");
    if (st == HVD_OK)
        st = hvd__env_list_setf(env, "HOROVOD_ELASTIC_ROUND", "%d", round);
    if (st == HVD_OK)
        st = hvd__env_list_setf(env, "HOROVOD_ELASTIC_TIMEOUT", "%d", d->cfg->elastic_timeout_s);
    if (st != HVD_OK)
        hvd__env_list_fini(env);
    return st;
}

/* Start round d->round + 1 (or round 0) on plan (taken over, with hosts). */
/* Bookkeeping for a worker just started for slot s. */
static hvd_status_t started(driver_t *d, slot_t *s, size_t id, int round) {
    hvd_status_t st = set_worker(d, s, id);
    if (st != HVD_OK) {
        hvd__workers_kill(d->workers, id);
        return st;
    }
    s->started_ms = hvd__clock_now_ms();
    s->start_round = round;
    s->leaving_failure = 0;
    pthread_mutex_lock(&d->beat_lock);
    s->beat_ms = 0;
    pthread_mutex_unlock(&d->beat_lock);
    return HVD_OK;
}

static hvd_status_t start_round(driver_t *d, hvd_host_list_t *hosts, hvd_slot_plan_t *plan,
                                bool first) {
    int round = first ? 0 : d->round + 1;
    /* Survivors: workers alive and READY in the round that ended. */
    bool any_fresh = false, any_failure = !first && d->reg.count &&
                                          hvd__registry_count(&d->reg, HVD_WORKER_FAILURE) > 0;
    for (size_t k = 0; k < d->nslots; k++) {
        slot_t *s = d->slots[k];
        long i = s->reg;
        if (i >= 0 && d->reg.slots[i].state == HVD_WORKER_READY && s->leaving_failure)
            any_failure = true;
    }
    /* State is synced from rank 0: it must be a survivor (Horovod's rule: "at least one
     * previous host survives"). */
    if (!first) {
        slot_t *r0 = find_slot(d, plan->slots[0].host, plan->slots[0].local_rank);
        long i = r0 ? r0->reg : -1;
        if (!r0 || r0->worker < 0 || i < 0 || d->reg.slots[i].state != HVD_WORKER_READY) {
            hvd__slot_plan_fini(plan);
            hvd__hosts_fini(hosts);
            end_job(d, "No hosts from previous set remaining, unable to broadcast state.",
                    failure_code(d));
            return HVD_OK;
        }
    }
    hvd_status_t st = hvd__store_scopes_declare(d->cfg->server, plan, NULL);
    if (st != HVD_OK)
        return st;
    const char **names = calloc(plan->count, sizeof *names);
    int *lrs = calloc(plan->count, sizeof *lrs);
    if (!names || !lrs) {
        free(names);
        free(lrs);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for round %d", round);
    }
    for (size_t r = 0; r < plan->count; r++) {
        names[r] = plan->slots[r].host;
        lrs[r] = plan->slots[r].local_rank;
    }
    /* Which slots keep their worker, which get a new one; ranks of the new world. */
    for (size_t k = 0; k < d->nslots; k++)
        d->slots[k]->rank = -1;
    for (size_t r = 0; r < plan->count && st == HVD_OK; r++) {
        slot_t *s = find_slot(d, plan->slots[r].host, plan->slots[r].local_rank);
        if (!s)
            st = add_slot(d, plan->slots[r].host, plan->slots[r].local_rank, &s);
        if (st != HVD_OK)
            break;
        s->rank = (int)r;
        if (s->worker < 0)
            any_fresh = true;
    }
    int sync = first || any_fresh || any_failure;
    /* Survivors of the old round that have no place in the new one. */
    char scope[HVD_ELASTIC_NAME_MAX], text[HVD_ELASTIC_VALUE_MAX + 1];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_ASSIGN, round, scope);
    hvd_elastic_assign_t removed = {.verdict = HVD_ELASTIC_REMOVED};
    hvd__elastic_msg_assign_format(&removed, text, sizeof text);
    for (size_t k = 0; k < d->nslots && st == HVD_OK && !first; k++) {
        slot_t *s = d->slots[k];
        if (s->worker >= 0 && s->rank < 0) {
            put_text(d, scope, s->key, text);
            if (d->verbose)
                SAY(d, "horovodrun: elastic: %s has no place in round %d.\n", s->key, round);
        }
    }
    if (st == HVD_OK)
        st = hvd__registry_reset(&d->reg, round, names, lrs, plan->count);
    /* the registry is in rank order: a slot's place in it is its rank */
    for (size_t k = 0; k < d->nslots; k++)
        d->slots[k]->reg = st == HVD_OK ? d->slots[k]->rank : -1;
    hvd__slot_plan_fini(&d->plan);
    hvd__hosts_fini(&d->plan_hosts);
    d->plan = *plan;
    d->plan_hosts = *hosts;
    memset(plan, 0, sizeof *plan);
    memset(hosts, 0, sizeof *hosts);
    d->round = round;
    d->announced = d->aborted = false;
    d->success_ms = 0;
    hvd__stopped_ranks_fini(&d->left_behind);
    hvd__stopped_ranks_init(&d->left_behind, d->cfg->silence_timeout_s);
    d->phase = PHASE_RUNNING;
    free(names);
    free(lrs);
    if (st != HVD_OK)
        return st;
    if (d->verbose || !first)
        SAY(d, "horovodrun: elastic: round %d: %zu workers on %zu hosts%s.\n", round, d->plan.count,
            d->plan_hosts.count,
            first  ? ""
            : sync ? ", state synced from rank 0"
                   : "");
    hvd_env_list_t env;
    if ((st = extra_env(d, round, &env)) != HVD_OK)
        return st;
    /* New workers start now: a local one under its own middleman, all of a remote host's
     * through one ssh session */
    size_t n = d->plan.count;
    hvd_slot_t *group = malloc(n * sizeof *group);
    slot_t **owners = malloc(n * sizeof *owners);
    size_t *ids = malloc(n * sizeof *ids);
    char *taken = calloc(n, 1);
    if (!group || !owners || !ids || !taken)
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory starting round %d", round);
    for (size_t r = 0; r < n && st == HVD_OK; r++) {
        if (taken[r])
            continue;
        const hvd_slot_t *sl = &d->plan.slots[r];
        slot_t *s = find_slot(d, sl->host, sl->local_rank);
        if (s->worker >= 0) {
            hvd_elastic_assign_t a = {.verdict = HVD_ELASTIC_ASSIGNED,
                                      .rank = sl->rank,
                                      .size = sl->size,
                                      .local_rank = sl->local_rank,
                                      .local_size = sl->local_size,
                                      .cross_rank = sl->cross_rank,
                                      .cross_size = sl->cross_size,
                                      .sync = sync};
            hvd__elastic_msg_assign_format(&a, text, sizeof text);
            put_text(d, scope, s->key, text);
            continue;
        }
        size_t k = 0;
        for (size_t j = r; j < n && (k == 0 || s->remote); j++) {
            const hvd_slot_t *sj = &d->plan.slots[j];
            slot_t *oj = j == r ? s : find_slot(d, sj->host, sj->local_rank);
            if (taken[j] || oj->worker >= 0 || strcmp(sj->host, sl->host) != 0)
                continue;
            taken[j] = 1;
            group[k] = *sj;
            owners[k++] = oj;
        }
        st = s->remote ? hvd__workers_start_remote(d->workers, group, k, &env, NULL, ids)
                       : hvd__workers_start(d->workers, sl, 0, &env, ids);
        for (size_t j = 0; j < k && st == HVD_OK; j++)
            st = started(d, owners[j], ids[j], round);
    }
    free(group);
    free(owners);
    free(ids);
    free(taken);
    hvd__env_list_fini(&env);
    return st;
}

/* Every worker of the round has an outcome: decide (Horovod's rules, worker_registry.h). */
static hvd_status_t end_round(driver_t *d) {
    hvd_round_outcome_t o = hvd__registry_outcome(&d->reg, is_blacklisted, d);
    switch (o) {
    case HVD_ROUND_STOP_SUCCESS: {
        if (d->verbose)
            SAY(d, "horovodrun: elastic: round %d completed the job.\n", d->round);
        /* complete only if every worker of the last round got there */
        size_t done = hvd__registry_count(&d->reg, HVD_WORKER_SUCCESS);
        if (done < d->reg.count && d->first_failure < 0)
            SAY(d,
                "horovodrun: elastic: %zu of the %zu workers of round %d completed the job "
                "(exited with status 0) while the others had not; the job failed.\n",
                done, d->reg.count, d->round);
        end_job(d, NULL, done == d->reg.count ? 0 : failure_code(d));
        return HVD_OK;
    }
    case HVD_ROUND_STOP_ALL_FAILED:
        end_job(d, "elastic: every worker failed; stopping the job.", failure_code(d));
        return HVD_OK;
    case HVD_ROUND_STOP_BLACKLISTED:
        end_job(d, "elastic: every host of the job is blacklisted; stopping the job.",
                failure_code(d));
        return HVD_OK;
    case HVD_ROUND_RESUME:
        if (d->cfg->reset_limit >= 0 && d->resets >= d->cfg->reset_limit) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "Horovod was shutdown because number of resets during elastic job exceeded "
                     "limit: %d",
                     d->cfg->reset_limit);
            end_job(d, msg, failure_code(d));
            return HVD_OK;
        }
        d->resets++;
        d->phase = PHASE_WAIT_SLOTS;
        d->wait_start_ms = hvd__clock_now_ms();
        return HVD_OK;
    }
    return HVD_OK;
}

/* Waiting for min_np slots (before round 0 or between rounds). */
static hvd_status_t try_start(driver_t *d, bool first) {
    if (d->discovery_status != HVD_OK) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s", d->discovery_error);
        end_job(d, msg, 1);
        return HVD_OK;
    }
    hvd_host_list_t hosts = {0};
    hvd_slot_plan_t plan = {0};
    int need = first && d->cfg->initial_np > d->cfg->min_np ? d->cfg->initial_np : d->cfg->min_np;
    hvd_status_t st = plan_now(d, need, &hosts, &plan);
    if (st == HVD_OK)
        return start_round(d, &hosts, &plan, first);
    if (st != HVD_ERR_NOT_FOUND)
        return st;
    if (hvd__clock_now_ms() - d->wait_start_ms >= (int64_t)d->cfg->elastic_timeout_s * 1000) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "Timed out waiting for minimum number of slots to become available. Please "
                 "check that you have enough resources to run at least %d Horovod processes "
                 "(waited %d s, --elastic-timeout).",
                 need, d->cfg->elastic_timeout_s);
        end_job(d, msg, failure_code(d));
    }
    return HVD_OK;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static hvd_status_t drive(driver_t *d) {
    d->phase = PHASE_WAIT_SLOTS;
    d->wait_start_ms = hvd__clock_now_ms();
    bool first = true;
    hvd_status_t st = HVD_OK;
    while (st == HVD_OK && d->phase != PHASE_ENDING) {
        if (hvd__workers_interrupted(d->workers)) {
            end_job(d, NULL, 128 + hvd__workers_interrupted(d->workers));
            break;
        }
        if (d->phase == PHASE_WAIT_SLOTS) {
            int flags = atomic_exchange(&d->hosts_changed, 0);
            (void)flags;
            st = try_start(d, first);
            if (d->phase == PHASE_RUNNING)
                first = false;
            else
                check_silence(d);
        } else {
            read_ready(d);
            check_silence(d);
            check_left_behind(d);
            check_stragglers(d);
            check_hosts(d);
            if (hvd__registry_complete(&d->reg))
                st = end_round(d);
        }
        if (st == HVD_OK && d->phase != PHASE_ENDING)
            hvd__workers_step(d->workers, TICK_MS);
    }
    return st;
}

static void report(driver_t *d) {
    if (d->first_failure < 0 || d->first_failure_worker < 0 || d->exit_code == 0 ||
        hvd__workers_interrupted(d->workers))
        return;
    char who[400];
    describe_slot(d->slots[d->first_failure], who, sizeof who);
    hvd__workers_report(d->workers, (size_t)d->first_failure_worker, who);
}

hvd_status_t hvd__elastic_run(const hvd_elastic_config_t *cfg, int *exit_code_p) {
    driver_t *d = calloc(1, sizeof *d);
    if (!d)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the elastic driver");
    d->cfg = cfg;
    d->store = hvd__kv_server_store(cfg->server);
    d->first_failure = -1;
    d->first_failure_worker = -1;
    d->verbose = cfg->verbose;
    /* the ready scope of round 0 without its number: the prefix of every round's */
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_READY, 0, d->ready_prefix);
    d->ready_prefix[strlen(d->ready_prefix) - 1] = '\0';
    d->wcfg = *cfg->workers;
    d->wcfg.on_exit = on_worker_exit;
    d->wcfg.arg = d;
    d->wcfg.max_workers = HVD_ELASTIC_MAX_WORKERS;
    d->wcfg.output_np = cfg->max_np > 0 ? cfg->max_np : 1000;
    /* the hosts horovodrun checked before the job (and the discovery thread's first answer is
     * among them) are not checked again */
    for (size_t i = 0; i < cfg->nverified; i++) {
        struct reach *r = reach_of(d, cfg->verified[i]);
        if (r)
            r->ok = 1;
    }
    hvd__registry_init(&d->reg);
    hvd__stopped_ranks_init(&d->left_behind, cfg->silence_timeout_s);
    d->live_ids = malloc(HVD_ELASTIC_MAX_WORKERS * sizeof *d->live_ids);
    if (!d->live_ids) {
        free(d);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the elastic driver");
    }
    pthread_mutex_init(&d->beat_lock, NULL);
    pthread_mutex_init(&d->hm_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->hm_cond, &ca);
    pthread_condattr_destroy(&ca);
    hvd_host_manager_config_t hc = {.cooldown_lower_s = cfg->cooldown_lower_s,
                                    .cooldown_upper_s = cfg->cooldown_upper_s};
    hvd_status_t st = hvd__host_manager_create(&hc, &d->hm);
    if (st == HVD_OK && cfg->script)
        st = hvd__host_discovery_create(cfg->script, &d->script);
    if (st == HVD_OK)
        st = hvd__workers_create(&d->wcfg, &d->workers);
    if (st == HVD_OK) {
        hvd__kv_server_watch(cfg->server, on_store_put, d);
        if (pthread_create(&d->discovery_thread, NULL, discovery_main, d) != 0)
            st = hvd__error_set(HVD_ERR_IO, "cannot start the host discovery thread");
        else
            d->discovery_started = 1;
    }
    if (st == HVD_OK)
        st = drive(d);
    if (st != HVD_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hvd_last_error());
        if (d->workers)
            hvd__workers_stop_all(d->workers);
        hvd__error_set(st, "%s", msg);
    }
    /* Let every worker end and its output drain (bounded by the pool's deadlines). */
    while (d->workers && hvd__workers_busy(d->workers))
        hvd__workers_step(d->workers, TICK_MS);
    if (st == HVD_OK) {
        report(d);
        *exit_code_p = d->exit_code;
    }
    if (d->discovery_started) {
        pthread_mutex_lock(&d->hm_lock);
        d->stop_discovery = true;
        pthread_cond_broadcast(&d->hm_cond);
        pthread_mutex_unlock(&d->hm_lock);
        pthread_join(d->discovery_thread, NULL);
    }
    hvd__kv_server_watch(cfg->server, NULL, NULL);
    {
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", hvd_last_error());
        hvd__workers_destroy(d->workers);
        if (st != HVD_OK)
            hvd__error_set(st, "%s", keep);
    }
    hvd__host_discovery_destroy(d->script);
    hvd__host_manager_destroy(d->hm);
    hvd__registry_fini(&d->reg);
    hvd__stopped_ranks_fini(&d->left_behind);
    free(d->live_ids);
    hvd__slot_plan_fini(&d->plan);
    hvd__hosts_fini(&d->plan_hosts);
    for (size_t k = 0; k < d->nslots; k++) {
        free(d->slots[k]->host);
        free(d->slots[k]);
    }
    free(d->slots);
    free(d->by_key);
    free(d->by_worker);
    for (size_t i = 0; i < d->nreach; i++)
        free(d->reach[i].host);
    free(d->reach);
    pthread_cond_destroy(&d->hm_cond);
    pthread_mutex_destroy(&d->hm_lock);
    pthread_mutex_destroy(&d->beat_lock);
    free(d);
    return st;
}
