/* The worker pool's environments (workers_impl.h): the base every worker shares, each slot's
 * own variables, and the command line --verbose prints (with the secret left out). */
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

/* ---- messages ------------------------------------------------------------------------------ */

/* A growable string for --verbose lines. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} strbuf_t;

static void sb_add(strbuf_t *b, const char *s, size_t n) {
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *grown = realloc(b->p, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Python's shlex.quote, as Horovod prints worker commands. */
static void sb_quoted(strbuf_t *b, const char *s) {
    char small[256];
    size_t need = hvd__shell_quote(s, small, sizeof small);
    if (need < sizeof small) {
        sb_add(b, small, need);
        return;
    }
    char *big = malloc(need + 1);
    if (!big) {
        b->failed = 1;
        return;
    }
    hvd__shell_quote(s, big, need + 1);
    sb_add(b, big, need);
    free(big);
}

static void sb_assignment(strbuf_t *b, const char *entry) {
    const char *eq = strchr(entry, '=');
    if (!eq)
        return;
    sb_add(b, " ", 1);
    sb_add(b, entry, (size_t)(eq - entry) + 1);
    sb_quoted(b, eq + 1);
}

/* ---- environment --------------------------------------------------------------------------- */

/* Set last for each rank, so that they win over anything inherited or exported. */
static const char *const slot_names[] = {
    "HOROVOD_HOSTNAME",   "HOROVOD_RANK",       "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
    "HOROVOD_CROSS_SIZE", "PYTHONUNBUFFERED",   HVD_SECRET_ENV};

static int is_secret_entry(const char *entry) {
    size_t n = strlen(HVD_SECRET_ENV);
    return strncmp(entry, HVD_SECRET_ENV, n) == 0 && entry[n] == '=';
}

/* Variables of horovodrun's environment that workers do not inherit: Horovod's regexes
 * BASH_FUNC_.*, OLDPWD and .*CUDA_VISIBLE_DEVICES, matched as re.match does (anchored at the
 * start only, so OLDPWD also covers OLDPWD_X and the last any name containing
 * CUDA_VISIBLE_DEVICES), plus an inherited secret (each job has its own). */
int hvd__workers_excluded_name(const char *name, size_t len) {
    return (len >= 10 && memcmp(name, "BASH_FUNC_", 10) == 0) ||
           (len >= 6 && memcmp(name, "OLDPWD", 6) == 0) ||
           memmem(name, len, "CUDA_VISIBLE_DEVICES", 20) != NULL ||
           (len == strlen(HVD_SECRET_ENV) && memcmp(name, HVD_SECRET_ENV, len) == 0);
}

int hvd__workers_not_job_variable(const char *name, size_t len) {
    return hvd__workers_excluded_name(name, len) ||
           !((len >= 9 && memcmp(name, "HOROVOD_", 8) == 0) ||
             (len >= 5 && memcmp(name, "HVD_", 4) == 0));
}

hvd_status_t hvd__wk_build_base_env(hvd_workers_t *w) {
    hvd_env_list_t *env = &w->base;
    hvd__env_list_init(env);
    int agent = w->cfg->ssh && w->cfg->ssh->agent;
    hvd_status_t st = hvd__env_list_set_entries(
        env, environ, agent ? hvd__workers_not_job_variable : hvd__workers_excluded_name);
    if (st == HVD_OK && w->cfg->exports)
        st = hvd__env_list_merge(env, w->cfg->exports);
    for (size_t i = 0; i < sizeof slot_names / sizeof slot_names[0]; i++)
        hvd__env_list_unset(env, slot_names[i]);
    return st;
}

hvd_status_t hvd__wk_slot_env(const hvd_workers_t *w, const hvd_slot_t *slot,
                              hvd_env_list_t *vars) {
    hvd__env_list_init(vars);
    hvd_status_t st = hvd__env_list_set(vars, "HOROVOD_HOSTNAME", slot->host);
    const struct {
        const char *name;
        int value;
    } ints[] = {{"HOROVOD_RANK", slot->rank},
                {"HOROVOD_SIZE", slot->size},
                {"HOROVOD_LOCAL_RANK", slot->local_rank},
                {"HOROVOD_LOCAL_SIZE", slot->local_size},
                {"HOROVOD_CROSS_RANK", slot->cross_rank},
                {"HOROVOD_CROSS_SIZE", slot->cross_size}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && st == HVD_OK; i++)
        st = hvd__env_list_setf(vars, ints[i].name, "%d", ints[i].value);
    if (st == HVD_OK)
        st = hvd__env_list_set(vars, "PYTHONUNBUFFERED", "1");
    if (st == HVD_OK && w->cfg->secret) {
        char hex[HVD_SECRET_HEX_LEN + 1];
        hvd__secret_to_hex(w->cfg->secret, hex);
        st = hvd__env_list_set(vars, HVD_SECRET_ENV, hex);
        explicit_bzero(hex, sizeof hex);
    }
    if (st != HVD_OK)
        hvd__env_list_fini(vars);
    return st;
}

void hvd__wk_wipe_env(hvd_env_list_t *vars) {
    for (size_t i = 0; i < vars->count; i++)
        if (is_secret_entry(vars->entries[i]))
            explicit_bzero(vars->entries[i], strlen(vars->entries[i]));
    hvd__env_list_fini(vars);
}

int hvd__wk_is_slot_name(const char *entry) {
    const char *eq = strchr(entry, '=');
    for (size_t k = 0; eq && k < sizeof slot_names / sizeof slot_names[0]; k++)
        if (strlen(slot_names[k]) == (size_t)(eq - entry) &&
            strncmp(entry, slot_names[k], (size_t)(eq - entry)) == 0)
            return 1;
    return 0;
}

/* --verbose: `env <slot vars> <exports> <command>`, quoted like Horovod's, without the secret
 * and without the inherited environment (Horovod prints all of it, issue #2484). */
void hvd__wk_print_command(const hvd_workers_t *w, char *const *ssh_argv,
                           const hvd_env_list_t *vars, const hvd_env_list_t *extra) {
    strbuf_t b = {0};
    for (char *const *a = ssh_argv; a && *a; a++) {
        sb_quoted(&b, *a);
        sb_add(&b, " ", 1);
    }
    if (ssh_argv) {
        /* what the remote side runs, from the spec ssh carries on its stdin */
        sb_add(&b, "<<< cd ", 7);
        sb_quoted(&b, w->cfg->cwd ? w->cfg->cwd : ".");
        sb_add(&b, " && ", 4);
    }
    sb_add(&b, "env", 3);
    for (size_t i = 0; i < vars->count; i++)
        if (!is_secret_entry(vars->entries[i]))
            sb_assignment(&b, vars->entries[i]);
    const hvd_env_list_t *lists[] = {w->cfg->exports, extra};
    for (size_t l = 0; l < 2; l++)
        for (size_t i = 0; lists[l] && i < lists[l]->count; i++)
            if (!hvd__wk_is_slot_name(lists[l]->entries[i]))
                sb_assignment(&b, lists[l]->entries[i]);
    for (char *const *a = w->cfg->command; *a; a++) {
        sb_add(&b, " ", 1);
        sb_quoted(&b, *a);
    }
    sb_add(&b, "\n", 1);
    if (!b.failed)
        hvd__say_bytes(w->cfg->out_fd, b.p, b.len);
    free(b.p);
}
