/* The task program of NIC discovery (task_service.h). */
#include "runner/discovery/task_service.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "os/netif.h"
#include "runner/discovery/discovery_msg.h"
#include "runner/discovery/host_hash.h"
#include "runner/discovery/nic_filter.h"
#include "runner/launch/remote_exec.h"
#include "runner/service/service.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 100           /* between NOT_YET answers */
#define PROBE_ATTEMPTS 3      /* per address */
#define PROBE_CONNECT_MS 5000 /* per attempt */
/* per attempt of a network check (--check-network): it should answer within a few seconds
 * for many hosts, and a link that swallows a connection for 1.5 s (a lost SYN is sent again
 * after 1 s) is already broken */
#define CHECK_CONNECT_MS 1500
/* the check's first attempt at the driver's addresses (register_with_driver) */
#define REGISTER_QUICK_MS 500
#define PROBE_RETRY_MS 200 /* pause after a refused attempt */
/* A task waits this much longer than the driver's --start-timeout: when a host is missing,
 * the driver, which knows which host and what it has not done, must be the one to time out
 * (with the same deadline, a local task that started a moment after the driver could time
 * out first and end the launch with a message naming no culprit). */
#define BACKSTOP_S 5

/* --- probing ------------------------------------------------------------------------------ */

typedef struct {
    /* target */
    const char *iface, *addr;
    int port;
    const char *expect_name;
    /* source check (match): NULL key means no check */
    const char *key;
    const hvd_nic_filter_t *filter;
    const hvd_netif_t *own;
    size_t own_count;
    const hvd_secret_t *secret;
    int64_t deadline_ms;
    int connect_ms; /* per attempt; 0: PROBE_CONNECT_MS */
    /* outcome */
    int ok;
    uint8_t cause; /* HVD_DISC_CAUSE_* when not ok */
    char why[200];
    pthread_t thread;
    int started;
} probe_t;

/* 1 when source (as the probed service saw it) is this host's address on the probed key. */
static int source_matches(const probe_t *p, const char *source) {
    const hvd_cidr_t *cidr = hvd__nic_filter_cidr(p->filter, p->key);
    if (cidr)
        return hvd__cidr_contains(cidr, source) &&
               hvd__netif_by_addr(source, p->own, p->own_count) != NULL;
    for (size_t i = 0; i < p->own_count; i++)
        if (strcmp(p->own[i].addr, source) == 0 && strcmp(p->own[i].name, p->iface) == 0)
            return 1;
    return 0;
}

static void *probe_main(void *arg) {
    probe_t *p = arg;
    for (int attempt = 0; attempt < PROBE_ATTEMPTS; attempt++) {
        int64_t deadline = hvd__clock_deadline_ms(p->connect_ms ? p->connect_ms : PROBE_CONNECT_MS);
        if (deadline > p->deadline_ms)
            deadline = p->deadline_ms;
        hvd_svc_client_t *c = NULL;
        char name[HVD_SVC_NAME_MAX], source[16];
        hvd_status_t st = hvd__svc_client_open(p->addr, p->port, p->secret, deadline, &c);
        int connected = st == HVD_OK;
        if (st == HVD_OK)
            st = hvd__svc_client_ping(c, deadline, name, source);
        hvd__svc_client_close(c);
        p->cause = HVD_DISC_CAUSE_OTHER;
        if (st == HVD_OK) {
            if (strcmp(name, p->expect_name) != 0) {
                snprintf(p->why, sizeof p->why, "answered by '%s', not the %s", name,
                         p->expect_name);
                return NULL;
            }
            if (p->key && !source_matches(p, source)) {
                snprintf(p->why, sizeof p->why,
                         "reached from %s, which is not this host's address on %s", source, p->key);
                return NULL;
            }
            p->ok = 1;
            return NULL;
        }
        snprintf(p->why, sizeof p->why, "%s", hvd_last_error());
        p->cause = hvd__disc_cause_of(st, connected, p->why);
        /* Only a refused or reset connection is worth another try (a busy listener); a
         * wrong answer will not change, and an address that swallowed a connection attempt
         * for PROBE_CONNECT_MS is a black hole that would only delay the whole ring. Nor is a
         * loopback address: every service listens before its address is handed out, so a
         * refusal there means the service is on another host (another host's 127.0.0.1, or
         * the driver's, seen from a remote task), and retrying it held every launch's
         * discovery 0.4 s at registration and 0.6 s at the ring's probes. */
        if (st != HVD_ERR_PEER_LOST || strncmp(p->addr, "127.", 4) == 0 ||
            hvd__clock_now_ms() + PROBE_RETRY_MS >= p->deadline_ms)
            return NULL;
        hvd__clock_sleep_ms(PROBE_RETRY_MS);
    }
    return NULL;
}

/* Run the n probes in parallel and wait for all of them (each is bounded by its deadline). */
static void probe_all(probe_t *probes, size_t n) {
    for (size_t i = 0; i < n; i++)
        probes[i].started = pthread_create(&probes[i].thread, NULL, probe_main, &probes[i]) == 0;
    for (size_t i = 0; i < n; i++) {
        if (probes[i].started)
            pthread_join(probes[i].thread, NULL);
        else
            probe_main(&probes[i]); /* no thread: probe it here, in turn */
    }
}

/* Append "what (why)" entries of failed probes to out. */
static void describe_failures(const probe_t *probes, size_t n, char *out, size_t size) {
    size_t used = strlen(out);
    for (size_t i = 0; i < n && used < size; i++) {
        int w = snprintf(out + used, size - used, "%s%s%s%s:%d (%s)", i ? "; " : "",
                         probes[i].iface ? probes[i].iface : "", probes[i].iface ? " " : "",
                         probes[i].addr, probes[i].port, probes[i].why);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* --- the task ----------------------------------------------------------------------------- */

typedef struct {
    hvd_disc_input_t in;
    hvd_nic_filter_t filter;
    int64_t deadline_ms;
    int launcher_fd;  /* our input from the launcher (its end means the launcher is gone), or -1 */
    hvd_netif_t *own; /* every IPv4 address of this host */
    size_t own_count;
    const char *driver_addr; /* the one registered through */
    hvd_svc_client_t *driver;
    uint8_t *resp; /* HVD_SVC_MAX_BODY bytes */
} task_t;

/* One request to the driver, reconnecting after a lost connection until the deadline (every
 * request is idempotent). */
static hvd_status_t driver_call(task_t *t, uint16_t type, const uint8_t *body, size_t len,
                                uint16_t *rt, size_t *rlen) {
    for (;;) {
        hvd_status_t st = HVD_OK;
        if (!t->driver)
            st = hvd__svc_client_open(t->driver_addr, t->in.driver_port, &t->in.secret,
                                      t->deadline_ms, &t->driver);
        if (st == HVD_OK) {
            st = hvd__svc_client_call(t->driver, type, body, len, t->deadline_ms, rt, t->resp,
                                      HVD_SVC_MAX_BODY, rlen);
            if (st == HVD_OK)
                return HVD_OK;
            hvd__svc_client_close(t->driver);
            t->driver = NULL;
        }
        if ((st != HVD_ERR_PEER_LOST && st != HVD_ERR_IO) ||
            hvd__clock_now_ms() + POLL_MS >= t->deadline_ms)
            return hvd__error_wrap(st, "driver service at %s:%u", t->driver_addr,
                                   t->in.driver_port);
        hvd__clock_sleep_ms(POLL_MS);
    }
}

/* Put what timed out in front of the cause, if there is one ("" after a poll loop ran out). */
static hvd_status_t wrap_timeout(hvd_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static hvd_status_t wrap_timeout(hvd_status_t st, const char *fmt, ...) {
    char what[HVD_DISC_HOST_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (hvd_last_error()[0])
        return hvd__error_wrap(st, "%s", what);
    return hvd__error_set(st, "%s", what);
}

/* Probe every driver address; register through the first (in the driver's order) that
 * answered. */
static hvd_status_t register_with_driver(task_t *t, int port, const hvd_disc_addrs_t *mine) {
    size_t n = t->in.driver_addr_count;
    probe_t *probes = calloc(n, sizeof *probes);
    hvd_disc_register_t *reg = calloc(1, sizeof *reg);
    hvd_status_t st = HVD_OK;
    if (!probes || !reg) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    /* The network check wants its answer in seconds, and a dead link to the driver would
     * hold every probe behind it: a first pass gives each address REGISTER_QUICK_MS (a live
     * one answers in milliseconds), and only when none answered does a second pass wait
     * CHECK_CONNECT_MS. Discovery waits as before: it reports every address it reached. */
    int mesh = (t->in.flags & HVD_DISC_FLAG_MESH) != 0, reached = 0;
    for (int pass = mesh ? 0 : 1; pass < 2 && !reached; pass++) {
        for (size_t i = 0; i < n; i++) {
            probes[i] = (probe_t){.addr = t->in.driver_addrs[i],
                                  .port = t->in.driver_port,
                                  .expect_name = HVD_DISC_DRIVER_NAME,
                                  .secret = &t->in.secret,
                                  .deadline_ms = t->deadline_ms,
                                  .connect_ms = !mesh       ? 0
                                                : pass == 0 ? REGISTER_QUICK_MS
                                                            : CHECK_CONNECT_MS};
        }
        probe_all(probes, n);
        for (size_t i = 0; i < n; i++)
            reached |= probes[i].ok;
    }
    for (size_t i = 0; i < n; i++) {
        if (!probes[i].ok)
            continue;
        if (!t->driver_addr)
            t->driver_addr = t->in.driver_addrs[i];
        snprintf(reg->reached[reg->reached_count++], sizeof reg->reached[0], "%s",
                 t->in.driver_addrs[i]);
    }
    if (!t->driver_addr) {
        char why[900] = "";
        describe_failures(probes, n, why, sizeof why);
        st = hvd__error_set(HVD_ERR_PEER_LOST,
                            "could not reach the driver service (horovodrun's host) on any of "
                            "its addresses: %s",
                            why);
        goto out;
    }
    reg->index = t->in.index;
    snprintf(reg->host, sizeof reg->host, "%s", t->in.host);
    st = hvd__host_hash(NULL, reg->host_hash, sizeof reg->host_hash);
    if (st != HVD_OK)
        goto out;
    reg->port = (uint16_t)port;
    reg->addrs = *mine;
    size_t len = 0;
    uint16_t rt = 0;
    size_t rlen = 0;
    uint8_t *body = malloc(HVD_SVC_MAX_BODY);
    if (!body) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    st = hvd__disc_register_encode(reg, body, HVD_SVC_MAX_BODY, &len);
    if (st == HVD_OK)
        st = driver_call(t, HVD_DISC_REGISTER, body, len, &rt, &rlen);
    free(body);
    if (st == HVD_OK && rt != HVD_SVC_ACK)
        st = hvd__error_set(HVD_ERR_PROTOCOL, "the driver answered REGISTER with type %u", rt);
out:
    free(reg);
    free(probes);
    return st;
}

/* Between two polls of the driver: sleep, or HVD_ERR_TIMEOUT (error cleared, for the caller
 * to name what it waited for) when the next poll would pass the deadline. */
static hvd_status_t poll_pause(const task_t *t) {
    if (hvd__clock_now_ms() + POLL_MS >= t->deadline_ms) {
        hvd__error_clear();
        return hvd__error_pass(HVD_ERR_TIMEOUT);
    }
    if (t->launcher_fd < 0) {
        hvd__clock_sleep_ms(POLL_MS);
        return HVD_OK;
    }
    /* Sleep watching the input for its end (without reading it: what comes on it after the
     * blob is the launch's spec): a launcher that gave up, or died, ends us now rather than
     * at the deadline. */
    struct pollfd p = {.fd = t->launcher_fd, .events = POLLRDHUP};
    if (poll(&p, 1, POLL_MS) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
        return hvd__error_set(HVD_ERR_PEER_LOST, "the launcher is gone (this task's input ended)");
    return HVD_OK;
}

/* Poll the driver until task j has registered. */
static hvd_status_t get_successor(task_t *t, uint32_t j, hvd_disc_task_info_t *info) {
    uint8_t body[16];
    size_t len = 0;
    char host[HVD_DISC_HOST_MAX] = "?"; /* named by the driver's NOT_YET answers */
    hvd_status_t st = hvd__disc_get_task_encode(t->in.index, j, body, sizeof body, &len);
    while (st == HVD_OK) {
        uint16_t rt = 0;
        size_t rlen = 0;
        st = driver_call(t, HVD_DISC_GET_TASK, body, len, &rt, &rlen);
        if (st != HVD_OK)
            break;
        if (rt == HVD_DISC_TASK_INFO)
            return hvd__disc_task_info_decode(t->resp, rlen, info);
        if (rt != HVD_DISC_NOT_YET)
            return hvd__error_set(HVD_ERR_PROTOCOL, "the driver answered GET_TASK with type %u",
                                  rt);
        hvd_svc_dec_t d;
        hvd__svc_dec_init(&d, t->resp, rlen, "NOT_YET");
        if (hvd__svc_dec_str(&d, "host", info->host, sizeof info->host) == HVD_OK)
            memcpy(host, info->host, sizeof host);
        st = poll_pause(t);
    }
    /* The deadline may pass inside a call (the call's error follows) as well as between
     * calls: either way, say whom this task was waiting for. */
    if (st == HVD_ERR_TIMEOUT)
        return wrap_timeout(st,
                            "timed out after %u seconds waiting for host %s (index %u) to "
                            "register with the driver (its task service did not start, or "
                            "cannot reach the driver)",
                            t->in.timeout_s + BACKSTOP_S, host, j);
    return st;
}

/* Probe every address of the successor with interface matching; fill reached. */
static hvd_status_t probe_successor(task_t *t, const hvd_disc_task_info_t *info,
                                    hvd_disc_addrs_t *reached, char *why, size_t why_size) {
    size_t n = info->addrs.count;
    char expect[HVD_SVC_NAME_MAX];
    snprintf(expect, sizeof expect, "%s #%u", HVD_DISC_TASK_NAME, info->index);
    probe_t *probes = calloc(n ? n : 1, sizeof *probes);
    if (!probes)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const hvd_netif_t *a = &info->addrs.items[i];
        probe_t *p = &probes[i];
        p->iface = a->name;
        p->addr = a->addr;
        p->port = info->port;
        p->expect_name = expect;
        p->key = hvd__nic_filter_key(&t->filter, a->name, a->addr);
        if (!p->key)
            p->key = a->name; /* the successor's filter let it through: compare names */
        p->filter = &t->filter;
        p->own = t->own;
        p->own_count = t->own_count;
        p->secret = &t->in.secret;
        p->deadline_ms = t->deadline_ms;
    }
    probe_all(probes, n);
    memset(reached, 0, sizeof *reached);
    for (size_t i = 0; i < n; i++)
        if (probes[i].ok)
            reached->items[reached->count++] = info->addrs.items[i];
    why[0] = '\0';
    describe_failures(probes, n, why, why_size);
    free(probes);
    return HVD_OK;
}

static hvd_status_t send_report(task_t *t, const hvd_disc_report_t *r) {
    uint8_t *body = malloc(HVD_SVC_MAX_BODY);
    if (!body)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    size_t len = 0, rlen = 0;
    uint16_t rt = 0;
    hvd_status_t st = hvd__disc_report_encode(r, body, HVD_SVC_MAX_BODY, &len);
    if (st == HVD_OK)
        st = driver_call(t, HVD_DISC_REPORT, body, len, &rt, &rlen);
    free(body);
    return st;
}

/* Poll the driver until every task has reported. */
static hvd_status_t wait_done(task_t *t) {
    uint8_t body[16];
    size_t len = 0, rlen = 0;
    uint16_t rt = 0;
    hvd_status_t st = hvd__disc_index_encode(t->in.index, body, sizeof body, &len);
    while (st == HVD_OK) {
        st = driver_call(t, HVD_DISC_WAIT_DONE, body, len, &rt, &rlen);
        if (st != HVD_OK || rt == HVD_DISC_DONE)
            break;
        if (rt != HVD_DISC_NOT_YET) {
            st = hvd__error_set(HVD_ERR_PROTOCOL, "the driver answered WAIT_DONE with type %u", rt);
            break;
        }
        st = poll_pause(t);
    }
    if (st == HVD_ERR_TIMEOUT)
        wrap_timeout(st,
                     "timed out after %u seconds waiting for the other hosts to finish "
                     "probing (the driver has not received every report)",
                     t->in.timeout_s + BACKSTOP_S);
    return st;
}

static hvd_status_t report_and_wait(task_t *t, uint32_t j, const hvd_disc_addrs_t *reached) {
    hvd_disc_report_t *r = calloc(1, sizeof *r);
    if (!r)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    r->from = t->in.index;
    r->to = j;
    r->reached = *reached;
    hvd_status_t st = send_report(t, r);
    free(r);
    return st == HVD_OK ? wait_done(t) : st;
}

/* The network check (HVD_DISC_FLAG_MESH): probe every other task on each of its addresses,
 * all at once, each attempt bounded by CHECK_CONNECT_MS, and report every link, each failed
 * address with its cause; the driver prints the matrix. Loopback addresses are left out. */
static hvd_status_t probe_every_peer(task_t *t) {
    uint32_t n = t->in.n, me = t->in.index;
    hvd_disc_task_info_t *infos = calloc(n, sizeof *infos);
    char(*expect)[HVD_SVC_NAME_MAX] = calloc(n, sizeof *expect);
    probe_t *probes = calloc((size_t)n * HVD_DISC_MAX_ADDRS, sizeof *probes);
    uint32_t *peer = calloc((size_t)n * HVD_DISC_MAX_ADDRS, sizeof *peer);
    hvd_disc_report_t *r = calloc(1, sizeof *r);
    hvd_status_t st = infos && expect && probes && peer && r
                          ? HVD_OK
                          : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    size_t total = 0;
    for (uint32_t j = 0; j < n && st == HVD_OK; j++) {
        if (j == me)
            continue;
        st = get_successor(t, j, &infos[j]);
        snprintf(expect[j], sizeof expect[j], "%s #%u", HVD_DISC_TASK_NAME, j);
        for (size_t k = 0; k < infos[j].addrs.count && st == HVD_OK; k++) {
            const hvd_netif_t *a = &infos[j].addrs.items[k];
            if (strncmp(a->addr, "127.", 4) == 0)
                continue; /* (a loopback address never links two hosts) */
            probe_t *p = &probes[total];
            p->iface = a->name;
            p->addr = a->addr;
            p->port = infos[j].port;
            p->expect_name = expect[j];
            p->secret = &t->in.secret;
            p->deadline_ms = t->deadline_ms;
            p->connect_ms = CHECK_CONNECT_MS;
            peer[total++] = j;
        }
    }
    if (st == HVD_OK)
        probe_all(probes, total);
    for (uint32_t j = 0; j < n && st == HVD_OK; j++) {
        if (j == me)
            continue;
        memset(r, 0, sizeof *r);
        r->from = me;
        r->to = j;
        for (size_t i = 0; i < total; i++) {
            if (peer[i] != j)
                continue;
            hvd_netif_t where = {0};
            snprintf(where.name, sizeof where.name, "%s", probes[i].iface);
            snprintf(where.addr, sizeof where.addr, "%s", probes[i].addr);
            if (probes[i].ok) {
                r->reached.items[r->reached.count++] = where;
            } else {
                hvd_disc_failure_t *f = &r->failed[r->failed_count++];
                f->where = where;
                f->cause = probes[i].cause;
                snprintf(f->detail, sizeof f->detail, "%s", probes[i].why);
            }
        }
        st = send_report(t, r);
    }
    if (st == HVD_OK)
        st = wait_done(t);
    free(r);
    free(peer);
    free(probes);
    free(expect);
    free(infos);
    return st;
}

static void list_own(const task_t *t, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < t->own_count && used < size; i++) {
        int w = snprintf(out + used, size - used, "%s%s %s", i ? ", " : "", t->own[i].name,
                         t->own[i].addr);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static hvd_status_t run_task(task_t *t) {
    const char *items[HVD_NIC_FILTER_MAX];
    for (size_t i = 0; i < t->in.nic_count; i++)
        items[i] = t->in.nics[i];
    hvd_status_t st = hvd__nic_filter_parse(items, t->in.nic_count, &t->filter);
    if (st != HVD_OK)
        return st;
    st = hvd__netif_list(&t->own, &t->own_count);
    if (st != HVD_OK)
        return st;
    hvd_disc_addrs_t *mine = calloc(1, sizeof *mine);
    hvd_disc_task_info_t *info = calloc(1, sizeof *info);
    hvd_disc_addrs_t *reached = calloc(1, sizeof *reached);
    if (!mine || !info || !reached) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        goto out_free;
    }
    for (size_t i = 0; i < t->own_count && mine->count < HVD_DISC_MAX_ADDRS; i++)
        if (hvd__nic_filter_key(&t->filter, t->own[i].name, t->own[i].addr))
            mine->items[mine->count++] = t->own[i];

    char name[HVD_SVC_NAME_MAX];
    snprintf(name, sizeof name, "%s #%u", HVD_DISC_TASK_NAME, t->in.index);
    hvd_svc_server_config_t sc = {.name = name, .secret = &t->in.secret};
    hvd_svc_server_t *server = NULL;
    st = hvd__svc_server_start(&sc, &server);
    if (st != HVD_OK)
        goto out_free;

    /* From here on the service runs until the driver says every report is in (or the
     * deadline): even when this host has nothing to offer, its predecessor's probe and the
     * driver's matrix are more useful than an early exit. */
    uint32_t j = (t->in.index + 1) % t->in.n;
    char why[900] = "";
    st = register_with_driver(t, hvd__svc_server_port(server), mine);
    if (st == HVD_OK && (t->in.flags & HVD_DISC_FLAG_MESH)) {
        /* (what this host reached is the driver's to judge: the matrix) */
        st = probe_every_peer(t);
        hvd__svc_server_stop(server);
        goto out_free;
    }
    if (st == HVD_OK)
        st = get_successor(t, j, info);
    if (st == HVD_OK)
        st = probe_successor(t, info, reached, why, sizeof why);
    if (st == HVD_OK)
        st = report_and_wait(t, j, reached);
    hvd__svc_server_stop(server);
    if (st != HVD_OK)
        goto out_free;

    char filter[256], own[600];
    if (mine->count == 0) {
        hvd__nic_filter_format(&t->filter, filter, sizeof filter);
        list_own(t, own, sizeof own);
        st = hvd__error_set(HVD_ERR_NOT_FOUND,
                            "no network interface of this host passes the interface filter %s "
                            "(its interfaces: %s)",
                            filter, own);
    } else if (reached->count == 0) {
        st = hvd__error_set(HVD_ERR_NOT_FOUND,
                            "could not reach the task service of host %s (index %u) on any of its "
                            "addresses: %s",
                            info->host, info->index, info->addrs.count ? why : "it has none");
    }
out_free:
    free(reached);
    free(info);
    free(mine);
    return st;
}

static hvd_status_t run_blob(const uint8_t *buf, size_t len, int launcher_fd) {
    size_t body_len = 0;
    if (len < HVD_DISC_INPUT_HEAD_LEN)
        return hvd__error_set(HVD_ERR_PROTOCOL, "the task input is truncated (%zu bytes)", len);
    hvd_status_t st = hvd__disc_input_head_decode(buf, &body_len);
    if (st == HVD_OK && body_len != len - HVD_DISC_INPUT_HEAD_LEN)
        st = hvd__error_set(HVD_ERR_PROTOCOL, "the task input holds %zu bytes, its header says %zu",
                            len - HVD_DISC_INPUT_HEAD_LEN, body_len);
    if (st != HVD_OK)
        return st;
    task_t *t = calloc(1, sizeof *t);
    if (!t)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    st = hvd__disc_input_body_decode(buf + HVD_DISC_INPUT_HEAD_LEN, body_len, &t->in);
    if (st == HVD_OK) {
        t->deadline_ms = hvd__clock_deadline_ms(((int64_t)t->in.timeout_s + BACKSTOP_S) * 1000);
        t->launcher_fd = launcher_fd;
        t->resp = malloc(HVD_SVC_MAX_BODY);
        st = t->resp ? run_task(t) : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        if (st != HVD_OK)
            hvd__error_wrap(st, "task service of host %s (index %u)", t->in.host, t->in.index);
    }
    hvd__svc_client_close(t->driver);
    free(t->resp);
    free(t->own);
    explicit_bzero(t, sizeof *t);
    free(t);
    return st;
}

hvd_status_t hvd__task_service_run(const uint8_t *buf, size_t len) {
    return run_blob(buf, len, -1);
}

/* Read exactly len bytes from fd before deadline. */
static hvd_status_t read_input(int fd, uint8_t *buf, size_t len, int64_t deadline_ms) {
    size_t have = 0;
    while (have < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, hvd__clock_remaining_ms(deadline_ms));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return hvd__error_set(HVD_ERR_IO, "poll on stdin: %s", strerror(errno));
        if (r == 0)
            return hvd__error_set(HVD_ERR_TIMEOUT,
                                  "timed out after %d seconds waiting for the task input on stdin "
                                  "(got %zu of %zu bytes)",
                                  HVD_TASK_INPUT_TIMEOUT_S, have, len);
        ssize_t n = read(fd, buf + have, len - have);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return hvd__error_set(HVD_ERR_IO, "cannot read the task input: %s", strerror(errno));
        if (n == 0)
            return hvd__error_set(HVD_ERR_PROTOCOL,
                                  "stdin ended after %zu of %zu bytes of the task input (this "
                                  "program is started by horovodrun, which writes it there)",
                                  have, len);
        have += (size_t)n;
    }
    return HVD_OK;
}

int hvd__task_service_main(void) {
    int64_t deadline = hvd__clock_deadline_ms((int64_t)HVD_TASK_INPUT_TIMEOUT_S * 1000);
    uint8_t *buf = malloc(HVD_DISC_INPUT_HEAD_LEN + HVD_DISC_INPUT_MAX_BODY);
    size_t body = 0;
    hvd_status_t st = buf ? HVD_OK : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    if (st == HVD_OK)
        st = read_input(STDIN_FILENO, buf, HVD_DISC_INPUT_HEAD_LEN, deadline);
    if (st == HVD_OK)
        st = hvd__disc_input_head_decode(buf, &body);
    if (st == HVD_OK)
        st = read_input(STDIN_FILENO, buf + HVD_DISC_INPUT_HEAD_LEN, body, deadline);
    if (st == HVD_OK)
        st = run_blob(buf, HVD_DISC_INPUT_HEAD_LEN + body, STDIN_FILENO);
    hvd__disc_input_free(buf, HVD_DISC_INPUT_HEAD_LEN + HVD_DISC_INPUT_MAX_BODY);
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun --internal-task-service: %s\n", hvd_last_error());
        return 1;
    }
    /* Discovery is done. The launcher may now send the spec of this host's ranks on the same
     * input: the ssh session that carried discovery carries the ranks too (one session per
     * host). If it sends nothing, the end of the input ends us quietly. */
    return hvd__remote_exec_main();
}
