/* Expanding Slurm's count and host lists (slurm_env.h). Numbers are limited to 9 digits so no
 * arithmetic on them overflows; a host entry's first bracket group is multiplied out with whatever
 * follows it, recursively, in one name buffer of HVD_SLURM_NAME_MAX bytes. */
#include "slurm/slurm_env.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Numbers in either form: at most 9 digits, so no arithmetic on them can overflow an int. */
#define NUM_DIGITS_MAX 9

/* Reads the decimal number at *p (1..NUM_DIGITS_MAX digits); 0 when there is none. */
static int read_num(const char **p, const char *end, long *v, int *digits) {
    const char *s = *p;
    long x = 0;
    int d = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (++d > NUM_DIGITS_MAX)
            return 0;
        x = 10 * x + (*s++ - '0');
    }
    if (!d)
        return 0;
    *p = s;
    *v = x;
    if (digits)
        *digits = d;
    return 1;
}

static hvd_status_t bad(const char *what, const char *text) {
    return hvd__error_set(HVD_ERR_INVALID_ARG, "Slurm %s '%.200s%s' is malformed", what, text,
                          strlen(text) > 200 ? "..." : "");
}

hvd_status_t hvd__slurm_counts_expand(const char *text, int **counts_p, size_t *n_p) {
    *counts_p = NULL;
    *n_p = 0;
    const char *p = text, *end = text + strlen(text);
    int *counts = NULL;
    size_t n = 0, cap = 0;
    while (p < end) {
        long v, times = 1;
        if (!read_num(&p, end, &v, NULL))
            goto malformed;
        if (p < end && *p == '(') {
            p++;
            if (p >= end || *p++ != 'x' || !read_num(&p, end, &times, NULL) || times < 1 ||
                p >= end || *p++ != ')')
                goto malformed;
        }
        if (p < end && *p++ != ',')
            goto malformed;
        if (p == end && p[-1] == ',')
            goto malformed; /* a trailing comma */
        if ((size_t)times > HVD_SLURM_MAX_NODES - n) {
            free(counts);
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "Slurm per-node count list '%.200s' is longer than %d nodes",
                                  text, HVD_SLURM_MAX_NODES);
        }
        if (n + (size_t)times > cap) {
            size_t want = cap ? 2 * cap : 16;
            while (want < n + (size_t)times)
                want *= 2;
            int *grown = realloc(counts, want * sizeof *grown);
            if (!grown) {
                free(counts);
                return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
            }
            counts = grown;
            cap = want;
        }
        for (long i = 0; i < times; i++)
            counts[n++] = (int)v;
    }
    if (!n)
        goto malformed;
    *counts_p = counts;
    *n_p = n;
    return HVD_OK;
malformed:
    free(counts);
    return bad("per-node count list", text);
}

typedef struct {
    char **v;
    size_t n, cap;
    const char *text; /* the whole list, for errors */
} names_t;

static hvd_status_t push(names_t *l, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] >= 127)
            return bad("host list", l->text);
    if (l->n == HVD_SLURM_MAX_NODES)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "Slurm host list '%.200s' names more than %d hosts", l->text,
                              HVD_SLURM_MAX_NODES);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **grown = realloc(l->v, cap * sizeof *grown);
        if (!grown)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        l->v = grown;
        l->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->v[l->n++] = copy;
    return HVD_OK;
}

/* Every name of the entry e[0..len) (no top-level comma in it), each after buf[0..blen). The
 * first bracket group multiplies with whatever follows it, recursively. */
static hvd_status_t expand_entry(const char *e, size_t len, char *buf, size_t blen, names_t *out) {
    const char *open = memchr(e, '[', len), *end = e + len;
    size_t lit = open ? (size_t)(open - e) : len;
    if (memchr(e, ']', lit))
        return bad("host list", out->text);
    if (blen + lit > HVD_SLURM_NAME_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "Slurm host list '%.200s' has a name longer than %d bytes", out->text,
                              HVD_SLURM_NAME_MAX);
    memcpy(buf + blen, e, lit);
    blen += lit;
    if (!open)
        return blen ? push(out, buf, blen) : bad("host list", out->text);
    const char *close = memchr(open, ']', (size_t)(end - open));
    if (!close || memchr(open + 1, '[', (size_t)(close - open - 1)) || close == open + 1)
        return bad("host list", out->text);
    const char *p = open + 1;
    for (;;) {
        long lo, hi;
        int width;
        if (!read_num(&p, close, &lo, &width))
            return bad("host list", out->text);
        hi = lo;
        if (p < close && *p == '-') {
            p++;
            if (!read_num(&p, close, &hi, NULL) || hi < lo)
                return bad("host list", out->text);
        }
        if (p < close && *p != ',')
            return bad("host list", out->text);
        if (hi - lo >= HVD_SLURM_MAX_NODES)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "Slurm host list '%.200s' names more than %d hosts", out->text,
                                  HVD_SLURM_MAX_NODES);
        for (long v = lo; v <= hi; v++) {
            char num[NUM_DIGITS_MAX + 2];
            int w = snprintf(num, sizeof num, "%0*ld", width, v);
            if (blen + (size_t)w > HVD_SLURM_NAME_MAX)
                return hvd__error_set(HVD_ERR_INVALID_ARG,
                                      "Slurm host list '%.200s' has a name longer than %d bytes",
                                      out->text, HVD_SLURM_NAME_MAX);
            memcpy(buf + blen, num, (size_t)w);
            hvd_status_t st =
                expand_entry(close + 1, (size_t)(end - close - 1), buf, blen + (size_t)w, out);
            if (st != HVD_OK)
                return st;
        }
        if (p == close)
            return HVD_OK;
        if (++p == close) /* "[1,]" */
            return bad("host list", out->text);
    }
}

void hvd__slurm_names_free(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

hvd_status_t hvd__slurm_hostlist_expand(const char *text, char ***names_p, size_t *n_p) {
    *names_p = NULL;
    *n_p = 0;
    names_t out = {.text = text};
    char buf[HVD_SLURM_NAME_MAX + 1];
    const char *start = text;
    int depth = 0;
    hvd_status_t st = HVD_OK;
    for (const char *p = text;; p++) {
        if (*p == '[' && ++depth > 1)
            st = bad("host list", text);
        else if (*p == ']' && --depth < 0)
            st = bad("host list", text);
        else if ((*p == ',' && depth == 0) || *p == '\0') {
            if (*p == '\0' && depth != 0)
                st = bad("host list", text);
            else if (p == start)
                st = bad("host list", text); /* an empty entry */
            else
                st = expand_entry(start, (size_t)(p - start), buf, 0, &out);
            start = p + 1;
        }
        if (st != HVD_OK || *p == '\0')
            break;
    }
    if (st != HVD_OK) {
        hvd__slurm_names_free(out.v, out.n);
        return st;
    }
    *names_p = out.v;
    *n_p = out.n;
    return HVD_OK;
}
