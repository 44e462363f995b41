/* libFuzzer target: the slot plan the ranks read from the rendezvous store
 * (rendezvous/rank_plan.h). Whatever decodes places every rank within the plan, and encodes
 * to text that decodes to the same plan. */
#include "rendezvous/rank_plan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hvd_rank_plan_t plan, again;
    if (hvd__rank_plan_decode((const char *)data, size, &plan) != HVD_OK)
        return 0;
    /* (a plan of millions of ranks is valid, but placing it is not this target's business) */
    if (plan.size <= 100000) {
        hvd_rank_place_t *places = calloc((size_t)plan.size, sizeof *places);
        if (!places || hvd__rank_plan_places(&plan, places) != HVD_OK)
            abort();
        for (int r = 0; r < plan.size; r++)
            if (places[r].host >= plan.count || places[r].local_rank >= places[r].local_size ||
                places[r].cross_rank >= places[r].cross_size)
                abort();
        free(places);
    }
    char *text;
    size_t len;
    if (hvd__rank_plan_encode((const char *const *)plan.hosts, plan.slots, plan.count, &text,
                              &len) != HVD_OK ||
        hvd__rank_plan_decode(text, len, &again) != HVD_OK || again.size != plan.size ||
        again.count != plan.count)
        abort();
    for (size_t h = 0; h < plan.count; h++)
        if (strcmp(again.hosts[h], plan.hosts[h]) || again.slots[h] != plan.slots[h])
            abort();
    free(text);
    hvd__rank_plan_fini(&again);
    hvd__rank_plan_fini(&plan);
    return 0;
}
