/* Control-plane messages over a group: byte strings whose size only the sender knows (the
 * core's request and response lists). One round each, direct to and from the root: these
 * messages are small and the root is the coordinator anyway. Receivers allocate what the
 * frame header announces, after checking it against max. */
#ifndef HVD_COLLECTIVES_CONTROL_H
#define HVD_COLLECTIVES_CONTROL_H

#include "collectives/group.h"

/* Every rank sends len bytes of mine to root. On root, bufs[r] (malloc'd, the caller frees
 * each, its own included) and lens[r] receive every rank's bytes; other ranks pass NULL for
 * both. A message over max bytes is HVD_ERR_PROTOCOL naming its sender. */
hvd_status_t hvd__control_gather(hvd_group_t *g, int root, const void *mine, size_t len, size_t max,
                                 uint8_t **bufs, size_t *lens, const char *what);

/* Root's *buf_p and *len_p go to every rank: on the others *buf_p becomes a malloc'd copy (the
 * caller frees it). */
hvd_status_t hvd__control_bcast(hvd_group_t *g, int root, uint8_t **buf_p, size_t *len_p,
                                size_t max, const char *what);

#endif
