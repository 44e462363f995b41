/* libFuzzer target: -H host strings and the slot plan built from them. */
#include "runner/hosts/hosts.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096)
        return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    hvd_host_list_t hosts;
    if (hvd__hosts_parse(text, &hosts) == HVD_OK) {
        long long total = 0;
        for (size_t i = 0; i < hosts.count; i++)
            total += hosts.hosts[i].slots;
        int np = total > 0 && total < 5000 ? (int)total : 1;
        hvd_slot_plan_t plan;
        if (hvd__slot_plan_create(&hosts, np, &plan) == HVD_OK) {
            for (size_t i = 0; i < plan.count; i++) {
                const hvd_slot_t *s = &plan.slots[i];
                if (s->rank != (int)i || s->local_rank >= s->local_size ||
                    s->cross_rank >= s->cross_size)
                    abort();
            }
            hvd__slot_plan_fini(&plan);
        }
        hvd__hosts_fini(&hosts);
    }
    free(text);
    return 0;
}
