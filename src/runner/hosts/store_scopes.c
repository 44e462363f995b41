/* The store's predefined scopes for a slot plan; see store_scopes.h. */
#include "runner/hosts/store_scopes.h"

#include "common/error.h"
#include "rendezvous/rank_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The plan in rank_plan.h's form under plan/<key>, when it has that form (hosts.c's plans
 * do; anything else is left out, and the ranks check in with every record). */
static hvd_status_t publish_plan(hvd_kv_server_t *server, const hvd_slot_plan_t *plan,
                                 const char *key) {
    const char **hosts = calloc(plan->count, sizeof *hosts);
    int *slots = calloc(plan->count, sizeof *slots);
    size_t n = 0;
    int regular = 1;
    hvd_status_t st = HVD_OK;
    if (!hosts || !slots) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory publishing the rank plan");
        goto out;
    }
    for (size_t r = 0; r < plan->count && regular; r++) {
        const hvd_slot_t *sl = &plan->slots[r];
        if (sl->local_rank == 0) {
            hosts[n] = sl->host;
            slots[n++] = sl->local_size;
        }
        regular = n > 0 && sl->rank == (int)r && strcmp(sl->host, hosts[n - 1]) == 0 &&
                  sl->local_size == slots[n - 1] && sl->local_rank < sl->local_size;
    }
    char *text = NULL;
    size_t len = 0;
    hvd_rank_plan_t check = {0};
    hvd_rank_place_t *places = calloc(plan->count ? plan->count : 1, sizeof *places);
    if (!places) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory publishing the rank plan");
        goto out;
    }
    /* what the ranks will read must give every rank the place the launcher gave it */
    if (regular && hvd__rank_plan_encode(hosts, slots, n, &text, &len) == HVD_OK &&
        hvd__rank_plan_decode(text, len, &check) == HVD_OK && (size_t)check.size == plan->count &&
        hvd__rank_plan_places(&check, places) == HVD_OK) {
        for (size_t r = 0; r < plan->count && regular; r++) {
            const hvd_slot_t *sl = &plan->slots[r];
            regular =
                places[r].local_rank == sl->local_rank && places[r].local_size == sl->local_size &&
                places[r].cross_rank == sl->cross_rank && places[r].cross_size == sl->cross_size;
        }
        if (regular)
            st = hvd__kv_store_put(hvd__kv_server_store(server), HVD_RANK_PLAN_SCOPE, key, text,
                                   len);
    }
    hvd__error_clear();
    hvd__rank_plan_fini(&check);
    free(places);
    free(text);
out:
    free(hosts);
    free(slots);
    return st;
}

hvd_status_t hvd__store_scopes_declare(hvd_kv_server_t *server, const hvd_slot_plan_t *plan,
                                       const char *plan_key) {
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
    if (st == HVD_OK && plan_key)
        st = publish_plan(server, plan, plan_key);
out:
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(sizes);
    return st;
}
