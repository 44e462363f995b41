/* The coordinator's table (reference §8.4, §8.6): rank 0 of a group feeds it every rank's
 * requests, in rank order, cycle after cycle; a name is ready once every rank that has not
 * joined has requested it. Ready names come out in the order they became ready, each as a
 * response for every rank to execute, or as an ERROR response when the ranks disagree
 * (dtype, op, shape, scale factors, reduce op, broadcast root), with the reference's message
 * followed by the two ranks that disagree. JOIN requests count a rank as done for every
 * name; when all ranks have joined, a JOIN response (with the last rank to join) follows. */
#ifndef HVD_CONTROLLER_COORDINATOR_H
#define HVD_CONTROLLER_COORDINATOR_H

#include "wire/negotiate.h"

typedef struct hvd_coord hvd_coord_t;

hvd_status_t hvd__coord_create(int size, hvd_coord_t **c_p);
void hvd__coord_destroy(hvd_coord_t *c);

/* Record one request (copied). HVD_ERR_INVALID_ARG for a rank outside the group or a second
 * request of the same name from the same rank before it was answered. */
hvd_status_t hvd__coord_add(hvd_coord_t *c, const hvd_request_t *req);

/* Move every ready name into out (appended; out->items grows), oldest first, then a JOIN
 * response if every rank has joined. */
hvd_status_t hvd__coord_take_ready(hvd_coord_t *c, hvd_response_list_t *out);

/* Names some rank has requested that are not ready yet. */
size_t hvd__coord_pending(const hvd_coord_t *c);

#endif
