/* libFuzzer target: horovodrun's command line (argv = the input split at NUL bytes). */
#include "runner/cli/settings.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What settings.h promises of a command line it accepted outside the print-and-exit modes
 * (in those the other fields may be unset); any input that breaks it aborts (a finding).
 * --check-network runs no command: it may have none, and -np is optional. */
static void check_contract(const hvd_settings_t *s) {
    if (s->show_help || s->show_help_env || s->show_version || s->show_check_build || s->dry_run)
        return;
    if (s->check_network) {
        if ((s->command && !s->command[0]) || (s->num_proc != -1 && s->num_proc < 1) ||
            s->discovery_script || (s->hosts && s->hostfile) || s->start_timeout < 1 ||
            (s->nic_count && !s->nics))
            abort();
        return;
    }
    int shapes = (s->hosts != NULL) + (s->hostfile != NULL) + (s->discovery_script != NULL);
    int cooldown_ok =
        (s->cooldown_min == 0 && s->cooldown_max == 0) ||
        (1 <= s->cooldown_min && s->cooldown_min <= s->cooldown_max && s->cooldown_max <= 3600);
    if (!s->command || !s->command[0] || (s->num_proc != -1 && s->num_proc < 1) || shapes > 1 ||
        s->start_timeout < 1 || s->ssh_port < 0 || s->ssh_port > 65535 || s->slots_per_host < 0 ||
        s->reset_limit < -1 || !cooldown_ok || (s->nic_count && !s->nics))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 2048)
        return 0;
    static hvd_params_t env;
    static int loaded;
    if (!loaded && hvd__params_load(&env, NULL, NULL) == HVD_OK)
        loaded = 1;
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[66] = {"horovodrun"};
    int argc = 1;
    for (size_t i = 0; i <= size && argc < 65;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    hvd_settings_t s;
    if (hvd__settings_parse(argc, argv, &env, &s) == HVD_OK) {
        check_contract(&s);
        hvd__settings_fini(&s);
    }
    free(buf);
    return 0;
}
