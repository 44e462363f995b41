/* Running the host discovery script (host_discovery.h): each run goes through hvd__capture_shell
 * (capture.h) and its stdout through hvd__hosts_parse_discovery (hosts.h); the poller keeps the
 * last good list and hands out copies of it. */
#include "runner/elastic/host_discovery.h"

#include <hvd/hvd.h>

#include "common/error.h"
#include "common/log.h"
#include "runner/process/capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* What is kept of the script's stderr for messages. */
#define STDERR_CAP 4096

struct hvd_host_discovery {
    hvd_host_discovery_config_t cfg;
    char *script;
    hvd_host_list_t good;
    int have_good;
};

hvd_status_t hvd__host_discovery_run(const hvd_host_discovery_config_t *cfg,
                                     hvd_host_list_t *list_p) {
    int timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : HVD_DISCOVERY_TIMEOUT_MS;
    size_t cap = cfg->output_cap ? cfg->output_cap : HVD_DISCOVERY_OUTPUT_CAP;
    char *out = malloc(cap + 1), err[STDERR_CAP];
    if (!out)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory running host discovery");
    out[0] = err[0] = '\0';
    hvd_capture_buf_t ob = {.buf = out, .cap = cap + 1}, eb = {.buf = err, .cap = sizeof err};
    int status = 0, timed_out = 0;
    hvd_status_t st = hvd__capture_shell(cfg->script, timeout_ms, &ob, &eb, &status, &timed_out);
    char why[512];
    hvd__capture_last_line(err, eb.len, why, sizeof why);
    if (st != HVD_OK) {
        st = hvd__error_wrap(st, "host discovery script '%s'", cfg->script);
    } else if (timed_out) {
        st = hvd__error_set(HVD_ERR_TIMEOUT,
                            "host discovery script '%s' did not finish within %d ms and was "
                            "killed",
                            cfg->script, timeout_ms);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char what[64];
        if (WIFEXITED(status))
            snprintf(what, sizeof what, "exit code %d", WEXITSTATUS(status));
        else
            snprintf(what, sizeof what, "signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        st = hvd__error_set(HVD_ERR_IO, "host discovery script '%s' failed with %s%s%s",
                            cfg->script, what, *why ? ": " : "", why);
    } else if (ob.overflow) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "host discovery script '%s' printed more than %zu bytes", cfg->script,
                            cap);
    } else {
        st = hvd__hosts_parse_discovery(out, ob.len, cfg->default_slots, list_p);
        if (st != HVD_OK)
            st = hvd__error_wrap(st, "host discovery script '%s'", cfg->script);
    }
    free(out);
    return st;
}

static hvd_status_t copy_list(const hvd_host_list_t *from, hvd_host_list_t *to) {
    hvd_host_list_t l = {.hosts = calloc(from->count ? from->count : 1, sizeof *l.hosts)};
    if (!l.hosts)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < from->count; i++) {
        if (!(l.hosts[i].name = strdup(from->hosts[i].name))) {
            hvd__hosts_fini(&l);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        }
        l.hosts[i].slots = from->hosts[i].slots;
        l.count = i + 1;
    }
    *to = l;
    return HVD_OK;
}

hvd_status_t hvd__host_discovery_create(const hvd_host_discovery_config_t *cfg,
                                        hvd_host_discovery_t **d_p) {
    if (!cfg->script || !*cfg->script)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "no host discovery script");
    hvd_host_discovery_t *d = calloc(1, sizeof *d);
    if (!d || !(d->script = strdup(cfg->script))) {
        free(d);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    d->cfg = *cfg;
    d->cfg.script = d->script;
    *d_p = d;
    return HVD_OK;
}

void hvd__host_discovery_destroy(hvd_host_discovery_t *d) {
    if (!d)
        return;
    hvd__hosts_fini(&d->good);
    free(d->script);
    free(d);
}

hvd_status_t hvd__host_discovery_poll(hvd_host_discovery_t *d, hvd_host_list_t *list_p,
                                      int *stale_p) {
    hvd_host_list_t fresh;
    *stale_p = 0;
    hvd_status_t st = hvd__host_discovery_run(&d->cfg, &fresh);
    if (st == HVD_OK) {
        hvd__hosts_fini(&d->good);
        d->good = fresh;
        d->have_good = 1;
    } else if (!d->have_good) {
        return st;
    } else {
        HVD_LOG_W("%s; keeping the last good host set (%zu hosts)", hvd_last_error(),
                  d->good.count);
        *stale_p = 1;
    }
    return copy_list(&d->good, list_p);
}
