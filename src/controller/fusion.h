/* Tensor fusion planning (docs/libhvd.md, "Named asynchronous operations: the core"): merge
 * consecutive ALLREDUCE (and ADASUM, REDUCESCATTER) responses that agree on type, dtype, reduce op
 * and scale factors into one response whose names and sizes list every tensor, while the total
 * stays within the threshold. A response that does not match may be skipped over (and kept, in
 * order, right after the fused one) as long as the fused and skipped bytes together stay within the
 * threshold; the look-ahead stops at a response of another type (a broadcast, a barrier),
 * which keeps the order of non-reductions. A tensor larger than the threshold runs alone;
 * threshold 0 fuses nothing.
 * Other types are never fused here (allgather fusion is not done yet). */
#ifndef HVD_CONTROLLER_FUSION_H
#define HVD_CONTROLLER_FUSION_H

#include "wire/negotiate.h"

/* Rewrite l in place. HVD_ERR_NO_MEMORY leaves l unchanged. */
hvd_status_t hvd__fuse_responses(hvd_response_list_t *l, size_t threshold);

#endif
