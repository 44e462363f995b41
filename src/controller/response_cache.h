/* The response cache of the core (docs/libhvd.md, "Named asynchronous operations: the core"). Once
 * a collective has been negotiated, its request is cached under its name and given a bit; from then
 * on, a rank that has the same request ready only sets that bit in the per-cycle bit vector, and
 * when every rank set it the collective runs without a round trip through the coordinator. A name
 * that comes back with other parameters (shape, dtype, op, ...) is INVALID: its entry must be
 * erased everywhere and the request negotiated again, so a changed tensor is never run with stale
 * parameters.
 *
 * The bit numbering is the contract between ranks: every rank applies the same sequence of
 * put/touch/erase calls (driven by the identical response lists and bit-vector results), and
 * the cache is a pure function of that sequence, so all ranks agree on which name each bit
 * means. That is why new entries take the lowest free bit, eviction takes the least recently
 * used entry by a recency order that only these calls change, and lookup changes nothing.
 *
 * Memory grows with the bits in use, not with the capacity, because the capacity comes from
 * HOROVOD_CACHE_CAPACITY and may be as large as INT_MAX.
 *
 * A cache is owned by one thread (the background thread); no function locks or blocks. */
#ifndef HVD_CONTROLLER_RESPONSE_CACHE_H
#define HVD_CONTROLLER_RESPONSE_CACHE_H

#include "wire/negotiate.h" /* hvd_request_t */

#include <stdint.h>

typedef struct hvd_cache hvd_cache_t;

typedef enum { HVD_CACHE_MISS = 0, HVD_CACHE_HIT = 1, HVD_CACHE_INVALID = 2 } hvd_cache_state_t;

/* Create an empty cache of at most capacity (>= 1) entries, bits 0..capacity-1. Only a small
 * table is allocated now; it grows as bits are used. Release with hvd__cache_destroy.
 * HVD_ERR_INVALID_ARG for capacity 0 (a disabled cache is no cache, the caller's decision),
 * HVD_ERR_NO_MEMORY. *c_p is written only on success. */
hvd_status_t hvd__cache_create(uint32_t capacity, hvd_cache_t **c_p);

/* Free the cache and every copy it holds; NULL is ignored so that error paths need no test. */
void hvd__cache_destroy(hvd_cache_t *c);

/* HIT (and the entry's bit in *bit_p) when req->name is cached with the same type, dtype, op,
 * root, ndims, dims[0..ndims) and prescale and postscale factors; the factors are compared as
 * bits (memcmp) so that a NaN factor hits itself, as every rank computes it the same way.
 * INVALID (and *bit_p) when the name is cached with other parameters; MISS otherwise, *bit_p
 * untouched. req->rank is ignored: the cache is shared by every rank's view of the name.
 * It does not change the recency order, so that a rank may look up requests that other ranks
 * do not have yet without making its bit numbering diverge. bit_p may be NULL. */
hvd_cache_state_t hvd__cache_lookup(const hvd_cache_t *c, const hvd_request_t *req,
                                    uint32_t *bit_p);

/* Cache a copy of req (the name is copied, the caller keeps its request; rank is stored as -1)
 * as the most recently used entry. A name already cached has its entry replaced in place and
 * keeps its bit, so the other ranks' bits stay valid. Otherwise the entry takes the lowest
 * free bit, which keeps the bit vector short; when the cache is full, the least recently used
 * entry is evicted and its bit reused (*evicted_p = 1, else 0), which the caller may report
 * as the reference's eviction warning. *bit_p receives the bit. bit_p and evicted_p may be
 * NULL. HVD_ERR_INVALID_ARG for a NULL name or ndims > HVD_NEG_MAX_DIMS, HVD_ERR_NO_MEMORY;
 * on error the cache and the outputs are unchanged. */
hvd_status_t hvd__cache_put(hvd_cache_t *c, const hvd_request_t *req, uint32_t *bit_p,
                            int *evicted_p);

/* The cached request at bit, or NULL when the bit is free or out of range. The cache owns it;
 * the pointer is valid until the next put, erase or destroy (a put may move the table). */
const hvd_request_t *hvd__cache_get(const hvd_cache_t *c, uint32_t bit);

/* Mark bit the most recently used, as when its response runs from the cache; a free or out
 * of range bit is ignored. */
void hvd__cache_touch(hvd_cache_t *c, uint32_t bit);

/* Free bit: its name is no longer cached (an invalid entry, erased on every rank). A free or
 * out of range bit is ignored. */
void hvd__cache_erase(hvd_cache_t *c, uint32_t bit);

/* 1 + the highest bit in use, 0 when empty: the length of the bit vector every rank uses,
 * which is the same on every rank because the bit assignment is. */
uint32_t hvd__cache_nbits(const hvd_cache_t *c);

/* The capacity given at creation. */
uint32_t hvd__cache_capacity(const hvd_cache_t *c);

#endif
