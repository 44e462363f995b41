/* The slot plan the ranks read from the store; see rank_plan.h. */
#include "rendezvous/rank_plan.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "HVP1"

static int host_name_ok(const char *s, size_t len) {
    if (len == 0 || len > HVD_RANK_PLAN_HOST_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return 0;
    return 1;
}

hvd_status_t hvd__rank_plan_encode(const char *const *hosts, const int *slots, size_t n,
                                   char **text_p, size_t *len_p) {
    size_t cap = 32, ranks = 0;
    for (size_t i = 0; i < n; i++) {
        size_t hl = strlen(hosts[i]);
        if (!host_name_ok(hosts[i], hl))
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "host %zu's name cannot go into the rank plan (1-%d printable "
                                  "characters, no spaces)",
                                  i, HVD_RANK_PLAN_HOST_MAX);
        if (slots[i] < 1 || (ranks += (size_t)slots[i]) > HVD_RANK_PLAN_MAX_RANKS)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "host %s: %d ranks (1 or more, %d in all at most)", hosts[i],
                                  slots[i], HVD_RANK_PLAN_MAX_RANKS);
        cap += hl + 16;
    }
    char *text = malloc(cap);
    if (!text)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory encoding the rank plan");
    size_t len = (size_t)snprintf(text, cap, MAGIC " %zu %zu\n", n, ranks);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "%d %s\n", slots[i], hosts[i]);
    *text_p = text;
    *len_p = len;
    return HVD_OK;
}

void hvd__rank_plan_fini(hvd_rank_plan_t *plan) {
    for (size_t i = 0; plan->hosts && i < plan->count; i++)
        free(plan->hosts[i]);
    free(plan->hosts);
    free(plan->slots);
    free(plan->first);
    memset(plan, 0, sizeof *plan);
}

/* A decimal number of at most 9 digits ending at a space or newline; -1 otherwise. */
static long read_number(const char **p, const char *end, char stop) {
    const char *s = *p;
    long v = 0;
    int digits = 0;
    while (s < end && *s >= '0' && *s <= '9' && digits < 9) {
        v = v * 10 + (*s++ - '0');
        digits++;
    }
    if (!digits || s >= end || *s != stop)
        return -1;
    *p = s + 1;
    return v;
}

hvd_status_t hvd__rank_plan_decode(const char *text, size_t len, hvd_rank_plan_t *plan_p) {
    const char *p = text, *end = text + len;
    hvd_rank_plan_t plan = {0};
    if (len < 5 || memcmp(p, MAGIC " ", 5) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "the rank plan lacks its %s header", MAGIC);
    p += 5;
    long hosts = read_number(&p, end, ' '), ranks = read_number(&p, end, '\n');
    /* each host line takes at least 4 bytes: a count larger than that allows is a lie */
    if (hosts < 1 || ranks < hosts || ranks > HVD_RANK_PLAN_MAX_RANKS ||
        (size_t)hosts > (size_t)(end - p) / 4)
        return hvd__error_set(HVD_ERR_PROTOCOL, "the rank plan's header is malformed");
    plan.hosts = calloc((size_t)hosts, sizeof *plan.hosts);
    plan.slots = calloc((size_t)hosts, sizeof *plan.slots);
    plan.first = calloc((size_t)hosts, sizeof *plan.first);
    if (!plan.hosts || !plan.slots || !plan.first) {
        hvd__rank_plan_fini(&plan);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory decoding the rank plan");
    }
    long total = 0;
    for (long h = 0; h < hosts; h++) {
        long n = read_number(&p, end, ' ');
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (n < 1 || n > ranks - total || !nl || !host_name_ok(p, (size_t)(nl - p))) {
            hvd__rank_plan_fini(&plan);
            return hvd__error_set(HVD_ERR_PROTOCOL, "line %ld of the rank plan is malformed",
                                  h + 2);
        }
        if (!(plan.hosts[h] = strndup(p, (size_t)(nl - p)))) {
            hvd__rank_plan_fini(&plan);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory decoding the rank plan");
        }
        plan.count++;
        plan.slots[h] = (int)n;
        plan.first[h] = (int)total;
        total += n;
        p = nl + 1;
    }
    if (total != ranks || p != end) {
        hvd__rank_plan_fini(&plan);
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "the rank plan's hosts hold %ld ranks, its header says %ld%s", total,
                              ranks, p != end ? " (or bytes follow its last line)" : "");
    }
    plan.size = (int)ranks;
    *plan_p = plan;
    return HVD_OK;
}

hvd_status_t hvd__rank_plan_places(const hvd_rank_plan_t *plan, hvd_rank_place_t *places) {
    int max_slots = 0;
    for (size_t h = 0; h < plan->count; h++)
        if (plan->slots[h] > max_slots)
            max_slots = plan->slots[h];
    /* hosts_with[j]: hosts so far with a local rank j (the next cross rank for j) */
    int *hosts_with = calloc((size_t)max_slots, sizeof *hosts_with);
    if (!hosts_with)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory placing %d ranks", plan->size);
    for (size_t h = 0; h < plan->count; h++)
        for (int j = 0; j < plan->slots[h]; j++) {
            hvd_rank_place_t *pl = &places[plan->first[h] + j];
            pl->host = h;
            pl->local_rank = j;
            pl->local_size = plan->slots[h];
            pl->cross_rank = hosts_with[j]++;
        }
    for (int r = 0; r < plan->size; r++)
        places[r].cross_size = hosts_with[places[r].local_rank];
    free(hosts_with);
    return HVD_OK;
}
