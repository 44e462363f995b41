/* The slot plan the ranks read from the store; see rank_plan.h. */
#include "rendezvous/rank_plan.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "HVP1"
#define MAX_NUMBER 999999999L /* 9 digits: a range bound, a count */

static int host_name_ok(const char *s, size_t len) {
    if (len == 0 || len > HVD_RANK_PLAN_HOST_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == '[' || s[i] == ']')
            return 0;
    return 1;
}

/* A name's trailing number: its prefix length, value and digit count; 0 when it has none
 * (or one longer than 9 digits). */
static int split_number(const char *name, size_t *prefix_p, long *value_p, int *digits_p) {
    size_t len = strlen(name), i = len;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
        i--;
    if (i == len || len - i > 9)
        return 0;
    *prefix_p = i;
    *value_p = strtol(name + i, NULL, 10);
    *digits_p = (int)(len - i);
    return 1;
}

/* The number as a range writes it: zero-padded to width when the range's first number was
 * written with leading zeros (width > 0), else plainly. */
static int format_number(char *out, size_t size, long v, int width) {
    return width ? snprintf(out, size, "%0*ld", width, v) : snprintf(out, size, "%ld", v);
}

/* How many hosts from i on form one range "prefix[lo-hi]" with the same rank count: names
 * that differ only in a trailing number counting up by one, written alike. */
static size_t run_length(const char *const *hosts, const int *slots, size_t n, size_t i,
                         int *width_p) {
    size_t prefix;
    long first;
    int digits;
    if (!split_number(hosts[i], &prefix, &first, &digits))
        return 1;
    char lead[24];
    int width = format_number(lead, sizeof lead, first, 0) == digits ? 0 : digits;
    size_t j = i + 1;
    for (; j < n && slots[j] == slots[i] && first + (long)(j - i) <= MAX_NUMBER; j++) {
        char want[24];
        int w = format_number(want, sizeof want, first + (long)(j - i), width);
        if ((width && w != width) || strncmp(hosts[j], hosts[i], prefix) != 0 ||
            strlen(hosts[j]) != prefix + (size_t)w || strcmp(hosts[j] + prefix, want) != 0)
            break;
    }
    *width_p = width;
    return j - i;
}

hvd_status_t hvd__rank_plan_encode(const char *const *hosts, const int *slots, size_t n,
                                   char **text_p, size_t *len_p) {
    size_t cap = 32, ranks = 0;
    for (size_t i = 0; i < n; i++) {
        size_t hl = strlen(hosts[i]);
        if (!host_name_ok(hosts[i], hl))
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "host %zu's name cannot go into the rank plan (1-%d printable "
                                  "characters, no spaces or brackets)",
                                  i, HVD_RANK_PLAN_HOST_MAX);
        if (slots[i] < 1 || (ranks += (size_t)slots[i]) > HVD_RANK_PLAN_MAX_RANKS)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "host %s: %d ranks (1 or more, %d in all at most)", hosts[i],
                                  slots[i], HVD_RANK_PLAN_MAX_RANKS);
        cap += hl + 40;
    }
    char *text = malloc(cap);
    if (!text)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory encoding the rank plan");
    size_t len = (size_t)snprintf(text, cap, MAGIC " %zu %zu\n", n, ranks);
    for (size_t i = 0; i < n;) {
        int width = 0;
        size_t run = run_length(hosts, slots, n, i, &width);
        if (run == 1) {
            len += (size_t)snprintf(text + len, cap - len, "%d %s\n", slots[i], hosts[i]);
        } else {
            size_t prefix;
            long lo;
            int digits;
            split_number(hosts[i], &prefix, &lo, &digits);
            char a[24], b[24];
            format_number(a, sizeof a, lo, width);
            format_number(b, sizeof b, lo + (long)run - 1, width);
            len += (size_t)snprintf(text + len, cap - len, "%d %.*s[%s-%s]\n", slots[i],
                                    (int)prefix, hosts[i], a, b);
        }
        i += run;
    }
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

/* A decimal number of at most 9 digits ending at `stop`; -1 otherwise. *digits_p (may be
 * NULL) gets its digit count. */
static long read_number(const char **p, const char *end, char stop, int *digits_p) {
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
    if (digits_p)
        *digits_p = digits;
    return v;
}

/* Append a host with its rank count, growing the arrays as hosts come (*cap_p of them): a
 * header claiming a million hosts costs nothing until they are there. */
static int add_host(hvd_rank_plan_t *plan, size_t *cap_p, const char *name, size_t len, int slots) {
    if (!host_name_ok(name, len))
        return -1;
    if (plan->count == *cap_p) {
        size_t cap = *cap_p ? 2 * *cap_p : 16;
        char **hosts = realloc(plan->hosts, cap * sizeof *hosts);
        if (hosts)
            plan->hosts = hosts;
        int *sl = realloc(plan->slots, cap * sizeof *sl);
        if (sl)
            plan->slots = sl;
        int *first = realloc(plan->first, cap * sizeof *first);
        if (first)
            plan->first = first;
        if (!hosts || !sl || !first)
            return -1;
        *cap_p = cap;
    }
    if (!(plan->hosts[plan->count] = strndup(name, len)))
        return -1;
    plan->slots[plan->count] = slots;
    plan->first[plan->count] = plan->size;
    plan->size += slots;
    plan->count++;
    return 0;
}

/* One line after its rank count: a name, or "prefix[lo-hi]" (lo with leading zeros pads every
 * number to its width), for at most `room` hosts. -1 when malformed (or out of memory). */
static int decode_hosts(hvd_rank_plan_t *plan, size_t *cap_p, const char *s, const char *nl,
                        int slots, size_t room) {
    const char *open = memchr(s, '[', (size_t)(nl - s));
    if (!open)
        return room >= 1 && add_host(plan, cap_p, s, (size_t)(nl - s), slots) == 0 ? 0 : -1;
    const char *p = open + 1;
    int lo_digits, hi_digits;
    long lo = read_number(&p, nl, '-', &lo_digits), hi = read_number(&p, nl, ']', &hi_digits);
    int width = lo_digits > 1 && open[1] == '0' ? lo_digits : 0;
    size_t prefix = (size_t)(open - s);
    if (lo < 0 || hi < lo || p != nl || (width && hi_digits != width) ||
        (size_t)(hi - lo) >= room || prefix > HVD_RANK_PLAN_HOST_MAX)
        return -1;
    char name[HVD_RANK_PLAN_HOST_MAX + 24];
    memcpy(name, s, prefix);
    for (long v = lo; v <= hi; v++) {
        int w = format_number(name + prefix, sizeof name - prefix, v, width);
        if (add_host(plan, cap_p, name, prefix + (size_t)w, slots) != 0)
            return -1;
    }
    return 0;
}

hvd_status_t hvd__rank_plan_decode(const char *text, size_t len, hvd_rank_plan_t *plan_p) {
    const char *p = text, *end = text + len;
    hvd_rank_plan_t plan = {0};
    if (len < 5 || memcmp(p, MAGIC " ", 5) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "the rank plan lacks its %s header", MAGIC);
    p += 5;
    long hosts = read_number(&p, end, ' ', NULL), ranks = read_number(&p, end, '\n', NULL);
    if (hosts < 1 || ranks < hosts || ranks > HVD_RANK_PLAN_MAX_RANKS)
        return hvd__error_set(HVD_ERR_PROTOCOL, "the rank plan's header is malformed");
    size_t cap = 0;
    for (long line = 2; (long)plan.count < hosts; line++) {
        long n = read_number(&p, end, ' ', NULL);
        const char *nl = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
        if (n < 1 || n > ranks - plan.size || !nl ||
            decode_hosts(&plan, &cap, p, nl, (int)n, (size_t)hosts - plan.count) != 0) {
            hvd__rank_plan_fini(&plan);
            return hvd__error_set(HVD_ERR_PROTOCOL, "line %ld of the rank plan is malformed", line);
        }
        p = nl + 1;
    }
    if (plan.size != ranks || p != end) {
        hvd_status_t st = hvd__error_set(
            HVD_ERR_PROTOCOL, "the rank plan's hosts hold %d ranks, its header says %ld%s",
            plan.size, ranks, p != end ? " (or bytes follow its last line)" : "");
        hvd__rank_plan_fini(&plan);
        return st;
    }
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
