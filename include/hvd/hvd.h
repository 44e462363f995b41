/* libhvd: the library every training process links.
 *
 * Unless stated otherwise a function may be called from any thread, returns an hvd_status_t
 * (HVD_OK or a negative error, see types.h) and on error leaves a description in
 * hvd_last_error() of the calling thread. Outputs are written only on success. */
#ifndef HVD_HVD_H
#define HVD_HVD_H

#include <hvd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_VERSION_MAJOR 0
#define HVD_VERSION_MINOR 1
#define HVD_VERSION_PATCH 0

/* Static name of a status code ("HVD_ERR_TIMEOUT", ...); never NULL, never freed. Unknown
 * values give "HVD_ERR_UNKNOWN". Does not block; thread safe. */
HVD_API const char *hvd_status_str(hvd_status_t status);

/* The detailed message of the calling thread's last error ("" when none): which rank, peer,
 * host or key was involved and what timed out. The string is owned by the library and stays
 * valid until this thread's next failing call. Does not block; thread safe (thread-local). */
HVD_API const char *hvd_last_error(void);

/* Version of libhvd as "MAJOR.MINOR.PATCH"; static storage. */
HVD_API const char *hvd_version(void);

/* Initialise from the HOROVOD_* environment set by horovodrun. Without a launcher
 * (no HOROVOD_GLOO_RENDEZVOUS_ADDR) the process is rank 0 of a job of size 1. Under
 * horovodrun every rank checks in with the rendezvous store and waits, up to
 * HOROVOD_GLOO_TIMEOUT_SECONDS, until all ranks have; the error names the ranks that did not.
 * Blocks. Not thread safe with hvd_shutdown. Returns HVD_ERR_STATE if already initialised,
 * HVD_ERR_INVALID_ARG for a malformed variable (named in the message), HVD_ERR_TIMEOUT,
 * HVD_ERR_AUTH, HVD_ERR_IO. */
HVD_API hvd_status_t hvd_init(void);

/* Release everything hvd_init acquired; hvd_init may then be called again. Returns
 * HVD_ERR_SHUT_DOWN if not initialised. Blocks briefly. */
HVD_API hvd_status_t hvd_shutdown(void);

/* 1 between a successful hvd_init and hvd_shutdown, else 0. */
HVD_API int hvd_is_initialized(void);

/* Topology of this process, as assigned by the launcher. Each returns -1 when hvd is not
 * initialised. */
HVD_API int hvd_rank(void);
HVD_API int hvd_size(void);
HVD_API int hvd_local_rank(void);
HVD_API int hvd_local_size(void);
HVD_API int hvd_cross_rank(void);
HVD_API int hvd_cross_size(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_HVD_H */
