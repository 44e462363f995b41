/* libFuzzer target: Slurm's per-node counts and host lists (slurm/slurm_env.h), which come
 * from the environment. Whatever expands is within the bounds: at most HVD_SLURM_MAX_NODES
 * entries, names of 1..HVD_SLURM_NAME_MAX printable bytes, counts >= 0. */
#include "slurm/slurm_env.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int *counts;
    size_t n;
    if (hvd__slurm_counts_expand(text, &counts, &n) == HVD_OK) {
        if (n == 0 || n > HVD_SLURM_MAX_NODES)
            abort();
        for (size_t i = 0; i < n; i++)
            if (counts[i] < 0)
                abort();
        free(counts);
    }
    char **names;
    if (hvd__slurm_hostlist_expand(text, &names, &n) == HVD_OK) {
        if (n == 0 || n > HVD_SLURM_MAX_NODES)
            abort();
        for (size_t i = 0; i < n; i++) {
            size_t len = strlen(names[i]);
            if (len == 0 || len > HVD_SLURM_NAME_MAX)
                abort();
            for (size_t k = 0; k < len; k++)
                if (names[i][k] <= ' ' || names[i][k] >= 127 || names[i][k] == '[' ||
                    names[i][k] == ']' || names[i][k] == ',')
                    abort();
        }
        hvd__slurm_names_free(names, n);
    }
    free(text);
    return 0;
}
