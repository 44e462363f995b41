/* The driver service of NIC discovery and the computation of its result (discovery.h). The
 * service's handler threads record registrations and reports under one lock; the thread in
 * hvd__driver_wait sleeps on a condition variable they signal, waking every 100 ms to run
 * the caller's check. */
#include "runner/discovery/discovery.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "crypto/secret.h"
#include "common/log.h"
#include "runner/service/service.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    hvd_disc_register_t *reg; /* NULL until the task registers */
    char seen_addr[16];       /* source address of its REGISTER */
    char seen_iface[HVD_DISC_IFACE_MAX];
    hvd_disc_addrs_t *reached; /* what it reached of its successor; NULL until it reports
                                * (the check: set, empty, once every link is in) */
    hvd_disc_report_t **links; /* the check: its report on each other task; NULL until in */
    size_t nlinks;
    int done; /* it was told DONE */
} task_t;

struct hvd_driver {
    hvd_secret_t secret;
    size_t n;
    int mesh; /* the network check */
    char **hosts;
    hvd_nic_filter_t filter;
    int timeout_s;
    hvd_netif_t *addrs;
    size_t addr_count;
    hvd_svc_server_t *server;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; a task registered, reported or was told DONE */
    task_t *tasks;
    size_t registered, reported, done;
    char *message; /* full text of the last failed wait */
};

/* --- a growing text buffer for long messages (the matrix) --------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} text_t;

static void text_add(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text_t *t, const char *fmt, ...) {
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            t->failed = 1;
            return;
        }
        if (t->p && (size_t)w < t->cap - t->len) {
            t->len += (size_t)w;
            return;
        }
        size_t cap = (t->cap ? t->cap * 2 : 1024) + (size_t)w;
        char *np = realloc(t->p, cap);
        if (!np) {
            t->failed = 1;
            return;
        }
        t->p = np;
        t->cap = cap;
    }
}

/* Make t the driver's message and the thread's last error; returns status. */
static hvd_status_t fail_with(hvd_driver_t *d, text_t *t, hvd_status_t status) {
    free(d->message);
    d->message = t->failed ? NULL : t->p;
    if (t->failed)
        free(t->p);
    hvd__error_set(status, "%s", d->message ? d->message : "NIC discovery failed (out of memory)");
    return status;
}

static const char *host_of(const hvd_driver_t *d, size_t i) {
    return d->hosts[i];
}

/* --- service handler ---------------------------------------------------------------------- */

static int is_ipv4(const char *s) {
    struct in_addr a;
    return inet_pton(AF_INET, s, &a) == 1;
}

static hvd_status_t on_register(hvd_driver_t *d, const char *peer_addr, const uint8_t *body,
                                size_t len, uint16_t *rt) {
    hvd_disc_register_t *reg = calloc(1, sizeof *reg);
    if (!reg)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    hvd_status_t st = hvd__disc_register_decode(body, len, reg);
    if (st == HVD_OK && reg->index >= d->n)
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "REGISTER of task %u, but there are %zu hosts",
                            reg->index, d->n);
    if (st == HVD_OK && strcmp(reg->host, host_of(d, reg->index)) != 0)
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "task %u registered as host '%s', but host %u is '%s'", reg->index,
                            reg->host, reg->index, host_of(d, reg->index));
    for (size_t i = 0; st == HVD_OK && i < reg->addrs.count; i++)
        if (!is_ipv4(reg->addrs.items[i].addr))
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "REGISTER: '%s' is not an IPv4 address",
                                reg->addrs.items[i].addr);
    if (st != HVD_OK) {
        free(reg);
        return st;
    }
    const hvd_netif_t *seen = hvd__netif_by_addr(peer_addr, reg->addrs.items, reg->addrs.count);
    int seen_known = seen != NULL;
    uint32_t idx = reg->index; /* reg belongs to the table once published */
    pthread_mutex_lock(&d->lock);
    task_t *t = &d->tasks[idx];
    if (!t->reg)
        d->registered++;
    free(t->reg);
    t->reg = reg;
    snprintf(t->seen_addr, sizeof t->seen_addr, "%s", peer_addr);
    snprintf(t->seen_iface, sizeof t->seen_iface, "%s", seen ? seen->name : "");
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    HVD_LOG_D("driver service: task %u (host %s) registered from %s", idx, host_of(d, idx),
              peer_addr);
    if (!seen_known && hvd__nic_filter_is_empty(&d->filter))
        HVD_LOG_W("driver service: task %u (host %s) connected from %s, which is not one of its "
                  "own addresses: is there NAT between this host and %s?",
                  idx, host_of(d, idx), peer_addr, host_of(d, idx));
    *rt = HVD_SVC_ACK;
    return HVD_OK;
}

static hvd_status_t on_get_task(hvd_driver_t *d, const uint8_t *body, size_t len, uint16_t *rt,
                                uint8_t *resp, size_t cap, size_t *rlen) {
    uint32_t asker = 0, j = 0;
    hvd_status_t st = hvd__disc_get_task_decode(body, len, &asker, &j);
    if (st == HVD_OK && (j >= d->n || asker >= d->n))
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "GET_TASK %u by task %u, but there are %zu hosts",
                            j, asker, d->n);
    if (st != HVD_OK)
        return st;
    hvd_disc_task_info_t *info = calloc(1, sizeof *info);
    if (!info)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_lock(&d->lock);
    const hvd_disc_register_t *reg = d->tasks[j].reg;
    if (reg) {
        info->index = j;
        snprintf(info->host, sizeof info->host, "%s", reg->host);
        info->port = reg->port;
        info->addrs = reg->addrs;
    }
    pthread_mutex_unlock(&d->lock);
    if (reg) {
        st = hvd__disc_task_info_encode(info, resp, cap, rlen);
        *rt = HVD_DISC_TASK_INFO;
    } else {
        /* NOT_YET names the host, so the asking task can say whom it waits for */
        hvd_svc_enc_t e;
        hvd__svc_enc_init(&e, resp, cap);
        hvd__svc_enc_str(&e, host_of(d, j));
        st = hvd__svc_enc_finish(&e, "NOT_YET", rlen);
        *rt = HVD_DISC_NOT_YET;
    }
    free(info);
    return st;
}

static hvd_status_t on_report(hvd_driver_t *d, const uint8_t *body, size_t len, uint16_t *rt) {
    hvd_disc_report_t *r = calloc(1, sizeof *r);
    if (!r)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    hvd_status_t st = hvd__disc_report_decode(body, len, r);
    if (st == HVD_OK && d->mesh && (r->from >= d->n || r->to >= d->n || r->to == r->from))
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "REPORT from task %u about task %u: not a link between %zu hosts",
                            r->from, r->to, d->n);
    else if (st == HVD_OK && !d->mesh && (r->from >= d->n || r->to != (r->from + 1) % d->n))
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "REPORT from task %u about task %u: not a link of the ring of %zu",
                            r->from, r->to, d->n);
    if (st != HVD_OK) {
        free(r);
        return st;
    }
    pthread_mutex_lock(&d->lock);
    task_t *t = &d->tasks[r->from];
    if (d->mesh) {
        if (!t->links[r->to]) { /* (a repeated report changes nothing: requests are retried) */
            t->links[r->to] = r;
            r = NULL;
            if (++t->nlinks == d->n - 1 && (t->reached = calloc(1, sizeof *t->reached)))
                d->reported++;
        }
        if (t->nlinks == d->n - 1 && !t->reached)
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        pthread_cond_broadcast(&d->cond);
        pthread_mutex_unlock(&d->lock);
        free(r);
        *rt = HVD_SVC_ACK;
        return st;
    }
    if (!t->reached) {
        t->reached = malloc(sizeof *t->reached);
        if (t->reached)
            d->reported++;
    }
    if (t->reached)
        *t->reached = r->reached;
    else
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    HVD_LOG_D("driver service: task %u reached %zu addresses of task %u", r->from, r->reached.count,
              r->to);
    free(r);
    *rt = HVD_SVC_ACK;
    return st;
}

static hvd_status_t on_wait_done(hvd_driver_t *d, const uint8_t *body, size_t len, uint16_t *rt) {
    uint32_t i = 0;
    hvd_status_t st = hvd__disc_index_decode(body, len, "WAIT_DONE", &i);
    if (st == HVD_OK && i >= d->n)
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "WAIT_DONE of task %u, but there are %zu hosts", i,
                            d->n);
    if (st != HVD_OK)
        return st;
    pthread_mutex_lock(&d->lock);
    *rt = HVD_DISC_NOT_YET;
    if (d->reported == d->n) {
        if (!d->tasks[i].done) {
            d->tasks[i].done = 1;
            d->done++;
            pthread_cond_broadcast(&d->cond);
        }
        *rt = HVD_DISC_DONE;
    }
    pthread_mutex_unlock(&d->lock);
    return HVD_OK;
}

static hvd_status_t handle(void *arg, const char *peer_addr, uint16_t type, const uint8_t *body,
                           size_t len, uint16_t *rt, uint8_t *resp, size_t cap, size_t *rlen) {
    hvd_driver_t *d = arg;
    *rlen = 0;
    switch (type) {
    case HVD_DISC_REGISTER:
        return on_register(d, peer_addr, body, len, rt);
    case HVD_DISC_GET_TASK:
        return on_get_task(d, body, len, rt, resp, cap, rlen);
    case HVD_DISC_REPORT:
        return on_report(d, body, len, rt);
    case HVD_DISC_WAIT_DONE:
        return on_wait_done(d, body, len, rt);
    default:
        return hvd__error_set(HVD_ERR_UNSUPPORTED, "message type %u is not served here", type);
    }
}

/* --- start, accessors, stop --------------------------------------------------------------- */

static void driver_free(hvd_driver_t *d) {
    for (size_t i = 0; d->tasks && i < d->n; i++) {
        free(d->tasks[i].reg);
        free(d->tasks[i].reached);
        for (size_t j = 0; d->tasks[i].links && j < d->n; j++)
            free(d->tasks[i].links[j]);
        free(d->tasks[i].links);
    }
    free(d->tasks);
    for (size_t i = 0; d->hosts && i < d->n; i++)
        free(d->hosts[i]);
    free(d->hosts);
    free(d->addrs);
    free(d->message);
    hvd__secret_wipe(&d->secret);
    free(d);
}

hvd_status_t hvd__driver_start(const hvd_driver_config_t *cfg, hvd_driver_t **driver_p) {
    if (!cfg->secret || cfg->host_count == 0 || cfg->host_count > HVD_DISC_MAX_HOSTS ||
        cfg->timeout_s <= 0 || (cfg->mesh && cfg->host_count < 2))
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "NIC discovery needs the job secret, 1 to %d hosts and a positive "
                              "timeout",
                              HVD_DISC_MAX_HOSTS);
    hvd_nic_filter_t filter;
    hvd_status_t st = hvd__nic_filter_parse(cfg->nics, cfg->nic_count, &filter);
    if (st != HVD_OK)
        return st;
    hvd_driver_t *d = calloc(1, sizeof *d);
    if (!d)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the driver service");
    d->secret = *cfg->secret;
    d->filter = filter;
    d->timeout_s = cfg->timeout_s;
    d->n = cfg->host_count;
    d->mesh = cfg->mesh;
    d->hosts = calloc(d->n, sizeof *d->hosts);
    d->tasks = calloc(d->n, sizeof *d->tasks);
    if (!d->hosts || !d->tasks) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the driver service");
        goto err_free;
    }
    for (size_t i = 0; i < d->n && d->mesh; i++) {
        if (!(d->tasks[i].links = calloc(d->n, sizeof *d->tasks[i].links))) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the driver service");
            goto err_free;
        }
    }
    for (size_t i = 0; i < d->n; i++) {
        if (!cfg->hosts[i] || !*cfg->hosts[i] || strlen(cfg->hosts[i]) >= HVD_DISC_HOST_MAX) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "host %zu: empty or longer than %d bytes", i,
                                HVD_DISC_HOST_MAX - 1);
            goto err_free;
        }
        if (!(d->hosts[i] = strdup(cfg->hosts[i]))) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the driver service");
            goto err_free;
        }
    }
    if (cfg->bind_addr && *cfg->bind_addr) {
        d->addrs = calloc(1, sizeof *d->addrs);
        if (!d->addrs) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the driver service");
            goto err_free;
        }
        hvd_netif_t *all = NULL;
        size_t count = 0;
        const hvd_netif_t *own = NULL;
        if (hvd__netif_list(&all, &count) == HVD_OK)
            own = hvd__netif_by_addr(cfg->bind_addr, all, count);
        snprintf(d->addrs[0].name, sizeof d->addrs[0].name, "%s", own ? own->name : "");
        snprintf(d->addrs[0].addr, sizeof d->addrs[0].addr, "%s", cfg->bind_addr);
        d->addr_count = 1;
        free(all);
    } else {
        st = hvd__netif_list(&d->addrs, &d->addr_count);
        if (st != HVD_OK)
            goto err_free;
        if (d->addr_count > HVD_DISC_MAX_ADDRS)
            d->addr_count = HVD_DISC_MAX_ADDRS;
        if (d->addr_count == 0) {
            st = hvd__error_set(HVD_ERR_IO, "this host has no IPv4 address for the driver service");
            goto err_free;
        }
    }
    if (pthread_mutex_init(&d->lock, NULL) != 0) {
        st = hvd__error_set(HVD_ERR_IO, "cannot create a mutex");
        goto err_free;
    }
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&d->cond, &ca) != 0) {
        st = hvd__error_set(HVD_ERR_IO, "cannot create a condition variable");
        goto err_mutex;
    }
    pthread_condattr_destroy(&ca);
    hvd_svc_server_config_t sc = {.name = HVD_DISC_DRIVER_NAME,
                                  .bind_addr = cfg->bind_addr,
                                  .secret = &d->secret,
                                  .handler = handle,
                                  .handler_arg = d};
    st = hvd__svc_server_start(&sc, &d->server);
    if (st != HVD_OK)
        goto err_cond;
    *driver_p = d;
    return HVD_OK;
err_cond:
    pthread_cond_destroy(&d->cond);
err_mutex:
    pthread_mutex_destroy(&d->lock);
err_free:
    driver_free(d);
    return st;
}

const hvd_netif_t *hvd__driver_addrs(const hvd_driver_t *d, size_t *count_p) {
    *count_p = d->addr_count;
    return d->addrs;
}

int hvd__driver_port(const hvd_driver_t *d) {
    return hvd__svc_server_port(d->server);
}

hvd_status_t hvd__driver_task_input(const hvd_driver_t *d, size_t index, uint8_t **buf_p,
                                    size_t *len_p) {
    if (index >= d->n)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "task %zu of %zu hosts", index, d->n);
    hvd_disc_input_t *in = calloc(1, sizeof *in);
    if (!in)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a task's input");
    in->secret = d->secret;
    in->index = (uint32_t)index;
    in->n = (uint32_t)d->n;
    in->timeout_s = (uint32_t)d->timeout_s;
    snprintf(in->host, sizeof in->host, "%s", d->hosts[index]);
    in->driver_port = (uint16_t)hvd__svc_server_port(d->server);
    for (size_t i = 0; i < d->addr_count; i++)
        snprintf(in->driver_addrs[i], sizeof in->driver_addrs[i], "%s", d->addrs[i].addr);
    in->driver_addr_count = d->addr_count;
    in->flags = d->mesh ? HVD_DISC_FLAG_MESH : 0;
    for (size_t i = 0; i < d->filter.name_count; i++)
        snprintf(in->nics[in->nic_count++], HVD_NIC_KEY_MAX, "%s", d->filter.names[i]);
    for (size_t i = 0; i < d->filter.cidr_count; i++)
        snprintf(in->nics[in->nic_count++], HVD_NIC_KEY_MAX, "%s", d->filter.cidrs[i].text);
    hvd_status_t st = hvd__disc_input_encode(in, buf_p, len_p);
    explicit_bzero(in, sizeof *in);
    free(in);
    return st;
}

const char *hvd__driver_message(const hvd_driver_t *d) {
    return d->message ? d->message : "";
}

void hvd__driver_progress(hvd_driver_t *d, size_t *registered_p, size_t *reported_p) {
    pthread_mutex_lock(&d->lock);
    *registered_p = d->registered;
    *reported_p = d->reported;
    pthread_mutex_unlock(&d->lock);
}

void hvd__driver_stop(hvd_driver_t *d) {
    if (!d)
        return;
    hvd__svc_server_stop(d->server);
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->lock);
    driver_free(d);
}

/* --- the wait and the result -------------------------------------------------------------- */

#define LIST_MAX 16 /* hosts named in a timeout message before "and N more" */

static hvd_status_t timeout_error(hvd_driver_t *d) {
    text_t t = {0};
    int starting = d->registered < d->n;
    size_t missing = starting ? d->n - d->registered : d->n - d->reported;
    text_add(&t,
             "Timed out waiting for %s. Please check connectivity between servers. You may need "
             "to increase the --start-timeout parameter if you have too many servers. Timeout "
             "after %d seconds. Still waiting for %zu of %zu hosts: ",
             starting ? "tasks to start" : "tasks to update task-to-task addresses", d->timeout_s,
             missing, d->n);
    size_t listed = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (starting ? d->tasks[i].reg != NULL : d->tasks[i].reached != NULL)
            continue;
        if (listed == LIST_MAX) {
            text_add(&t, ", and %zu more", missing - listed);
            break;
        }
        size_t j = (i + 1) % d->n;
        if (starting)
            text_add(&t, "%s%s (index %zu) has not registered its task service", listed ? "; " : "",
                     host_of(d, i), i);
        else if (d->mesh)
            text_add(&t, "%s%s (index %zu) has reported %zu of its probes of the %zu other hosts",
                     listed ? "; " : "", host_of(d, i), i, d->tasks[i].nlinks, d->n - 1);
        else
            text_add(&t, "%s%s (index %zu) has not reported its probe of %s (index %zu)",
                     listed ? "; " : "", host_of(d, i), i, host_of(d, j), j);
        listed++;
    }
    text_add(&t, ".");
    return fail_with(d, &t, HVD_ERR_TIMEOUT);
}

static int addrs_has(const hvd_disc_addrs_t *a, const char *name, const char *addr) {
    for (size_t i = 0; i < a->count; i++)
        if (strcmp(a->items[i].addr, addr) == 0 && (!name || strcmp(a->items[i].name, name) == 0))
            return 1;
    return 0;
}

/* The first address of a with key, or NULL. */
static const hvd_netif_t *addrs_with_key(const hvd_nic_filter_t *f, const hvd_disc_addrs_t *a,
                                         const char *key) {
    for (size_t i = 0; i < a->count; i++) {
        const char *k = hvd__nic_filter_key(f, a->items[i].name, a->items[i].addr);
        if (k && strcmp(k, key) == 0)
            return &a->items[i];
    }
    return NULL;
}

/* Reachability around the ring, one line per link. Called locked. */
static void add_matrix(hvd_driver_t *d, text_t *t) {
    char filter[256];
    hvd__nic_filter_format(&d->filter, filter, sizeof filter);
    text_add(t, " Interface filter: %s. Each host probed the next one around the ring:", filter);
    for (size_t i = 0; i < d->n; i++) {
        size_t j = (i + 1) % d->n;
        const task_t *ti = &d->tasks[i], *tj = &d->tasks[j];
        text_add(t, "\n  %s (index %zu) -> %s (index %zu): ", host_of(d, i), i, host_of(d, j), j);
        if (!tj->reg) {
            text_add(t, "%s never registered", host_of(d, j));
            continue;
        }
        if (tj->reg->addrs.count == 0) {
            text_add(t, "%s has no address that passes the interface filter", host_of(d, j));
            continue;
        }
        if (!ti->reached) {
            text_add(t, "no report from %s", host_of(d, i));
            continue;
        }
        for (size_t k = 0; k < tj->reg->addrs.count; k++) {
            const hvd_netif_t *a = &tj->reg->addrs.items[k];
            text_add(t, "%s%s %s %s", k ? ", " : "", a->name, a->addr,
                     addrs_has(ti->reached, a->name, a->addr) ? "reached" : "not reached");
        }
    }
}

static hvd_status_t compute_result(hvd_driver_t *d, hvd_disc_result_t *r) {
    memset(r, 0, sizeof *r);
    /* Every report in means every task registered (each is some task's successor), unless a
     * holder of the secret sent reports without registering. */
    for (size_t i = 0; i < d->n; i++)
        if (!d->tasks[i].reg || !d->tasks[i].reached)
            return hvd__error_set(HVD_ERR_STATE,
                                  "NIC discovery: %s (index %zu) reported without registering",
                                  host_of(d, i), i);
    /* keys of host 0 in its order, kept when reached on every link */
    const hvd_disc_addrs_t *first = &d->tasks[0].reg->addrs;
    for (size_t k = 0; k < first->count && r->nic_count < HVD_DISC_MAX_ADDRS; k++) {
        const char *key =
            hvd__nic_filter_key(&d->filter, first->items[k].name, first->items[k].addr);
        if (!key)
            continue;
        int dup = 0, everywhere = 1;
        for (size_t c = 0; c < r->nic_count; c++)
            dup |= strcmp(r->nics[c], key) == 0;
        for (size_t i = 0; i < d->n && everywhere && !dup; i++)
            everywhere = addrs_with_key(&d->filter, d->tasks[i].reached, key) != NULL;
        if (!dup && everywhere)
            snprintf(r->nics[r->nic_count++], HVD_NIC_KEY_MAX, "%s", key);
    }
    if (r->nic_count == 0) {
        text_t t = {0};
        text_add(&t,
                 "Unable to find a set of common task-to-task communication interfaces: no "
                 "interface is reachable on every link of the ring of %zu hosts.",
                 d->n);
        add_matrix(d, &t);
        return fail_with(d, &t, HVD_ERR_NOT_FOUND);
    }

    /* the driver address every task reached, on a common interface if possible */
    const hvd_netif_t *pick = NULL;
    for (int pass = 0; pass < 2 && !pick; pass++) {
        for (size_t k = 0; k < d->addr_count && !pick; k++) {
            const hvd_netif_t *a = &d->addrs[k];
            int all = 1;
            for (size_t i = 0; i < d->n && all; i++) {
                const hvd_disc_register_t *reg = d->tasks[i].reg;
                int hit = 0;
                for (size_t m = 0; m < reg->reached_count && !hit; m++)
                    hit = strcmp(reg->reached[m], a->addr) == 0;
                all = hit;
            }
            if (!all)
                continue;
            const char *key = hvd__nic_filter_key(&d->filter, a->name, a->addr);
            int common = 0;
            for (size_t c = 0; key && c < r->nic_count; c++)
                common |= strcmp(r->nics[c], key) == 0;
            if (common || pass == 1)
                pick = a;
        }
    }
    if (!pick) {
        text_t t = {0};
        text_add(&t, "No address of the launcher host was reached by every task, so the "
                     "rendezvous server would be unreachable from some hosts. Driver addresses "
                     "each host reached:");
        for (size_t i = 0; i < d->n; i++) {
            const hvd_disc_register_t *reg = d->tasks[i].reg;
            text_add(&t, "\n  %s (index %zu): ", host_of(d, i), i);
            if (reg->reached_count == 0)
                text_add(&t, "(none)");
            for (size_t m = 0; m < reg->reached_count; m++)
                text_add(&t, "%s%s", m ? ", " : "", reg->reached[m]);
        }
        return fail_with(d, &t, HVD_ERR_NOT_FOUND);
    }
    snprintf(r->driver_addr, sizeof r->driver_addr, "%s", pick->addr);
    snprintf(r->driver_iface, sizeof r->driver_iface, "%s", pick->name);

    r->hosts = calloc(d->n, sizeof *r->hosts);
    if (!r->hosts)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the discovery result");
    r->host_count = d->n;
    for (size_t j = 0; j < d->n; j++) {
        const task_t *tj = &d->tasks[j];
        const hvd_disc_addrs_t *seen = d->tasks[(j + d->n - 1) % d->n].reached;
        const hvd_netif_t *a = addrs_with_key(&d->filter, seen, r->nics[0]);
        hvd_disc_host_t *h = &r->hosts[j];
        snprintf(h->host, sizeof h->host, "%s", host_of(d, j));
        snprintf(h->host_hash, sizeof h->host_hash, "%s", tj->reg->host_hash);
        snprintf(h->iface, sizeof h->iface, "%s", a ? a->name : "");
        snprintf(h->addr, sizeof h->addr, "%s", a ? a->addr : "");
        snprintf(h->driver_iface, sizeof h->driver_iface, "%s", tj->seen_iface);
    }
    return HVD_OK;
}

/* The check's cell for the link i -> j: "ok", "k of n" addresses, or "FAIL". */
static void mesh_cell(const hvd_driver_t *d, size_t i, size_t j, char *out, size_t n) {
    const hvd_disc_report_t *r = d->tasks[i].links[j];
    size_t all = r ? r->reached.count + r->failed_count : 0;
    if (i == j || !r)
        snprintf(out, n, "-");
    else if (all == 0)
        snprintf(out, n, "none");
    else if (r->failed_count == 0)
        snprintf(out, n, "ok");
    else if (r->reached.count == 0)
        snprintf(out, n, "FAIL");
    else
        snprintf(out, n, "%zu of %zu", r->reached.count, all);
}

/* The network check's result (called locked, every link in): the matrix (rows probe columns),
 * each failed address with its cause, and the interface keys reached on every link. */
static hvd_status_t mesh_result(hvd_driver_t *d, hvd_disc_result_t *res) {
    memset(res, 0, sizeof *res);
    text_t t = {0};
    char filter[256], cell[48];
    hvd__nic_filter_format(&d->filter, filter, sizeof filter);
    size_t w = 8;
    for (size_t i = 0; i < d->n; i++)
        w = strlen(host_of(d, i)) + 2 > w ? strlen(host_of(d, i)) + 2 : w;
    text_add(&t,
             "Network check of %zu hosts: each host probed every other host's task service on "
             "each of its addresses but loopback (interface filter: %s). Rows probed "
             "columns:\n%*s",
             d->n, filter, (int)w + 2, "");
    for (size_t j = 0; j < d->n; j++) /* (the last column unpadded) */
        text_add(&t, "%-*s", j + 1 < d->n ? (int)w : 0, host_of(d, j));
    size_t failed_links = 0;
    for (size_t i = 0; i < d->n; i++) {
        text_add(&t, "\n  %-*s", (int)w, host_of(d, i));
        for (size_t j = 0; j < d->n; j++) {
            mesh_cell(d, i, j, cell, sizeof cell);
            text_add(&t, "%-*s", j + 1 < d->n ? (int)w : 0, cell);
            failed_links += i != j && d->tasks[i].links[j]->failed_count > 0;
        }
    }
    if (failed_links) {
        text_add(&t, "\nFailures (%zu of %zu links):", failed_links, d->n * (d->n - 1));
        for (size_t i = 0; i < d->n; i++) {
            for (size_t j = 0; j < d->n; j++) {
                const hvd_disc_report_t *r = i == j ? NULL : d->tasks[i].links[j];
                for (size_t k = 0; r && k < r->failed_count; k++) {
                    const hvd_disc_failure_t *f = &r->failed[k];
                    text_add(&t, "\n  %s -> %s: %s %s %s (%s)", host_of(d, i), host_of(d, j),
                             f->where.name, f->where.addr, hvd__disc_cause_name(f->cause),
                             f->detail);
                }
            }
        }
    }
    /* keys of host 0 in its order, kept when every link reached them */
    const hvd_disc_addrs_t *first = d->tasks[0].reg ? &d->tasks[0].reg->addrs : NULL;
    for (size_t k = 0; first && k < first->count && res->nic_count < HVD_DISC_MAX_ADDRS; k++) {
        const char *key =
            hvd__nic_filter_key(&d->filter, first->items[k].name, first->items[k].addr);
        int dup = 0, everywhere = key != NULL;
        for (size_t c = 0; key && c < res->nic_count; c++)
            dup |= strcmp(res->nics[c], key) == 0;
        for (size_t i = 0; i < d->n && everywhere && !dup; i++)
            for (size_t j = 0; j < d->n && everywhere; j++)
                everywhere =
                    i == j || addrs_with_key(&d->filter, &d->tasks[i].links[j]->reached, key);
        if (!dup && everywhere)
            snprintf(res->nics[res->nic_count++], HVD_NIC_KEY_MAX, "%s", key);
    }
    text_add(&t, "\nInterfaces that work on every link: ");
    for (size_t c = 0; c < res->nic_count; c++)
        text_add(&t, "%s%s", c ? " " : "", res->nics[c]);
    text_add(&t, "%s", res->nic_count ? "" : "none");
    hvd_status_t st = fail_with(d, &t, res->nic_count ? HVD_OK : HVD_ERR_NOT_FOUND);
    if (st == HVD_OK)
        hvd__error_clear();
    return st;
}

hvd_status_t hvd__driver_wait(hvd_driver_t *d, int64_t deadline_ms, hvd_driver_check_fn check,
                              void *arg, hvd_disc_result_t *result_p) {
    hvd_status_t st = HVD_OK;
    pthread_mutex_lock(&d->lock);
    free(d->message);
    d->message = NULL;
    /* Once every report is in, the result is decided; waiting on for the DONE deliveries
     * only lets the tasks exit by themselves, so a check that stops it or the deadline end
     * that part of the wait without failing it. */
    while (d->done < d->n) {
        int all_reported = d->reported == d->n;
        if (hvd__clock_now_ms() >= deadline_ms) {
            if (!all_reported)
                st = timeout_error(d);
            break;
        }
        if (check) {
            char msg[512] = "";
            pthread_mutex_unlock(&d->lock);
            int stop = check(arg, msg, sizeof msg);
            pthread_mutex_lock(&d->lock);
            if (stop && d->reported == d->n)
                break;
            if (stop) {
                text_t t = {0};
                text_add(&t, "NIC discovery stopped: %s", msg[0] ? msg : "a task service failed");
                st = fail_with(d, &t, HVD_ERR_PEER_LOST);
                break;
            }
        }
        int64_t wake = hvd__clock_now_ms() + 100;
        if (wake > deadline_ms)
            wake = deadline_ms;
        struct timespec ts = {.tv_sec = wake / 1000, .tv_nsec = (wake % 1000) * 1000000};
        pthread_cond_timedwait(&d->cond, &d->lock, &ts);
    }
    if (st == HVD_OK) {
        hvd_disc_result_t r;
        st = d->mesh ? mesh_result(d, &r) : compute_result(d, &r);
        if (st == HVD_OK)
            *result_p = r;
        else
            hvd__disc_result_fini(&r);
    }
    pthread_mutex_unlock(&d->lock);
    return st;
}

void hvd__disc_result_fini(hvd_disc_result_t *r) {
    free(r->hosts);
    memset(r, 0, sizeof *r);
}

/* --- text form for the cache -------------------------------------------------------------- */

/* Every byte outside [A-Za-z0-9._:/-] becomes %XX, so fields never hold the separators. */
static void text_escaped(text_t *t, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("._:/-", c))
            text_add(t, "%c", c);
        else
            text_add(t, "%%%02X", c);
    }
}

hvd_status_t hvd__disc_result_format(const hvd_disc_result_t *r, char **text_p) {
    text_t t = {0};
    text_add(&t, "nics=");
    for (size_t i = 0; i < r->nic_count; i++) {
        text_add(&t, i ? "," : "");
        text_escaped(&t, r->nics[i]);
    }
    text_add(&t, " driver=");
    text_escaped(&t, r->driver_addr);
    text_add(&t, ",");
    text_escaped(&t, r->driver_iface);
    for (size_t i = 0; i < r->host_count; i++) {
        const hvd_disc_host_t *h = &r->hosts[i];
        const char *fields[] = {h->host, h->host_hash, h->iface, h->addr, h->driver_iface};
        text_add(&t, " host=");
        for (size_t f = 0; f < 5; f++) {
            text_add(&t, f ? "," : "");
            text_escaped(&t, fields[f]);
        }
    }
    if (t.failed) {
        free(t.p);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory formatting a discovery result");
    }
    *text_p = t.p;
    return HVD_OK;
}

/* Unescape the field at *p up to one of the stop characters into out. -1 if malformed or
 * too long. */
static int take_field(const char **p, const char *stops, char *out, size_t out_size) {
    size_t n = 0;
    const char *s = *p;
    while (*s && !strchr(stops, *s)) {
        int c = (unsigned char)*s;
        if (c == '%') {
            int hi = hvd__hex_digit(s[1]), lo = hi < 0 ? -1 : hvd__hex_digit(s[2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            s += 2;
        }
        if (c == 0 || n + 1 >= out_size)
            return -1;
        out[n++] = (char)c;
        s++;
    }
    out[n] = '\0';
    *p = s;
    return 0;
}

hvd_status_t hvd__disc_result_parse(const char *text, hvd_disc_result_t *r_p) {
    hvd_disc_result_t r;
    memset(&r, 0, sizeof r);
    const char *p = text;
    size_t hosts = 0;
    for (const char *q = text; (q = strstr(q, " host=")) != NULL; q++)
        hosts++;
    if (hosts == 0 || hosts > HVD_DISC_MAX_HOSTS)
        goto bad;
    r.hosts = calloc(hosts, sizeof *r.hosts);
    if (!r.hosts)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory parsing a discovery result");
    if (strncmp(p, "nics=", 5) != 0)
        goto bad;
    p += 5;
    for (;;) {
        if (r.nic_count == HVD_DISC_MAX_ADDRS ||
            take_field(&p, ", ", r.nics[r.nic_count], HVD_NIC_KEY_MAX) != 0 ||
            !r.nics[r.nic_count][0])
            goto bad;
        r.nic_count++;
        if (*p != ',')
            break;
        p++;
    }
    if (strncmp(p, " driver=", 8) != 0)
        goto bad;
    p += 8;
    if (take_field(&p, ", ", r.driver_addr, sizeof r.driver_addr) != 0 || *p++ != ',' ||
        take_field(&p, ", ", r.driver_iface, sizeof r.driver_iface) != 0 || !is_ipv4(r.driver_addr))
        goto bad;
    for (size_t i = 0; i < hosts; i++) {
        hvd_disc_host_t *h = &r.hosts[i];
        char *fields[] = {h->host, h->host_hash, h->iface, h->addr, h->driver_iface};
        const size_t sizes[] = {sizeof h->host, sizeof h->host_hash, sizeof h->iface,
                                sizeof h->addr, sizeof h->driver_iface};
        if (strncmp(p, " host=", 6) != 0)
            goto bad;
        p += 6;
        for (size_t f = 0; f < 5; f++) {
            if (f && *p++ != ',')
                goto bad;
            if (take_field(&p, ", ", fields[f], sizes[f]) != 0)
                goto bad;
        }
        if (!h->host[0] || !is_ipv4(h->addr))
            goto bad;
    }
    if (*p)
        goto bad;
    r.host_count = hosts;
    *r_p = r;
    return HVD_OK;
bad:
    free(r.hosts);
    return hvd__error_set(HVD_ERR_PROTOCOL, "malformed discovery result in the cache");
}
