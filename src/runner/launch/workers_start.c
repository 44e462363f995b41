/* Starting workers (workers_impl.h): a local one under its own middleman, a remote host's
 * under one ssh session to horovodrun --internal-exec there, and their output files. */
#include "runner/launch/workers_impl.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/params.h"
#include "os/spawn.h"
#include "runner/launch/exec_wire.h"
#include "runner/launch/output.h"
#include "runner/launch/remote_exec.h"
#include "runner/process/say.h"
#include "wire/le.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char **shared_envp(const hvd_workers_t *w, const hvd_env_list_t *extra, size_t more) {
    size_t nb = w->base.count, ne = extra ? extra->count : 0;
    char **envp = malloc((nb + ne + more + 1) * sizeof *envp);
    if (!envp)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < nb; i++)
        envp[k++] = w->base.entries[i];
    for (size_t i = 0; i < ne; i++)
        if (!hvd__wk_is_slot_name(extra->entries[i]))
            envp[k++] = extra->entries[i];
    envp[k] = NULL;
    return envp;
}

/* A worker's record, not yet started. */
static worker_t *worker_new(const hvd_workers_t *w, const hvd_slot_t *slot) {
    worker_t *r = calloc(1, sizeof *r);
    char *host = strdup(slot->host ? slot->host : "");
    if (!r || !host) {
        free(r);
        free(host);
        return NULL;
    }
    r->slot = *slot;
    r->slot.host = host;
    r->proc.out_fd = r->proc.err_fd = r->proc.ctl_fd = -1;
    hvd__output_stream_init(&r->out, slot->rank, 0, w->cfg->out_fd, -1, w->cfg->prefix_timestamp);
    hvd__output_stream_init(&r->err, slot->rank, 1, w->cfg->err_fd, -1, w->cfg->prefix_timestamp);
    return r;
}

void hvd__wk_worker_free(worker_t *r) {
    if (!r)
        return;
    hvd__spawn_close(&r->proc);
    hvd__output_stream_fini(&r->out);
    hvd__output_stream_fini(&r->err);
    free((char *)r->slot.host);
    free(r);
}

void hvd__wk_session_free(session_t *s) {
    if (!s)
        return;
    hvd__spawn_close(&s->proc);
    if (s->in_fd >= 0)
        close(s->in_fd);
    hvd__exec_reader_fini(&s->rx);
    hvd__output_stream_fini(&s->err);
    free(s->ids);
    free(s->host);
    free(s);
}

static hvd_status_t grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap)
        return HVD_OK;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *grown = realloc(*p, c * size);
    if (!grown)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for workers");
    *p = grown;
    *cap = c;
    return HVD_OK;
}

static hvd_status_t start_local(hvd_workers_t *w, worker_t *r, size_t i,
                                const hvd_env_list_t *extra) {
    hvd_env_list_t vars;
    hvd_status_t st = hvd__wk_slot_env(w, &r->slot, &vars);
    if (st != HVD_OK)
        return st;
    char **envp = shared_envp(w, extra, vars.count);
    if (!envp) {
        hvd__wk_wipe_env(&vars);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory building an environment");
    }
    size_t k = 0;
    while (envp[k])
        k++;
    for (size_t v = 0; v < vars.count; v++)
        envp[k++] = vars.entries[v];
    envp[k] = NULL;
    if (w->cfg->verbose)
        hvd__wk_print_command(w, NULL, &vars, extra);
    hvd_spawn_config_t sc = {.argv = w->cfg->command,
                             .envp = envp,
                             .grace_ms = w->grace_ms,
                             .nofile_soft = w->nofile_soft};
    st = hvd__spawn_start(&sc, &r->proc);
    free(envp);
    hvd__wk_wipe_env(&vars);
    if (st != HVD_OK)
        return st;
    w->live++;
    if (hvd__wk_watch_proc(w, &r->proc, i, EV_OUT, &r->out_open, &r->err_open, &r->ctl_open))
        return HVD_OK;
    return hvd__error_set(HVD_ERR_IO, "cannot hvd__wk_watch the pipes of rank %d: %s", r->slot.rank,
                          strerror(errno));
}

/* The spec of a session's ranks (exec_wire.h) and ssh's argv to carry it. */
static hvd_status_t session_command_line(const hvd_workers_t *w, session_t *s, worker_t **rs,
                                         const hvd_env_list_t *extra, char ***ssh_argv_p,
                                         uint8_t **spec_p, size_t *spec_len_p) {
    const hvd_workers_config_t *cfg = w->cfg;
    hvd_env_list_t *vars = calloc(s->n, sizeof *vars);
    char ***rank_env = calloc(s->n, sizeof *rank_env);
    char **env = shared_envp(w, extra, 0);
    size_t made = 0;
    hvd_status_t st = vars && rank_env && env
                          ? HVD_OK
                          : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a remote start");
    for (; st == HVD_OK && made < s->n; made++) {
        st = hvd__wk_slot_env(w, &rs[made]->slot, &vars[made]);
        if (st == HVD_OK)
            rank_env[made] = vars[made].entries;
    }
    if (st == HVD_OK)
        st = hvd__ssh_argv_program(cfg->ssh, s->host,
                                   cfg->remote_exe ? cfg->remote_exe : "horovodrun",
                                   HVD_EXEC_OPTION, ssh_argv_p);
    if (st == HVD_OK) {
        hvd_exec_spec_t spec = {.cwd = (char *)(cfg->cwd ? cfg->cwd : "."),
                                .grace_ms = (uint32_t)w->grace_ms,
                                .env = env,
                                .argv = (char **)cfg->command, /* only read */
                                .nranks = s->n,
                                .rank_env = rank_env};
        st = hvd__exec_spec_encode(&spec, spec_p, spec_len_p);
        if (st != HVD_OK) {
            hvd__ssh_argv_free(*ssh_argv_p);
            *ssh_argv_p = NULL;
        }
    }
    for (size_t k = 0; st == HVD_OK && cfg->verbose && k < s->n; k++)
        hvd__wk_print_command(w, *ssh_argv_p, &vars[k], extra);
    for (size_t k = 0; vars && k < made; k++)
        hvd__wk_wipe_env(&vars[k]);
    free(vars);
    free(rank_env);
    free(env);
    return st;
}

/* Write the spec into a ready session's pipe, made large enough first; ssh forwards it as
 * fast as the network takes it, so this waits at most SPEC_SEND_MS. */
#define SPEC_SEND_MS 5000
static hvd_status_t send_spec(const session_t *s, const uint8_t *spec, size_t len) {
    if (len > 65536)
        (void)fcntl(s->in_fd, F_SETPIPE_SZ, (int)len); /* best effort: else it waits below */
    int64_t deadline = hvd__clock_now_ms() + SPEC_SEND_MS;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(s->in_fd, spec + off, len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        int64_t left = deadline - hvd__clock_now_ms();
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN && left > 0) {
            struct pollfd p = {.fd = s->in_fd, .events = POLLOUT};
            poll(&p, 1, (int)left);
            continue;
        }
        return hvd__error_set(HVD_ERR_IO,
                              "cannot send the ranks' spec through the ssh session "
                              "to %s: %s",
                              s->host, n < 0 ? strerror(errno) : "its input is full");
    }
    return HVD_OK;
}

/* Whether a session opened before the launch can still take the host's ranks. */
static int usable(hvd_ready_session_t *ready) {
    if (!ready || ready->taken || ready->in_fd < 0)
        return 0;
    if (ready->proc.ctl_fd >= 0 && !ready->proc.ctl_eof)
        hvd__spawn_read_report(&ready->proc);
    return !ready->proc.reported && !hvd__spawn_reap(&ready->proc);
}

static hvd_status_t start_session(hvd_workers_t *w, session_t *s, worker_t **rs, size_t si,
                                  const hvd_env_list_t *extra, hvd_ready_session_t *ready) {
    char **ssh_argv = NULL;
    uint8_t *spec = NULL;
    size_t spec_len = 0;
    hvd_status_t st = session_command_line(w, s, rs, extra, &ssh_argv, &spec, &spec_len);
    if (st == HVD_OK && usable(ready)) {
        s->proc = ready->proc;
        s->in_fd = ready->in_fd;
        ready->taken = 1;
    } else if (st == HVD_OK) {
        /* ssh itself runs with horovodrun's environment; the workers' go in the spec */
        hvd_spawn_config_t sc = {.argv = ssh_argv,
                                 .envp = environ,
                                 .grace_ms = w->grace_ms,
                                 .nofile_soft = w->nofile_soft,
                                 .stdin_data = spec,
                                 .stdin_len = spec_len,
                                 .stdin_writer_p = &s->in_fd};
        st = hvd__spawn_start(&sc, &s->proc);
        ready = NULL;
    }
    if (st == HVD_OK) {
        w->sessions_live++;
        w->connecting++;
        if (!hvd__wk_watch_proc(w, &s->proc, si, EV_S_OUT, &s->out_open, &s->err_open,
                                &s->ctl_open))
            st = hvd__error_set(HVD_ERR_IO,
                                "cannot hvd__wk_watch the pipes of the ssh session to %s: %s",
                                s->host, strerror(errno));
    }
    if (st == HVD_OK && ready)
        st = send_spec(s, spec, spec_len);
    if (spec) {
        explicit_bzero(spec, spec_len);
        free(spec);
    }
    hvd__ssh_argv_free(ssh_argv);
    return st;
}

static hvd_status_t room_for(hvd_workers_t *w, const hvd_slot_t *slot, size_t n) {
    if (w->n + n > w->cfg->max_workers)
        return hvd__error_set(HVD_ERR_TOO_LARGE,
                              "cannot start rank %d on %s: %zu workers were started already",
                              slot->rank, slot->host, w->n);
    return grow((void **)&w->w, &w->cap, w->n + n, sizeof *w->w);
}

static hvd_status_t open_files(const hvd_workers_t *w, worker_t *r) {
    if (!w->cfg->output_dir)
        return HVD_OK;
    return hvd__output_open_files(w->cfg->output_dir, r->slot.rank, w->cfg->output_np,
                                  &r->out.file_fd, &r->err.file_fd);
}

hvd_status_t hvd__workers_start_remote(hvd_workers_t *w, const hvd_slot_t *slots, size_t n,
                                       const hvd_env_list_t *extra, hvd_ready_session_t *ready,
                                       size_t *ids) {
    if (n == 0 || n > HVD_EXEC_MAX_RANKS)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "cannot start %zu ranks on one host at once", n);
    hvd_status_t st = room_for(w, &slots[0], n);
    if (st == HVD_OK)
        st = grow((void **)&w->sessions, &w->scap, w->ns + 1, sizeof *w->sessions);
    if (st != HVD_OK)
        return st;
    session_t *s = calloc(1, sizeof *s);
    worker_t **rs = calloc(n, sizeof *rs);
    if (s) {
        s->in_fd = -1;
        s->proc.out_fd = s->proc.err_fd = s->proc.ctl_fd = -1;
        s->host = strdup(slots[0].host ? slots[0].host : "");
        s->ids = calloc(n, sizeof *s->ids);
        s->n = s->left = n;
        hvd__exec_reader_init(&s->rx, n);
        hvd__output_stream_init(&s->err, slots[0].rank, 1, w->cfg->err_fd, -1,
                                w->cfg->prefix_timestamp);
    }
    size_t made = 0;
    if (!s || !rs || !s->host || !s->ids)
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a remote start");
    for (; st == HVD_OK && made < n; made++) {
        if (!(rs[made] = worker_new(w, &slots[made])))
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a worker");
        else
            st = open_files(w, rs[made]);
        if (st == HVD_OK) {
            rs[made]->s = s;
            rs[made]->index = (uint32_t)made;
            s->ids[made] = w->n + made;
        }
    }
    if (st == HVD_OK)
        st = start_session(w, s, rs, w->ns, extra, ready);
    if (st != HVD_OK && (!s || !s->proc.pid)) {
        for (size_t k = 0; k < n && rs; k++)
            hvd__wk_worker_free(rs[k]);
        free(rs);
        hvd__wk_session_free(s);
        return hvd__error_wrap(st, "cannot start rank %d on %s", slots[0].rank, slots[0].host);
    }
    /* started (perhaps without its pipes watched): supervise it like the others */
    w->sessions[w->ns++] = s;
    for (size_t k = 0; k < n; k++) {
        w->w[w->n++] = rs[k];
        w->live++;
        if (ids)
            ids[k] = s->ids[k];
    }
    free(rs);
    if (st != HVD_OK) {
        hvd__wk_session_stop(s);
        return hvd__error_wrap(st, "cannot start rank %d on %s", slots[0].rank, slots[0].host);
    }
    return HVD_OK;
}

hvd_status_t hvd__workers_start(hvd_workers_t *w, const hvd_slot_t *slot, int remote,
                                const hvd_env_list_t *extra, size_t *id_p) {
    if (remote)
        return hvd__workers_start_remote(w, slot, 1, extra, NULL, id_p);
    hvd_status_t st = room_for(w, slot, 1);
    if (st != HVD_OK)
        return st;
    worker_t *r = worker_new(w, slot);
    if (!r)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a worker");
    size_t i = w->n;
    st = open_files(w, r);
    if (st == HVD_OK)
        st = start_local(w, r, i, extra);
    if (st != HVD_OK && !r->proc.pid) {
        hvd__wk_worker_free(r); /* nothing started: nothing to supervise */
        return hvd__error_wrap(st, "cannot start rank %d on %s", slot->rank, slot->host);
    }
    /* started (perhaps without its pipes watched): supervise it like the others */
    w->w[w->n++] = r;
    if (st != HVD_OK) {
        hvd__workers_stop(w, i);
        return hvd__error_wrap(st, "cannot start rank %d on %s", slot->rank, slot->host);
    }
    *id_p = i;
    return HVD_OK;
}
