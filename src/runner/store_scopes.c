/* The store's predefined scopes for a slot plan; see store_scopes.h. */
#include "runner/store_scopes.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hvd_status_t hvd__store_scopes_declare(hvd_kv_server_t *server, const hvd_slot_plan_t *plan) {
    /* at most one local_ and one cross_ scope per slot */
    size_t max = 1 + 2 * plan->count;
    char **names = calloc(max, sizeof *names);
    int *sizes = calloc(max, sizeof *sizes);
    size_t n = 0;
    hvd_status_t st = HVD_OK;
    if (!names || !sizes) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory declaring scopes");
        goto out;
    }
    names[n] = strdup("global");
    sizes[n++] = (int)plan->count;
    for (size_t i = 0; i < plan->count; i++) {
        const hvd_slot_t *sl = &plan->slots[i];
        char name[300];
        if (sl->local_rank == 0) {
            snprintf(name, sizeof name, "local_%s", sl->host);
            names[n] = strdup(name);
            sizes[n++] = sl->local_size;
        }
        if (sl->cross_rank == 0) {
            snprintf(name, sizeof name, "cross_%d", sl->local_rank);
            names[n] = strdup(name);
            sizes[n++] = sl->cross_size;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (!names[i])
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory declaring scopes");
    if (st == HVD_OK)
        st = hvd__kv_server_reset(server, (const char *const *)names, sizes, n);
out:
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(sizes);
    return st;
}
