/* host_hash (as in Horovod): a name for "this machine, as seen from this set of kernel
 * namespaces", so the driver can tell which task services share a physical host even when
 * the user wrote the same host under different names, and tell apart containers on one
 * machine that share a host name.
 *
 *   "<host name up to the first '.'>-" + hex(first 16 bytes of SHA-256(
 *       "<full host name>-<space-joined /proc/self/ns link targets>[-<salt>]"))
 *
 * The reference uses MD5; the digest differs, the shape and the inputs are the same. An empty
 * or NULL salt is ignored, as in the reference. */
#ifndef HVD_RUNNER_HOST_HASH_H
#define HVD_RUNNER_HOST_HASH_H

#include <hvd/types.h>

#include <stddef.h>

/* Room for any host_hash and its NUL. */
#define HVD_HOST_HASH_MAX 128

/* The hash of given inputs (pure; tests). Truncates the short name if out is small. */
void hvd__host_hash_compute(const char *hostname, const char *namespaces, const char *salt,
                            char *out, size_t out_size);

/* This process's host_hash into out[HVD_HOST_HASH_MAX]. HVD_ERR_IO when the host name
 * cannot be read. Does not block. */
hvd_status_t hvd__host_hash(const char *salt, char *out, size_t out_size);

#endif
