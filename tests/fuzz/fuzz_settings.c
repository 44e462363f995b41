/* libFuzzer target: horovodrun's command line (argv = the input split at NUL bytes). */
#include "runner/cli/settings.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    if (hvd__settings_parse(argc, argv, &env, &s) == HVD_OK)
        hvd__settings_fini(&s);
    free(buf);
    return 0;
}
