/* Hosts (-H, --hostfile) and the slot plan.
 *
 * Decisions where the reference is silent or accidental:
 *  - A host name is [A-Za-z0-9_.-]+ (the reference's [\w.-]+ restricted to ASCII), which
 *    admits IPv4 literals but not IPv6 literals or user@host.
 *  - A duplicated host is an error: the reference keeps both entries, restarts local_rank at
 *    0 for the second one and gives two hosts the same cross_rank.
 *  - A host with 0 slots is accepted and gets no rank, as in the reference (it lets a user
 *    drain a host by editing one number).
 *  - The plan assigns exactly num_proc ranks; the reference started one process per slot.
 *  - Hostfile lines are "host slots=N" (spaces around '=' allowed) or "host" alone, which
 *    means one slot, as in Open MPI and MPICH hostfiles; '#' starts a comment anywhere. */
#include "runner/hosts/hosts.h"

#include "common/error.h"
#include "common/hash.h"
#include "common/text_file.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Far above any real machine; it keeps every slot total and rank inside an int. */
#define HOST_SLOTS_MAX 1000000
#define HOST_NAME_MAX_LEN 255
/* Far above any real cluster; it bounds the memory a runaway hostfile or discovery script
 * can make horovodrun use (and keeps positions inside the name index's uint32_t). */
#define HOST_COUNT_MAX 1000000

typedef enum { NAME_OK, NAME_EMPTY, NAME_TOO_LONG, NAME_BAD_CHAR } name_check_t;

static name_check_t check_host_name(const char *s, size_t n) {
    if (n == 0)
        return NAME_EMPTY;
    if (n > HOST_NAME_MAX_LEN)
        return NAME_TOO_LONG;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-'))
            return NAME_BAD_CHAR;
    return NAME_OK;
}

static const char *name_problem(name_check_t c) {
    switch (c) {
    case NAME_EMPTY:
        return "the host name is empty";
    case NAME_TOO_LONG:
        return "the host name is longer than 255 characters";
    case NAME_BAD_CHAR:
        return "a host name may hold only letters, digits, '_', '.' and '-'";
    case NAME_OK:
        break;
    }
    return "";
}

typedef enum { SLOTS_OK, SLOTS_NOT_NUMBER, SLOTS_TOO_MANY } slots_check_t;

/* A slot count is plain decimal digits: no sign, no spaces, no hex. */
static slots_check_t parse_slots(const char *s, size_t n, int *slots_p) {
    if (n == 0)
        return SLOTS_NOT_NUMBER;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return SLOTS_NOT_NUMBER;
        if (v <= HOST_SLOTS_MAX)
            v = v * 10 + (s[i] - '0');
    }
    if (v > HOST_SLOTS_MAX)
        return SLOTS_TOO_MANY;
    *slots_p = (int)v;
    return SLOTS_OK;
}

static void trim(const char **s, size_t *n) {
    while (*n && isspace((unsigned char)**s))
        (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

/* A host list being built, with an index of its names so that finding a duplicate costs the
 * same for the 100,000th host as for the first: open addressing over list positions + 1 (0 is
 * an empty slot), at most half full. */
typedef struct {
    hvd_host_list_t list;
    size_t cap;
    uint32_t *index;
    size_t index_cap; /* a power of two */
} builder_t;

static size_t index_home(const builder_t *b, const char *name, size_t len) {
    return (size_t)hvd__hash_fnv1a_bytes(HVD_HASH_FNV_BASIS, name, len) & (b->index_cap - 1);
}

/* Position of the host called name[0..len), or -1. */
static long find_host(const builder_t *b, const char *name, size_t len) {
    if (!b->index_cap)
        return -1;
    for (size_t i = index_home(b, name, len);; i = (i + 1) & (b->index_cap - 1)) {
        uint32_t at = b->index[i];
        if (!at)
            return -1;
        const char *have = b->list.hosts[at - 1].name;
        if (strncmp(have, name, len) == 0 && have[len] == '\0')
            return (long)at - 1;
    }
}

static void index_put(builder_t *b, size_t pos) {
    const char *name = b->list.hosts[pos].name;
    size_t i = index_home(b, name, strlen(name));
    while (b->index[i])
        i = (i + 1) & (b->index_cap - 1);
    b->index[i] = (uint32_t)(pos + 1);
}

static hvd_status_t no_memory(void) {
    return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory reading hosts");
}

static hvd_status_t append_host(builder_t *b, const char *name, size_t len, int slots) {
    if (b->list.count >= HOST_COUNT_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "more than %d hosts listed", HOST_COUNT_MAX);
    if (b->list.count == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        hvd_host_t *grown = realloc(b->list.hosts, cap * sizeof *grown);
        if (!grown)
            return no_memory();
        b->list.hosts = grown;
        b->cap = cap;
    }
    if (2 * (b->list.count + 1) > b->index_cap) {
        size_t cap = b->index_cap ? b->index_cap * 2 : 64;
        uint32_t *index = calloc(cap, sizeof *index);
        if (!index)
            return no_memory();
        free(b->index);
        b->index = index;
        b->index_cap = cap;
        for (size_t i = 0; i < b->list.count; i++)
            index_put(b, i);
    }
    char *copy = strndup(name, len);
    if (!copy)
        return no_memory();
    b->list.hosts[b->list.count].name = copy;
    b->list.hosts[b->list.count].slots = slots;
    index_put(b, b->list.count++);
    return HVD_OK;
}

/* Hand the list over (the index is no longer needed), or free it all on failure. */
static hvd_status_t finish(builder_t *b, hvd_status_t st, hvd_host_list_t *list_p) {
    free(b->index);
    if (st != HVD_OK) {
        hvd__hosts_fini(&b->list);
        return st;
    }
    *list_p = b->list;
    return HVD_OK;
}

/* One -H item, already trimmed and non-empty. */
static hvd_status_t parse_item(builder_t *b, const char *item, size_t n) {
    const char *colon = memchr(item, ':', n);
    if (!colon)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "invalid host '%.*s' in -H: expected host:slots (e.g. worker-0:2)",
                              (int)n, item);
    size_t name_len = (size_t)(colon - item);
    name_check_t nc = check_host_name(item, name_len);
    if (nc != NAME_OK)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "invalid host '%.*s' in -H: %s", (int)n, item,
                              name_problem(nc));
    const char *digits = colon + 1;
    size_t digits_len = n - name_len - 1;
    int slots = 0;
    switch (parse_slots(digits, digits_len, &slots)) {
    case SLOTS_NOT_NUMBER:
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "invalid host '%.*s' in -H: slots '%.*s' is not a number (expected "
                              "a whole number >= 0)",
                              (int)n, item, (int)digits_len, digits);
    case SLOTS_TOO_MANY:
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "invalid host '%.*s' in -H: slots '%.*s' is more than %d", (int)n,
                              item, (int)digits_len, digits, HOST_SLOTS_MAX);
    case SLOTS_OK:
        break;
    }
    if (find_host(b, item, name_len) >= 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "host '%.*s' appears twice in -H; give each host once with all its "
                              "slots",
                              (int)name_len, item);
    return append_host(b, item, name_len, slots);
}

hvd_status_t hvd__hosts_parse(const char *text, hvd_host_list_t *list_p) {
    builder_t b = {0};
    hvd_status_t st = HVD_OK;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char *item = p;
        trim(&item, &n);
        if (n == 0) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "empty host in -H '%s' (a stray or trailing comma?): expected "
                                "host:slots,host:slots (e.g. worker-0:2,worker-1:2)",
                                text);
            break;
        }
        st = parse_item(&b, item, n);
        if (st != HVD_OK || !comma)
            break;
        p = comma + 1;
    }
    return finish(&b, st, list_p);
}

/* Hostfile parsing state: the line each host came from, for the duplicate message. */
typedef struct {
    builder_t b;
    int *lines;
    size_t lines_cap;
    const char *path;
} hostfile_t;

static hvd_status_t parse_hostfile_line(hostfile_t *hf, char *line, int lineno) {
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    const char *s = line;
    size_t n = strlen(line);
    trim(&s, &n);
    if (n == 0)
        return HVD_OK;
    size_t name_len = 0;
    while (name_len < n && !isspace((unsigned char)s[name_len]) && s[name_len] != '=')
        name_len++;
    name_check_t nc = check_host_name(s, name_len);
    if (nc != NAME_OK)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: invalid host '%.*s' in line '%.*s': %s",
                              hf->path, lineno, (int)name_len, s, (int)n, s, name_problem(nc));
    const char *rest = s + name_len;
    size_t rn = n - name_len;
    trim(&rest, &rn);
    int slots = 1;
    if (rn > 0) {
        if (rn < 5 || strncmp(rest, "slots", 5) != 0)
            goto err_syntax;
        rest += 5, rn -= 5;
        trim(&rest, &rn);
        if (rn == 0 || *rest != '=')
            goto err_syntax;
        rest++, rn--;
        trim(&rest, &rn);
        switch (parse_slots(rest, rn, &slots)) {
        case SLOTS_NOT_NUMBER:
            goto err_syntax;
        case SLOTS_TOO_MANY:
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s:%d: slots in line '%.*s' is more than %d", hf->path, lineno,
                                  (int)n, s, HOST_SLOTS_MAX);
        case SLOTS_OK:
            break;
        }
    }
    long dup = find_host(&hf->b, s, name_len);
    if (dup >= 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "%s:%d: host '%.*s' appears twice (first on line %d); give each "
                              "host once with all its slots",
                              hf->path, lineno, (int)name_len, s, hf->lines[dup]);
    if (hf->b.list.count >= HOST_COUNT_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "%s:%d: more than %d hosts (is it the right "
                              "file?)",
                              hf->path, lineno, HOST_COUNT_MAX);
    if (hf->b.list.count == hf->lines_cap) {
        size_t cap = hf->lines_cap ? hf->lines_cap * 2 : 16;
        int *grown = realloc(hf->lines, cap * sizeof *grown);
        if (!grown)
            return no_memory();
        hf->lines = grown;
        hf->lines_cap = cap;
    }
    hf->lines[hf->b.list.count] = lineno;
    return append_host(&hf->b, s, name_len, slots);
err_syntax:
    return hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: expected 'host slots=N', got '%.*s'",
                          hf->path, lineno, (int)n, s);
}

hvd_status_t hvd__hosts_parse_file(const char *path, hvd_host_list_t *list_p) {
    hostfile_t hf = {.path = path};
    hvd_text_reader_t r;
    hvd_status_t st =
        hvd__text_reader_open(&r, path, "hostfile", HVD_HOSTFILE_MAX_LINE, HVD_HOSTFILE_MAX_BYTES);
    if (st != HVD_OK)
        return st;
    for (;;) {
        char *line;
        size_t len;
        int lineno, more;
        st = hvd__text_reader_next(&r, &line, &len, &lineno, &more);
        if (st != HVD_OK || !more)
            break;
        st = parse_hostfile_line(&hf, line, lineno);
        if (st != HVD_OK)
            break;
    }
    hvd__text_reader_close(&r);
    if (st == HVD_OK && hf.b.list.count == 0)
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "hostfile %s lists no hosts", path);
    free(hf.lines);
    return finish(&hf.b, st, list_p);
}

/* One line of a discovery script's output, trimmed and non-empty: "host" or "host:slots". */
static hvd_status_t parse_discovered(builder_t *b, const char *s, size_t n, int lineno,
                                     int default_slots) {
    const char *colon = memchr(s, ':', n);
    size_t name_len = colon ? (size_t)(colon - s) : n;
    name_check_t nc = check_host_name(s, name_len);
    if (nc != NAME_OK)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "host discovery output line %d '%.*s': %s (expected host or "
                              "host:slots)",
                              lineno, (int)(n > 300 ? 300 : n), s, name_problem(nc));
    int slots = default_slots;
    if (colon) {
        const char *digits = colon + 1;
        size_t digits_len = n - name_len - 1;
        if (parse_slots(digits, digits_len, &slots) != SLOTS_OK || slots < 1)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "host discovery output line %d '%.*s': slots '%.*s' is not a "
                                  "whole number from 1 to %d",
                                  lineno, (int)(n > 300 ? 300 : n), s,
                                  (int)(digits_len > 40 ? 40 : digits_len), digits, HOST_SLOTS_MAX);
    } else if (default_slots < 1) {
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "host discovery output line %d '%.*s' gives no slots and "
                              "--slots-per-host was not set: print host:slots, or pass "
                              "--slots-per-host",
                              lineno, (int)(n > 300 ? 300 : n), s);
    }
    if (find_host(b, s, name_len) >= 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "host discovery output line %d: host '%.*s' is listed twice", lineno,
                              (int)name_len, s);
    return append_host(b, s, name_len, slots);
}

hvd_status_t hvd__hosts_parse_discovery(const char *text, size_t len, int default_slots,
                                        hvd_host_list_t *list_p) {
    builder_t b = {0};
    hvd_status_t st = HVD_OK;
    int lineno = 0;
    for (size_t off = 0; off < len && st == HVD_OK;) {
        const char *line = text + off;
        const char *nl = memchr(line, '\n', len - off);
        size_t n = nl ? (size_t)(nl - line) : len - off;
        off += n + (nl != NULL);
        lineno++;
        if (memchr(line, '\0', n)) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "host discovery output line %d holds a NUL byte", lineno);
            break;
        }
        trim(&line, &n);
        if (n)
            st = parse_discovered(&b, line, n, lineno, default_slots);
    }
    return finish(&b, st, list_p);
}

void hvd__hosts_fini(hvd_host_list_t *list) {
    for (size_t i = 0; i < list->count; i++)
        free(list->hosts[i].name);
    free(list->hosts);
    list->hosts = NULL;
    list->count = 0;
}

/* "h1:2, h2:2" for the too-few-slots message, cut short with "..." on huge lists. */
static void describe_hosts(const hvd_host_list_t *hosts, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < hosts->count; i++) {
        int n = snprintf(out + used, size - used, "%s%s:%d", i ? ", " : "", hosts->hosts[i].name,
                         hosts->hosts[i].slots);
        if (n < 0 || (size_t)n >= size - used) {
            if (size > 4)
                strcpy(out + size - 4, "...");
            return;
        }
        used += (size_t)n;
    }
}

hvd_status_t hvd__slot_plan_create(const hvd_host_list_t *hosts, int num_proc,
                                   hvd_slot_plan_t *plan_p) {
    if (num_proc < 1)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "-np must be at least 1 (got %d)", num_proc);
    long long total = 0;
    for (size_t i = 0; i < hosts->count; i++)
        total += hosts->hosts[i].slots;
    if (total < num_proc) {
        char list[512];
        describe_hosts(hosts, list, sizeof list);
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "requested %d processes but the hosts provide only %lld slots (%s)",
                              num_proc, total, list);
    }
    hvd_status_t st = HVD_OK;
    /* local ranks never reach num_proc, so num_proc entries index every local rank */
    hvd_slot_t *slots = calloc((size_t)num_proc, sizeof *slots);
    int *hosts_with_lr = calloc((size_t)num_proc, sizeof *hosts_with_lr);
    int *ranks_on_host = calloc(hosts->count, sizeof *ranks_on_host);
    size_t *host_of_rank = calloc((size_t)num_proc, sizeof *host_of_rank);
    if (!slots || !hosts_with_lr || !ranks_on_host || !host_of_rank) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory planning %d ranks", num_proc);
        goto err_free_slots;
    }
    /* Reference 2.2: hosts in order, local ranks 0..slots-1 on each; a host's cross_rank for a
     * local rank is how many earlier hosts have that local rank. */
    int rank = 0;
    for (size_t h = 0; h < hosts->count && rank < num_proc; h++) {
        for (int lr = 0; lr < hosts->hosts[h].slots && rank < num_proc; lr++, rank++) {
            slots[rank].rank = rank;
            slots[rank].size = num_proc;
            slots[rank].local_rank = lr;
            slots[rank].cross_rank = hosts_with_lr[lr]++;
            slots[rank].host = hosts->hosts[h].name;
            host_of_rank[rank] = h;
            ranks_on_host[h]++;
        }
    }
    /* Sizes count assigned ranks only: with fewer ranks than slots the last host used is
     * partly filled, and its local_size and the cross_size of high local ranks shrink. */
    for (int r = 0; r < num_proc; r++) {
        slots[r].local_size = ranks_on_host[host_of_rank[r]];
        slots[r].cross_size = hosts_with_lr[slots[r].local_rank];
    }
    free(host_of_rank);
    free(ranks_on_host);
    free(hosts_with_lr);
    plan_p->slots = slots;
    plan_p->count = (size_t)num_proc;
    return HVD_OK;
err_free_slots:
    free(host_of_rank);
    free(ranks_on_host);
    free(hosts_with_lr);
    free(slots);
    return st;
}

void hvd__slot_plan_fini(hvd_slot_plan_t *plan) {
    free(plan->slots);
    plan->slots = NULL;
    plan->count = 0;
}

int hvd__slot_format(const hvd_slot_t *s, char *out, size_t out_size) {
    return snprintf(out, out_size,
                    "rank=%d size=%d local_rank=%d local_size=%d cross_rank=%d cross_size=%d "
                    "host=%s",
                    s->rank, s->size, s->local_rank, s->local_size, s->cross_rank, s->cross_size,
                    s->host);
}
