/* Tensor fusion planning (fusion.h). */
#include "controller/fusion.h"

#include "collectives/dtype.h"
#include "common/error.h"

#include <stdlib.h>
#include <string.h>

static int fusable(const hvd_response_t *r) {
    return (r->type == HVD_REQ_ALLREDUCE || r->type == HVD_REQ_ADASUM ||
            r->type == HVD_REQ_REDUCESCATTER) &&
           r->nnames == 1 && r->nsizes == 1;
}

static int same_kind(const hvd_response_t *a, const hvd_response_t *b) {
    return a->type == b->type && a->dtype == b->dtype && a->op == b->op &&
           a->prescale == b->prescale && a->postscale == b->postscale && a->pset == b->pset;
}

static size_t bytes_of(const hvd_response_t *r) {
    return (size_t)r->sizes[0] * hvd__dtype_size((hvd_dtype_t)r->dtype);
}

hvd_status_t hvd__fuse_responses(hvd_response_list_t *l, size_t threshold) {
    uint32_t n = l->count;
    if (threshold == 0 || n < 2)
        return HVD_OK;
    /* Plan first (group[i] = output index, count[o] = members), allocate every merged
     * array, and only then move anything, so a failure leaves l as it was. */
    uint32_t *group = malloc(n * sizeof *group), *count = calloc(n, sizeof *count);
    hvd_response_t *out = calloc(n, sizeof *out);
    uint8_t *used = calloc(n, 1);
    hvd_status_t st = HVD_OK;
    if (!group || !count || !out || !used) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory planning fusion");
        goto done;
    }
    uint32_t nout = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (used[i])
            continue;
        hvd_response_t *first = &l->items[i];
        uint32_t o = nout++;
        used[i] = 1;
        group[i] = o;
        count[o] = 1;
        if (!fusable(first) || bytes_of(first) > threshold)
            continue;
        size_t fused = bytes_of(first), skipped = 0;
        for (uint32_t j = i + 1; j < n; j++) {
            if (used[j])
                continue;
            hvd_response_t *r = &l->items[j];
            size_t b = fusable(r) ? bytes_of(r) : threshold;
            if (fusable(r) && same_kind(first, r) && fused + skipped + b <= threshold) {
                used[j] = 1;
                group[j] = o;
                count[o]++;
                fused += b;
                continue;
            }
            /* Look past it only while what we look past still fits beside the fusion. */
            skipped += b;
            if (fused + skipped > threshold)
                break;
        }
    }
    for (uint32_t o = 0; o < nout; o++) {
        if (count[o] < 2)
            continue;
        out[o].names = malloc(count[o] * sizeof *out[o].names);
        out[o].sizes = malloc(count[o] * sizeof *out[o].sizes);
        if (!out[o].names || !out[o].sizes) {
            for (uint32_t k = 0; k <= o; k++) {
                free(out[k].names);
                free(out[k].sizes);
            }
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory planning fusion");
            goto done;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t o = group[i];
        hvd_response_t *r = &l->items[i];
        if (count[o] < 2) {
            out[o] = *r;
            continue;
        }
        hvd_response_t *f = &out[o];
        if (f->nnames == 0) { /* the first member gives the fused response its fields */
            char **names = f->names;
            int64_t *sizes = f->sizes;
            *f = *r;
            f->names = names;
            f->sizes = sizes;
            f->nnames = f->nsizes = 0;
        } else {
            free(r->error);
        }
        f->names[f->nnames++] = r->names[0];
        f->sizes[f->nsizes++] = r->sizes[0];
        free(r->names);
        free(r->sizes);
    }
    free(l->items);
    l->items = out;
    l->count = nout;
    out = NULL;
done:
    free(group);
    free(count);
    free(out);
    free(used);
    return st;
}
