#include "runner/hosts.h"

#include "common/error.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Host names as the reference accepts them ([\w.-]+), which includes IPv4 literals. */
static int valid_host_name(const char *s, size_t n) {
    if (n == 0 || n > 255)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-'))
            return 0;
    return 1;
}

/* Parse a decimal slot count in [0, 1e6]. */
static int parse_slots(const char *s, size_t n, int *slots_p) {
    if (n == 0 || n > 7)
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > 1000000)
        return -1;
    *slots_p = v;
    return 0;
}

static hvd_status_t list_add(hvd_host_list_t *l, const char *name, size_t name_len, int slots,
                             const char *where) {
    for (size_t i = 0; i < l->count; i++)
        if (strlen(l->hosts[i].name) == name_len && memcmp(l->hosts[i].name, name, name_len) == 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "host '%.*s' appears twice in %s; give each host once with all "
                                  "its slots",
                                  (int)name_len, name, where);
    hvd_host_t *grown = realloc(l->hosts, (l->count + 1) * sizeof *grown);
    if (!grown)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory parsing hosts");
    l->hosts = grown;
    char *copy = strndup(name, name_len);
    if (!copy)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory parsing hosts");
    l->hosts[l->count].name = copy;
    l->hosts[l->count].slots = slots;
    l->count++;
    return HVD_OK;
}

static void trim(const char **s, size_t *n) {
    while (*n && isspace((unsigned char)**s))
        (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

hvd_status_t hvd__hosts_parse(const char *text, hvd_host_list_t *list_p) {
    hvd_host_list_t l = {0};
    hvd_status_t st = HVD_OK;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char *item = p;
        trim(&item, &n);
        const char *colon = memchr(item, ':', n);
        int slots;
        if (n == 0) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "empty host in -H '%s': expected host:slots,host:slots (e.g. "
                                "worker-0:2,worker-1:2)",
                                text);
            goto err;
        }
        if (!colon) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "invalid host '%.*s' in -H: expected host:slots (e.g. "
                                "worker-0:2)",
                                (int)n, item);
            goto err;
        }
        size_t name_len = (size_t)(colon - item);
        if (!valid_host_name(item, name_len)) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "invalid host '%.*s' in -H: the name may hold only letters, "
                                "digits, '_', '.' and '-'",
                                (int)n, item);
            goto err;
        }
        if (parse_slots(colon + 1, n - name_len - 1, &slots) != 0) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "invalid host '%.*s' in -H: slots '%.*s' is not a number", (int)n,
                                item, (int)(n - name_len - 1), colon + 1);
            goto err;
        }
        st = list_add(&l, item, name_len, slots, "-H");
        if (st != HVD_OK)
            goto err;
        if (!comma)
            break;
        p = comma + 1;
    }
    *list_p = l;
    return HVD_OK;
err:
    hvd__hosts_fini(&l);
    return st;
}

/* One hostfile line: "host slots=N" (spaces around '=' allowed), or "host" alone meaning one
 * slot (as MPI hostfiles do). Comments start at '#'. */
static hvd_status_t parse_hostfile_line(hvd_host_list_t *l, char *line, const char *path,
                                        int lineno) {
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    const char *s = line;
    size_t n = strlen(line);
    trim(&s, &n);
    if (n == 0)
        return HVD_OK;
    size_t name_len = 0;
    while (name_len < n && !isspace((unsigned char)s[name_len]))
        name_len++;
    char where[512];
    snprintf(where, sizeof where, "hostfile %s", path);
    if (!valid_host_name(s, name_len))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: invalid host name '%.*s' in line '%.*s'",
                              path, lineno, (int)name_len, s, (int)n, s);
    const char *rest = s + name_len;
    size_t rn = n - name_len;
    trim(&rest, &rn);
    int slots = 1;
    if (rn > 0) {
        if (rn < 5 || strncmp(rest, "slots", 5) != 0)
            goto bad;
        rest += 5, rn -= 5;
        trim(&rest, &rn);
        if (rn == 0 || *rest != '=')
            goto bad;
        rest++, rn--;
        trim(&rest, &rn);
        if (parse_slots(rest, rn, &slots) != 0)
            goto bad;
    }
    hvd_status_t st = list_add(l, s, name_len, slots, where);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "%s:%d", path, lineno);
    return HVD_OK;
bad:
    return hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: expected 'host slots=N', got '%.*s'", path,
                          lineno, (int)n, s);
}

hvd_status_t hvd__hosts_parse_file(const char *path, hvd_host_list_t *list_p) {
    FILE *f = fopen(path, "r");
    if (!f)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "cannot open hostfile %s: %s", path,
                              strerror(errno));
    hvd_host_list_t l = {0};
    hvd_status_t st = HVD_OK;
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: line too long", path, lineno);
            goto err;
        }
        st = parse_hostfile_line(&l, line, path, lineno);
        if (st != HVD_OK)
            goto err;
    }
    if (ferror(f)) {
        st = hvd__error_set(HVD_ERR_IO, "cannot read hostfile %s: %s", path, strerror(errno));
        goto err;
    }
    if (l.count == 0) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "hostfile %s lists no hosts", path);
        goto err;
    }
    fclose(f);
    *list_p = l;
    return HVD_OK;
err:
    fclose(f);
    hvd__hosts_fini(&l);
    return st;
}

void hvd__hosts_fini(hvd_host_list_t *list) {
    for (size_t i = 0; i < list->count; i++)
        free(list->hosts[i].name);
    free(list->hosts);
    list->hosts = NULL;
    list->count = 0;
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
        size_t n = 0;
        list[0] = '\0';
        for (size_t i = 0; i < hosts->count && n < sizeof list - 16; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s:%d", i ? ", " : "",
                                  hosts->hosts[i].name, hosts->hosts[i].slots);
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "requested %d processes but the hosts provide only %lld slots (%s)",
                              num_proc, total, list);
    }
    hvd_slot_t *slots = calloc((size_t)num_proc, sizeof *slots);
    /* per local rank: how many hosts have it so far (its next cross rank) */
    int *cross_count = calloc((size_t)num_proc, sizeof *cross_count);
    int *host_ranks = calloc(hosts->count ? hosts->count : 1, sizeof *host_ranks);
    if (!slots || !cross_count || !host_ranks) {
        free(slots);
        free(cross_count);
        free(host_ranks);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory planning %d slots", num_proc);
    }
    int rank = 0;
    size_t *slot_host = calloc((size_t)num_proc, sizeof *slot_host);
    if (!slot_host) {
        free(slots);
        free(cross_count);
        free(host_ranks);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory planning %d slots", num_proc);
    }
    for (size_t h = 0; h < hosts->count && rank < num_proc; h++) {
        for (int lr = 0; lr < hosts->hosts[h].slots && rank < num_proc; lr++, rank++) {
            slots[rank].rank = rank;
            slots[rank].size = num_proc;
            slots[rank].local_rank = lr;
            slots[rank].cross_rank = cross_count[lr]++;
            slots[rank].host = hosts->hosts[h].name;
            slot_host[rank] = h;
            host_ranks[h]++;
        }
    }
    for (int r = 0; r < num_proc; r++) {
        slots[r].local_size = host_ranks[slot_host[r]];
        slots[r].cross_size = cross_count[slots[r].local_rank];
    }
    free(slot_host);
    free(cross_count);
    free(host_ranks);
    plan_p->slots = slots;
    plan_p->count = (size_t)num_proc;
    return HVD_OK;
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
