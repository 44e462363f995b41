/* The static launch (launch.h) on workers.h. Ranks start in plan order, a remote host's ranks
 * grouped into sessions, at most 32 ssh sessions connecting at once. A rank that fails, or exits 0
 * before hvd_init, has its cause put as the abort key of the check-in scopes, so ranks waiting for
 * it fail at once. */
#include "runner/launch/launch.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "os/spawn.h"
#include "rendezvous/kv_protocol.h"
#include "runner/rendezvous/kv_store.h"
#include "runner/rendezvous/kv_server.h"
#include "runner/launch/stopped_ranks.h"
#include "runner/launch/workers.h"

#include <ctype.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Longest sleep of the event loop without events, and while ranks are being stopped. */
#define IDLE_TICK_MS 1000
#define BUSY_TICK_MS 100
/* While starting many ranks, look at events after every few, so that an early failure or a
 * signal stops the start. */
#define START_BATCH 8
/* ssh sessions connecting at once: a launch to many hosts fans out this wide. */
#define MAX_CONNECTING 32

typedef struct {
    hvd_workers_t *workers;
    size_t n;
    int stopping;      /* every rank was asked to stop */
    long first_failed; /* worker id, -1 */
    int exit_code;     /* set by the first of failure / interruption */
    int err_fd;
    hvd_kv_server_t *server;
    atomic_long latest_init; /* highest g of an init.<g> check-in seen, -1 */
    size_t exited;           /* ranks that exited with status 0 */
    hvd_stopped_ranks_t left_behind;
} job_t;

/* The store's watcher (its thread, store lock held): the latest check-in generation. */
static void on_store_put(void *arg, const char *scope, const char *key) {
    job_t *job = arg;
    char *end;
    if (strncmp(scope, "init.", 5) != 0 || !isdigit((unsigned char)scope[5]) ||
        strcmp(key, HVD_KV_ABORT_KEY) == 0) /* ours, not a check-in */
        return;
    long g = strtol(scope + 5, &end, 10);
    if (*end == '\0' && g > atomic_load(&job->latest_init))
        atomic_store(&job->latest_init, g);
}

/* Ranks still checking in wait for one that is gone: give them its cause in the generation
 * they are in (the latest one seen) and the next (ranks that re-initialise after a
 * shutdown). Without this they would wait for their rendezvous timeout. A rank that exited
 * 0 is gone too: it can join no later generation (nor the latest, if it had not checked in
 * there: a rank that returned instead of calling hvd_init). Not for a rank that had checked
 * in and then exited with an error code: most likely it gave up waiting for a rank that never
 * came, and the others, waiting for the same rank, will say so themselves within moments
 * (their timeouts count from the same latest arrival). */
static void abort_check_in(job_t *job, const hvd_slot_t *slot, int status) {
    if (!job->server)
        return;
    hvd_kv_store_t *store = hvd__kv_server_store(job->server);
    char what[96], text[400], scope[32], key[32];
    long g = atomic_load(&job->latest_init);
    snprintf(scope, sizeof scope, "init.%ld", g);
    snprintf(key, sizeof key, "rank_%d", slot->rank);
    int checked_in = g >= 0 && hvd__kv_store_has(store, scope, key);
    int code = hvd__spawn_exit_code(status);
    if (WIFEXITED(status) && code != 0 && checked_in)
        return;
    if (WIFEXITED(status) && code == 0) {
        snprintf(text, sizeof text, "rank %d (host %s) exited with status 0 before hvd_init",
                 slot->rank, slot->host);
        size_t waiting = checked_in || g < 0
                             ? 0
                             : hvd__kv_store_count(store, scope) -
                                   (size_t)hvd__kv_store_has(store, scope, HVD_KV_ABORT_KEY);
        if (waiting) /* the cause of the failures that follow */
            hvd__workers_say(job->workers, "horovodrun: %s, while %zu rank%s waited for it\n", text,
                             waiting, waiting == 1 ? "" : "s");
    } else {
        hvd__spawn_describe_status(status, what, sizeof what);
        int n = snprintf(text, sizeof text, "rank %d (host %s) %s", slot->rank, slot->host,
                         strncmp(what, "exit", 4) == 0 ? "exited with " : "was ");
        snprintf(text + n, sizeof text - (size_t)n, "%s", what);
    }
    for (long k = checked_in ? g + 1 : g < 0 ? 0 : g; k <= g + 1; k++) {
        snprintf(scope, sizeof scope, "init.%ld", k);
        if (hvd__kv_store_put(store, scope, HVD_KV_ABORT_KEY, text, strlen(text)) != HVD_OK)
            hvd__error_clear(); /* the ranks then meet their timeout, as before */
    }
}

/* A non-zero exit of a rank we did not stop fails the job: stop the others. */
static void on_exit_cb(void *arg, size_t id, int status, int stopped) {
    job_t *job = arg;
    int code = hvd__spawn_exit_code(status);
    if (code == 0 && !stopped) {
        job->exited++;
        abort_check_in(job, hvd__workers_slot(job->workers, id), status);
    }
    if (code == 0 || stopped)
        return;
    const hvd_slot_t *slot = hvd__workers_slot(job->workers, id);
    hvd__workers_say(job->workers, "Process %d exit with status code %d.\n", slot->rank, code);
    if (job->first_failed >= 0 || hvd__workers_interrupted(job->workers))
        return;
    job->first_failed = (long)id;
    job->exit_code = code;
    abort_check_in(job, slot, status);
    if (job->n > 1)
        hvd__workers_say(job->workers,
                         "Terminating remaining workers after failure of Process %d.\n",
                         slot->rank);
    job->stopping = 1;
    hvd__workers_stop_all(job->workers);
}

/* Once some ranks have exited, a remaining rank stopped for the timeout is killed and fails
 * the job (runner/launch/stopped_ranks.h). */
static void left_behind(job_t *job, const hvd_stopped_ranks_ops_t *ops) {
    long id = hvd__stopped_ranks_check(&job->left_behind, ops, NULL, job->n, job->exited, job->n,
                                       hvd__clock_now_ms());
    if (id < 0 || job->first_failed >= 0)
        return;
    job->first_failed = id;
    job->exit_code = 128 + SIGKILL;
    job->stopping = 1;
}

hvd_status_t hvd__launch_run(const hvd_launch_config_t *cfg, int *exit_code_p) {
    if (!cfg->plan || cfg->plan->count == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "nothing to launch: the slot plan is empty");
    if (!cfg->command || !cfg->command[0] || !cfg->command[0][0])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "nothing to launch: no command");
    job_t job = {.n = cfg->plan->count,
                 .first_failed = -1,
                 .err_fd = cfg->err_fd,
                 .server = cfg->server,
                 .latest_init = -1};
    hvd__stopped_ranks_init(&job.left_behind, cfg->stopped_timeout_s);
    if (job.server)
        hvd__kv_server_watch(job.server, on_store_put, &job);
    hvd_workers_config_t wc = {.command = cfg->command,
                               .exports = cfg->exports,
                               .secret = cfg->secret,
                               .output_dir = cfg->output_dir,
                               .output_np = (int)job.n,
                               .prefix_timestamp = cfg->prefix_timestamp,
                               .verbose = cfg->verbose,
                               .kill_grace_ms = cfg->kill_grace_ms,
                               .max_workers = job.n,
                               .extra_fds = hvd__kv_server_connections_for(job.n),
                               .ssh = cfg->ssh,
                               .remote_exe = cfg->remote_exe,
                               .cwd = cfg->cwd,
                               .out_fd = cfg->out_fd,
                               .err_fd = cfg->err_fd,
                               .on_exit = on_exit_cb,
                               .arg = &job};
    hvd_status_t st = hvd__workers_create(&wc, &job.workers);
    if (st != HVD_OK) {
        if (job.server)
            hvd__kv_server_watch(job.server, NULL, NULL);
        hvd__stopped_ranks_fini(&job.left_behind);
        return st;
    }

    /* Start every rank, looking at events now and then: a local rank under a middleman of
     * its own, every rank of a remote host through one ssh session (in plan order). */
    char start_error[512] = "";
    hvd_slot_t *group = malloc(job.n * sizeof *group);
    char *started = calloc(job.n, 1);
    if (!group || !started) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory starting the ranks");
        snprintf(start_error, sizeof start_error, "%s", hvd_last_error());
    }
    for (size_t i = 0, steps = 0;
         st == HVD_OK && i < job.n && !job.stopping && !hvd__workers_interrupted(job.workers);
         i++) {
        if (started[i])
            continue;
        const hvd_slot_t *slot = &cfg->plan->slots[i];
        size_t id;
        if (!cfg->remote || !cfg->remote[i]) {
            st = hvd__workers_start(job.workers, slot, 0, NULL, &id);
        } else {
            size_t k = 0, most = cfg->session_ranks ? cfg->session_ranks : HVD_LAUNCH_SESSION_RANKS;
            for (size_t j = i; j < job.n && k < most; j++)
                if (!started[j] && cfg->remote[j] &&
                    strcmp(cfg->plan->slots[j].host, slot->host) == 0) {
                    group[k++] = cfg->plan->slots[j];
                    started[j] = 1;
                }
            while (hvd__workers_connecting(job.workers) >= MAX_CONNECTING && !job.stopping &&
                   !hvd__workers_interrupted(job.workers))
                hvd__workers_step(job.workers, BUSY_TICK_MS);
            hvd_ready_session_t *ready = NULL;
            for (size_t j = 0; j < cfg->nready && !ready; j++)
                if (!cfg->ready[j].taken && strcmp(cfg->ready[j].host, slot->host) == 0)
                    ready = &cfg->ready[j];
            st = hvd__workers_start_remote(job.workers, group, k, NULL, ready, NULL);
        }
        started[i] = 1;
        if (st != HVD_OK) {
            snprintf(start_error, sizeof start_error, "%s", hvd_last_error());
            hvd__workers_say(job.workers, "horovodrun: %s\n", start_error);
            hvd__workers_stop_all(job.workers);
            break;
        }
        if (++steps % START_BATCH == 0)
            hvd__workers_step(job.workers, 0);
    }
    free(group);
    free(started);
    /* Supervise until every middleman is gone and every pipe drained. */
    hvd_stopped_ranks_ops_t ops = hvd__stopped_ranks_workers_ops(job.workers);
    while (hvd__workers_busy(job.workers)) {
        int stopping = job.stopping || hvd__workers_interrupted(job.workers) || st != HVD_OK;
        hvd__workers_step(job.workers, stopping || hvd__workers_live(job.workers) == 0
                                           ? BUSY_TICK_MS
                                           : IDLE_TICK_MS);
        if (!stopping && job.exited) /* a rank left stopped after the others exited */
            left_behind(&job, &ops);
    }
    if (st != HVD_OK) {
        hvd__error_set(st, "%s", start_error);
    } else {
        int sig = hvd__workers_interrupted(job.workers);
        if (job.first_failed >= 0) {
            const hvd_slot_t *slot = hvd__workers_slot(job.workers, (size_t)job.first_failed);
            char who[300];
            snprintf(who, sizeof who, "rank %d (host %s)", slot->rank, slot->host);
            hvd__workers_report(job.workers, (size_t)job.first_failed, who);
        }
        *exit_code_p = job.first_failed >= 0 ? job.exit_code : sig ? 128 + sig : 0;
    }
    if (job.server)
        hvd__kv_server_watch(job.server, NULL, NULL);
    hvd__workers_destroy(job.workers);
    hvd__stopped_ranks_fini(&job.left_behind);
    return st;
}
