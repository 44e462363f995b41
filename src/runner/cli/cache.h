/* The start-up cache (docs/running.md, "Across hosts"): horovodrun remembers, for an hour,
 * that ssh worked for a host list and what NIC discovery found, so repeated runs with the same
 * parameters skip both checks (--disable-cache turns it off; elastic mode never uses it).
 *
 * The file is <dir>/hvd-cache, dir normally ~/.horovod (mode 0700; the file 0600), in our own
 * line format instead of the reference's pickle, which executes code on load:
 *
 *   hvd-cache 1
 *   params <hex SHA-256 of the parameters text>
 *   <key> <unix time written> <value>        (one line per entry)
 *
 * Keys and values are stored with every byte outside [A-Za-z0-9._:/,=-] as %XX, so any text
 * fits on one line. Only one parameter set is kept: a file for other parameters is discarded
 * on open. A file that does not parse is ignored and rewritten empty. Entries older than
 * HVD_START_CACHE_STALE_S are not returned and are dropped on the next write. Every write goes to
 * a temporary file that is renamed over the old one, so a reader never sees half a file.
 * Only successes are meant to be cached: callers put nothing on failure.
 *
 * Times are passed in (seconds since the epoch, from time(NULL) in the launcher), so tests
 * can move the clock. */
#ifndef HVD_RUNNER_CACHE_H
#define HVD_RUNNER_CACHE_H

#include <hvd/types.h>

#include "runner/discovery/discovery.h"

#include <stddef.h>
#include <stdint.h>

#define HVD_START_CACHE_FILE "hvd-cache"
#define HVD_START_CACHE_STALE_S (60 * 60)
#define HVD_START_CACHE_MAX_BYTES (1024 * 1024) /* a bigger file counts as corrupt */

typedef struct hvd_start_cache hvd_start_cache_t;

/* The parameters text the cache is keyed by: "<np> <hosts> <ssh_port> <identity_file>
 * <nics, comma-joined>" (NULL strings as ""), into a new string the caller frees.
 * HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__start_cache_params(int np, const char *hosts, int ssh_port,
                                     const char *identity_file, const char *const *nics,
                                     size_t nic_count, char **text_p);

/* "<home>/.horovod" into out. HVD_ERR_INVALID_ARG when home is empty or out too small. */
hvd_status_t hvd__start_cache_default_dir(const char *home, char *out, size_t out_size);

/* Load <dir>/hvd-cache for these parameters (a missing file is an empty cache; a corrupt
 * one is rewritten empty, logged at DEBUG). Blocks on file I/O only. Statuses:
 * HVD_ERR_NO_MEMORY, HVD_ERR_IO (the directory cannot be created, or a corrupt file cannot be
 * rewritten). Not thread safe: one thread uses a cache. */
hvd_status_t hvd__start_cache_open(const char *dir, const char *params, int64_t now_s,
                                   hvd_start_cache_t **cache_p);

/* The value of key if present and fresh at now_s, else NULL. Borrowed until the next put or
 * close. */
const char *hvd__start_cache_get(hvd_start_cache_t *c, const char *key, int64_t now_s);

/* Set key to value at now_s and rewrite the file atomically (dropping stale entries).
 * HVD_ERR_IO naming the path, HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__start_cache_put(hvd_start_cache_t *c, const char *key, const char *value,
                                  int64_t now_s);

/* Free the cache (the file is already up to date). NULL is ignored. */
void hvd__start_cache_close(hvd_start_cache_t *c);

/* The two facts horovodrun caches, keyed by the comma-joined host list they were found for. */
int hvd__start_cache_get_ssh_ok(hvd_start_cache_t *c, const char *hosts, int64_t now_s);
hvd_status_t hvd__start_cache_put_ssh_ok(hvd_start_cache_t *c, const char *hosts, int64_t now_s);
/* HVD_OK with *r_p filled (release with hvd__disc_result_fini); HVD_ERR_NOT_FOUND when absent,
 * stale or unreadable. */
hvd_status_t hvd__start_cache_get_discovery(hvd_start_cache_t *c, const char *hosts, int64_t now_s,
                                            hvd_disc_result_t *r_p);
hvd_status_t hvd__start_cache_put_discovery(hvd_start_cache_t *c, const char *hosts,
                                            const hvd_disc_result_t *r, int64_t now_s);

#endif
