/* The check-in; see check_in.h.
 *
 * Both ways put this rank's record ("host=h pid=p addr=a port=n local_rank=l cross_rank=c
 * machine=m") into the scope of this init generation (init.<g>, or the elastic round's),
 * which is new for each generation so that a rank re-initialising early can never disturb a
 * slower rank still reading the previous one. The planned check-in first puts it into its
 * machine's scope (init.<g>.m.<boot id>), then waits for the count of init.<g> alone: once
 * that is complete, every machine scope is too (each rank fills its machine's before the
 * job's), and this rank counts its machine's: how many ranks share this machine's cores
 * whatever their host names. Five requests a rank, none of them O(ranks) bytes: every
 * address, this host's ranks' too, is read when the rank first connects to its owner. */
#include "core/check_in.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "core/context.h"
#include "core/elastic_rendezvous.h"
#include "core/pmix_exchange.h"
#include "core/store_exchange.h"
#include "os/hostinfo.h"
#include "os/proc_activity.h"
#include "rendezvous/elastic_msg.h"
#include "rendezvous/kv_protocol.h"
#include "rendezvous/rank_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Single-record reads of the resolver before it reads the whole scope instead. */
#define LOOKUPS_BEFORE_SCOPE 32

/* Name up to a few ranks missing from a check-in scope, for the timeout message. */
static void describe_missing(const hvd_store_scope_t *s, int size, char *out, size_t out_size) {
    size_t n = 0;
    int missing = 0, listed = 0;
    out[0] = '\0';
    for (int r = 0; r < size; r++) {
        char key[32];
        snprintf(key, sizeof key, "rank_%d", r);
        if (hvd__store_scope_find(s, key))
            continue;
        missing++;
        if (listed < 16 && n < out_size) {
            int w = snprintf(out + n, out_size - n, "%s%d", listed ? ", " : "", r);
            if (w > 0)
                n += (size_t)w;
            listed++;
        }
    }
    if (missing > listed && n < out_size)
        snprintf(out + n, out_size - n, ", ... (%d of %d missing)", missing, size);
    else if (n < out_size)
        snprintf(out + n, out_size - n, " (%d of %d missing)", missing, size);
}

/* This machine's identity for hvd_rank_info_t.machine: the kernel's boot id, or "unknown". */
static void machine_id(char *out, size_t size) {
    snprintf(out, size, "unknown");
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return;
    char buf[64];
    if (fgets(buf, sizeof buf, f) && buf[0] != '\n') {
        buf[strcspn(buf, " \n")] = '\0';
        snprintf(out, size, "%.39s", buf);
    }
    fclose(f);
}

/* "host=h pid=1 addr=a port=2 local_rank=0 cross_rank=0 machine=m" -> info. -1 when
 * malformed. */
static int parse_rank_value(const char *v, hvd_rank_info_t *info) {
    memset(info, 0, sizeof *info);
    info->local_rank = info->cross_rank = -1;
    long pid;
    if (sscanf(v, "host=%63s pid=%ld addr=%15s port=%d local_rank=%d cross_rank=%d machine=%39s",
               info->addr.host, &pid, info->addr.addr, &info->addr.port, &info->local_rank,
               &info->cross_rank, info->machine) != 7)
        return -1;
    info->pid = pid;
    /* (after the seven fields: a record of an older build has none) */
    const char *ns = strstr(v, " pid_ns=");
    info->pid_ns = ns ? strtoul(ns + 8, NULL, 10) : 0;
    return info->addr.port > 0 && info->addr.port < 65536 ? 0 : -1;
}

/* The check-in through an exchange that hands back every rank's record and rank 0's job
 * secret at once: PMIx (a plain Open MPI mpirun) or the program's store (hvd_init_store).
 * The secret from here on guards the data plane. */
static hvd_status_t check_in_exchange(hvd_context_t *c, const char *value, hvd_rank_info_t *infos) {
    const hvd_params_t *p = &c->params;
    char **records = NULL;
    hvd_secret_t secret;
    const char *via = c->ext_store ? "the store" : "PMIx";
    hvd_status_t st = c->ext_store ? hvd__store_exchange(c->ext_store, c->generation, value,
                                                         &c->secret, c->ext_publish_secret,
                                                         p->gloo_timeout_seconds, &records, &secret)
                                   : hvd__pmix_exchange(p->rank, p->size, value, &c->secret,
                                                        p->gloo_timeout_seconds, &records, &secret);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d could not meet the other ranks through %s", p->rank,
                               via);
    c->secret = secret;
    hvd__secret_wipe(&secret);
    for (int r = 0; r < p->size && st == HVD_OK; r++)
        if (parse_rank_value(records[r], &infos[r]) != 0)
            st = hvd__error_set(HVD_ERR_PROTOCOL,
                                "rank %d: the check-in record of rank %d in %s is malformed "
                                "(mixed hvd versions in one job?)",
                                p->rank, r, via);
    hvd__pmix_records_free(records, p->size);
    return st;
}

/* The launcher's word that this check-in will never complete (HVD_KV_ABORT_KEY: a rank died
 * before it checked in, or the elastic driver failed the round). */
static hvd_status_t check_abort(const hvd_context_t *c, const hvd_store_scope_t *s) {
    if (c->elastic)
        return hvd__elastic_rdv_check_abort(s, c->round);
    const hvd_store_entry_t *e = hvd__store_scope_find(s, HVD_KV_ABORT_KEY);
    if (!e)
        return HVD_OK;
    char text[HVD_ELASTIC_VALUE_MAX + 1];
    hvd__elastic_msg_printable((const char *)e->value, e->value_len, text, sizeof text);
    return hvd__error_set(HVD_ERR_PEER_LOST, "the job failed before every rank checked in: %s",
                          text);
}

/* The check-in wait. The timeout counts from the latest check-in, not from this rank's own,
 * so that a launcher still starting ranks (a thousand on one host, or an elastic driver
 * starting 512 workers, take longer than the timeout) never fails the early ones while
 * check-ins keep arriving: one long poll per timeout, and when it ends short, the store's age
 * of the scope says when the latest rank arrived, and the rank gives up a timeout after that
 * (or polls on until then). The launcher's abort key (a rank died before it checked in, or
 * the elastic driver failed the round before it formed, init.r<R>/abort) ends the wait at
 * once: the store answers held polls when it appears. A poll the store left unanswered (a
 * store busy with a thousand clients) is asked again, with one more timeout of grace. (The
 * elastic check-in polled every second to see the abort key; 512 workers re-reading the
 * whole scope every second starved their heartbeats.) count_only: the wait of the planned
 * check-in, answered with the count alone. */
static hvd_status_t wait_check_in(hvd_context_t *c, const char *scope, int count_only,
                                  int timeout_ms, hvd_store_scope_t *scope_p) {
    size_t size = (size_t)c->params.size, seen = 0;
    int64_t deadline = hvd__clock_deadline_ms(timeout_ms), give_up = deadline + timeout_ms;
    for (;;) {
        hvd_store_scope_t s = {0};
        /* short of the count, the scope comes back as it is with HVD_ERR_TIMEOUT */
        hvd_status_t st = count_only ? hvd__store_count_scope(c->store, scope, size, deadline, &s)
                                     : hvd__store_get_scope(c->store, scope, size, deadline, &s);
        if (st == HVD_ERR_TIMEOUT && !s.entries && hvd__clock_remaining_ms(give_up) > 0) {
            HVD_LOG_D("rank %d: check-in poll unanswered (%s); asking again", c->params.rank,
                      hvd_last_error());
            if (hvd__clock_remaining_ms(deadline) == 0)
                deadline = give_up;
            continue;
        }
        if (st != HVD_OK && !(st == HVD_ERR_TIMEOUT && s.entries))
            return st;
        if ((st = check_abort(c, &s)) != HVD_OK) {
            hvd__store_scope_fini(&s);
            return st;
        }
        if (s.total >= size) {
            *scope_p = s;
            return HVD_OK;
        }
        if (s.age_ms >= 0) {
            /* the store says when the latest rank arrived: give up a timeout after that */
            int64_t now = hvd__clock_now_ms(), after_last = now - s.age_ms + timeout_ms;
            if (after_last <= now) {
                *scope_p = s;
                return hvd__error_pass(HVD_ERR_TIMEOUT);
            }
            deadline = after_last;
            give_up = deadline + timeout_ms;
        } else if (s.total > seen && hvd__clock_remaining_ms(deadline) == 0) {
            /* a store that does not say its age: the ranks that came meanwhile buy another
             * timeout */
            seen = s.total;
            deadline = hvd__clock_deadline_ms(timeout_ms);
            give_up = deadline + timeout_ms;
        } else if (hvd__clock_remaining_ms(deadline) == 0) {
            *scope_p = s;
            return hvd__error_pass(HVD_ERR_TIMEOUT);
        }
        hvd__store_scope_fini(&s);
    }
}

/* The timeout's message, naming (up to a few of) the ranks that never checked in. */
static hvd_status_t timed_out(hvd_context_t *c, const char *scope, const hvd_store_scope_t *s) {
    const hvd_params_t *p = &c->params;
    char missing[256];
    describe_missing(s, p->size, missing, sizeof missing);
    return hvd__error_set(HVD_ERR_TIMEOUT,
                          "rank %d: rendezvous timed out: no rank checked in for at least %d s "
                          "and ranks %s never did at %s/ of %s:%d; raise "
                          "HOROVOD_GLOO_TIMEOUT_SECONDS if they are slow to start",
                          p->rank, p->gloo_timeout_seconds, missing, scope, p->rendezvous_addr,
                          p->rendezvous_port);
}

/* Every record of scope into infos (size of them). */
static hvd_status_t read_records(hvd_context_t *c, const hvd_store_scope_t *s, int size,
                                 hvd_rank_info_t *infos) {
    char key[32];
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "rank_%d", r);
        const hvd_store_entry_t *e = hvd__store_scope_find(s, key);
        if (!e || parse_rank_value((const char *)e->value, &infos[r]) != 0)
            return hvd__error_set(HVD_ERR_PROTOCOL,
                                  "rank %d: the rendezvous entry of rank %d is missing or "
                                  "malformed (mixed hvd versions in one job?)",
                                  c->params.rank, r);
    }
    return HVD_OK;
}

/* Put this rank's record (value, n bytes) under scope/rank_<r>. */
static hvd_status_t put_record(hvd_context_t *c, const char *scope, const char *value, size_t n) {
    const hvd_params_t *p = &c->params;
    char key[32];
    snprintf(key, sizeof key, "rank_%d", p->rank);
    int64_t deadline = hvd__clock_deadline_ms((int64_t)p->gloo_timeout_seconds * 1000);
    hvd_status_t st = hvd__store_put(c->store, scope, key, value, n, deadline);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d could not check in with the rendezvous store at %s:%d",
                               p->rank, p->rendezvous_addr, p->rendezvous_port);
    return HVD_OK;
}

/* The wait for every rank of scope; on a timeout the message names who is missing (the
 * count-only wait reads the scope once more for that). */
static hvd_status_t wait_all(hvd_context_t *c, const char *scope, int count_only,
                             hvd_store_scope_t *s) {
    const hvd_params_t *p = &c->params;
    hvd_status_t st = wait_check_in(c, scope, count_only, p->gloo_timeout_seconds * 1000, s);
    if (st == HVD_ERR_TIMEOUT && s->entries) {
        if (count_only) { /* the records, to name who is missing */
            hvd__store_scope_fini(s);
            if (hvd__store_get_scope(c->store, scope, 0, hvd__clock_deadline_ms(5000), s) !=
                HVD_OK) {
                hvd__error_clear();
                *s = (hvd_store_scope_t){0};
            }
        }
        st = timed_out(c, scope, s);
        hvd__store_scope_fini(s);
        return st;
    }
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d could not complete the rendezvous", p->rank);
    return HVD_OK;
}

/* Every rank reads every record. */
static hvd_status_t check_in_all(hvd_context_t *c, const char *scope, const char *value, size_t n,
                                 hvd_rank_info_t *infos) {
    hvd_status_t st = put_record(c, scope, value, n);
    hvd_store_scope_t s = {0};
    if (st == HVD_OK)
        st = wait_all(c, scope, 0, &s);
    if (st == HVD_OK) {
        st = read_records(c, &s, c->params.size, infos);
        hvd__store_scope_fini(&s);
    }
    return st;
}

/* The launcher's plan, when it published one that gives this rank the place its environment
 * gives it: the places of every rank in *places_p (malloc'd) and the plan. HVD_ERR_NOT_FOUND
 * (error cleared) when there is none or it does not fit: the caller reads every record. */
static hvd_status_t read_plan(hvd_context_t *c, hvd_rank_plan_t *plan,
                              hvd_rank_place_t **places_p) {
    const hvd_params_t *p = &c->params;
    uint8_t *text = NULL;
    size_t len = 0;
    int64_t deadline = hvd__clock_deadline_ms((int64_t)p->gloo_timeout_seconds * 1000);
    hvd_status_t st = hvd__store_get(c->store, HVD_RANK_PLAN_SCOPE, HVD_RANK_PLAN_STATIC_KEY, 0,
                                     deadline, &text, &len);
    if (st == HVD_ERR_NOT_FOUND) {
        hvd__error_clear();
        return hvd__error_pass(HVD_ERR_NOT_FOUND);
    }
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d could not read the launcher's plan from %s:%d", p->rank,
                               p->rendezvous_addr, p->rendezvous_port);
    st = hvd__rank_plan_decode((const char *)text, len, plan);
    free(text);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d: the launcher's plan in the rendezvous store", p->rank);
    hvd_rank_place_t *places = NULL;
    if (plan->size == p->size && (places = calloc((size_t)p->size, sizeof *places)) &&
        hvd__rank_plan_places(plan, places) == HVD_OK) {
        const hvd_rank_place_t *me = &places[p->rank];
        if (me->local_rank == p->local_rank && me->local_size == p->local_size &&
            me->cross_rank == p->cross_rank && me->cross_size == p->cross_size &&
            strcmp(plan->hosts[me->host], p->hostname) == 0) {
            *places_p = places;
            return HVD_OK;
        }
    }
    HVD_LOG_D("rank %d: the launcher's plan does not give this rank its environment's place; "
              "reading every rank's record",
              p->rank);
    free(places);
    hvd__rank_plan_fini(plan);
    hvd__error_clear();
    return hvd__error_pass(HVD_ERR_NOT_FOUND);
}

/* The planned check-in (the file's comment). */
static hvd_status_t check_in_planned(hvd_context_t *c, const char *scope, const char *value,
                                     size_t n, const char *machine, const hvd_rank_plan_t *plan,
                                     const hvd_rank_place_t *places, hvd_rank_info_t *infos,
                                     int *on_machine_p) {
    const hvd_params_t *p = &c->params;
    char machine_scope[HVD_ELASTIC_NAME_MAX + 48];
    snprintf(machine_scope, sizeof machine_scope, "%s.m.%s", scope, machine);
    hvd_status_t st = put_record(c, machine_scope, value, n);
    if (st == HVD_OK)
        st = put_record(c, scope, value, n);
    hvd_store_scope_t s = {0};
    if (st == HVD_OK)
        st = wait_all(c, scope, 1, &s);
    if (st != HVD_OK)
        return st;
    hvd__store_scope_fini(&s);
    /* complete already: every rank put its machine's record before the job's. Its count
     * alone: a rank learns a peer's address when it first connects to it, this host's
     * ranks included (2,048 ranks on one host reading each other's records moved 600 MB
     * through the launcher's store, and ranks timed out waiting for it). */
    size_t host = places[p->rank].host;
    if (plan->slots[host] > hvd__hostinfo_cpus()) {
        /* This host alone has more ranks than the machine has cores, which is all the count
         * is for (init.c): not asked. (At 2,048 ranks on 2 cores the launcher, a process
         * among thousands runnable, needed more than the timeout to answer them all.) */
        s.total = (size_t)plan->slots[host];
    } else {
        int64_t deadline = hvd__clock_deadline_ms((int64_t)p->gloo_timeout_seconds * 1000);
        st = hvd__store_count_scope(c->store, machine_scope, (size_t)plan->slots[host], deadline,
                                    &s);
        if (st != HVD_OK)
            return hvd__error_wrap(st, "rank %d could not count its machine's check-ins", p->rank);
    }
    for (int r = 0; r < p->size; r++) {
        hvd_rank_info_t *in = &infos[r];
        memset(in, 0, sizeof *in);
        snprintf(in->addr.host, sizeof in->addr.host, "%s", plan->hosts[places[r].host]);
        in->local_rank = places[r].local_rank;
        in->cross_rank = places[r].cross_rank;
    }
    *on_machine_p = (int)s.total;
    hvd__store_scope_fini(&s);
    return HVD_OK;
}

hvd_status_t hvd__check_in(hvd_context_t *c, const char *addr, int port, hvd_rank_info_t *infos,
                           int *on_machine_p, int *lazy_p) {
    const hvd_params_t *p = &c->params;
    char scope[HVD_ELASTIC_NAME_MAX], value[512], machine[40];
    if (c->elastic)
        hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_INIT, c->round, scope);
    else
        snprintf(scope, sizeof scope, "init.%u", c->generation);
    machine_id(machine, sizeof machine);
    snprintf(c->check_in.machine, sizeof c->check_in.machine, "%s", machine);
    c->check_in.pid_ns = hvd__proc_pid_ns();
    int n = snprintf(value, sizeof value,
                     "host=%s pid=%ld addr=%s port=%d local_rank=%d cross_rank=%d machine=%s "
                     "pid_ns=%lu",
                     p->hostname, (long)getpid(), addr, port, p->local_rank, p->cross_rank, machine,
                     c->check_in.pid_ns);
    *lazy_p = 0;
    c->check_in.scope[0] = '\0';
    c->check_in.lookups = c->check_in.scanned = 0;
    hvd_status_t st;
    hvd_rank_plan_t plan = {0};
    hvd_rank_place_t *places = NULL;
    int planned = 0;
    if (!c->store) {
        st = check_in_exchange(c, value, infos);
    } else {
        st = !c->elastic && p->size > p->check_in_all_max ? read_plan(c, &plan, &places)
                                                          : HVD_ERR_NOT_FOUND;
        planned = st == HVD_OK;
        if (planned)
            st = check_in_planned(c, scope, value, (size_t)n, machine, &plan, places, infos,
                                  on_machine_p);
        else if (st == HVD_ERR_NOT_FOUND)
            st = check_in_all(c, scope, value, (size_t)n, infos);
    }
    if (st == HVD_OK && planned) {
        snprintf(c->check_in.scope, sizeof c->check_in.scope, "%s", scope);
        *lazy_p = 1;
        HVD_LOG_D("rank %d: checked in with the launcher's plan (%d ranks on %zu hosts; %d on "
                  "this machine)",
                  p->rank, p->size, plan.count, *on_machine_p);
    } else if (st == HVD_OK) {
        int on_machine = 0;
        for (int r = 0; r < p->size; r++)
            on_machine += strcmp(infos[r].machine, infos[p->rank].machine) == 0;
        *on_machine_p = on_machine;
    }
    free(places);
    hvd__rank_plan_fini(&plan);
    return st;
}

/* A record read after a planned check-in sits on the host the plan gives its rank (a rank
 * of another job or build writing into this one's scope would not). */
static int where_planned(const hvd_context_t *c, int rank, const hvd_rank_info_t *info) {
    return c->hosts && c->hosts[rank] && strcmp(info->addr.host, c->hosts[rank]) == 0;
}

hvd_status_t hvd__check_in_record(hvd_context_t *c, int rank, hvd_rank_info_t *info) {
    const hvd_params_t *p = &c->params;
    if (!c->check_in.scope[0] || !c->store)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "no check-in to read rank %d's record from",
                              rank);
    int64_t deadline = hvd__clock_deadline_ms((int64_t)p->gloo_timeout_seconds * 1000);
    char key[32];
    uint8_t *v = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "rank_%d", rank);
    hvd_status_t st = hvd__store_get(c->store, c->check_in.scope, key, 0, deadline, &v, &len);
    if (st == HVD_OK && parse_rank_value((const char *)v, info) != 0)
        st = hvd__error_set(HVD_ERR_PROTOCOL, "its check-in record is malformed");
    else if (st == HVD_OK && !where_planned(c, rank, info))
        st = hvd__error_set(HVD_ERR_PROTOCOL,
                            "its check-in record puts it on host %s, the launcher's plan on %s",
                            info->addr.host, c->hosts[rank] ? c->hosts[rank] : "?");
    free(v);
    return st;
}

hvd_status_t hvd__check_in_resolve(void *arg, int rank, hvd_tcp_peer_addr_t *addrs) {
    hvd_context_t *c = arg;
    const hvd_params_t *p = &c->params;
    const char *scope = c->check_in.scope;
    int64_t deadline = hvd__clock_deadline_ms((int64_t)p->gloo_timeout_seconds * 1000);
    hvd_rank_info_t info;
    hvd_status_t st = HVD_OK;
    if (!scope[0] || !c->store)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "rank %d: no check-in to learn rank %d's "
                              "address from",
                              p->rank, rank);
    if (!c->check_in.scanned && ++c->check_in.lookups > LOOKUPS_BEFORE_SCOPE) {
        /* a rank connecting to many peers: every record at once, once */
        hvd_store_scope_t s = {0};
        st = hvd__store_get_scope(c->store, scope, 0, deadline, &s);
        for (int r = 0; r < p->size && st == HVD_OK; r++) {
            char key[32];
            snprintf(key, sizeof key, "rank_%d", r);
            const hvd_store_entry_t *e = hvd__store_scope_find(&s, key);
            if (addrs[r].port == 0 && e && parse_rank_value((const char *)e->value, &info) == 0 &&
                where_planned(c, r, &info))
                addrs[r] = info.addr;
        }
        hvd__store_scope_fini(&s);
        c->check_in.scanned = 1; /* once: what is still unknown is read singly */
    }
    if (st == HVD_OK && addrs[rank].port == 0 &&
        (st = hvd__check_in_record(c, rank, &info)) == HVD_OK)
        addrs[rank] = info.addr;
    if (st != HVD_OK)
        return hvd__error_wrap(st,
                               "rank %d could not learn where rank %d listens from the "
                               "rendezvous store at %s:%d",
                               p->rank, rank, p->rendezvous_addr, p->rendezvous_port);
    return HVD_OK;
}
