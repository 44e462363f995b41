/* horovodrun's print-and-exit outputs: --help, --help-env, --version, --check-build, and the
 * --dry-run slot plan. Each writes to out and does nothing else (no exit, no flush); none can
 * fail except through out's own error state. */
#ifndef HVD_RUNNER_HELP_H
#define HVD_RUNNER_HELP_H

#include <stdio.h>

#include "runner/hosts/hosts.h"

/* The Horovod release whose behaviour horovodrun follows. */
#define HVD_HOROVOD_COMPAT_VERSION "0.28.1"

/* Usage and every flag, one line each, grouped as in Horovod's horovodrun --help. */
void hvd__help_print_usage(FILE *out);

/* Every HOROVOD_* variable of the parameter table with its default and meaning. */
void hvd__help_print_env(FILE *out);

/* "horovodrun (hvd) 0.1.0, compatible with Horovod 0.28.1" and a newline. */
void hvd__help_print_version(FILE *out);

/* What this build supports, in the format of Horovod's horovodrun --check-build. */
void hvd__help_print_check_build(FILE *out);

/* One hvd__slot_format line per rank. */
void hvd__help_print_plan(FILE *out, const hvd_slot_plan_t *plan);

#endif
