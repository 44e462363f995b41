/* horovodrun's print-and-exit outputs: --help, --help-env, --version, --check-build. */
#ifndef HVD_RUNNER_HELP_H
#define HVD_RUNNER_HELP_H

#include <stdio.h>

void hvd__help_print_usage(FILE *out);
void hvd__help_print_env(FILE *out);
void hvd__help_print_version(FILE *out);
void hvd__help_print_check_build(FILE *out);

/* The Horovod release whose behaviour horovodrun follows. */
#define HVD_HOROVOD_COMPAT_VERSION "0.28.1"

#endif
