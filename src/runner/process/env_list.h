/* An ordered list of environment variables (NAME=VALUE) with set-overrides-previous semantics,
 * used for the variables horovodrun exports to workers and to build each worker's envp. */
#ifndef HVD_RUNNER_ENV_LIST_H
#define HVD_RUNNER_ENV_LIST_H

#include <hvd/types.h>

#include <stddef.h>

typedef struct {
    char **entries; /* "NAME=VALUE", malloc'd; NULL-terminated for execve */
    size_t count, capacity;
} hvd_env_list_t;

void hvd__env_list_init(hvd_env_list_t *list);
void hvd__env_list_fini(hvd_env_list_t *list);

/* Set name to value, replacing an earlier entry of the same name in place. */
hvd_status_t hvd__env_list_set(hvd_env_list_t *list, const char *name, const char *value);

/* printf-style value. */
hvd_status_t hvd__env_list_setf(hvd_env_list_t *list, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Remove name if present. */
void hvd__env_list_unset(hvd_env_list_t *list, const char *name);

/* Value of name, or NULL. */
const char *hvd__env_list_get(const hvd_env_list_t *list, const char *name);

/* Set every "NAME=VALUE" of entries (an environ-style NULL-terminated array; NULL: none),
 * skipping entries without a name and those whose name skip(name, name_len) accepts (skip may
 * be NULL). */
hvd_status_t hvd__env_list_set_entries(hvd_env_list_t *list, char *const *entries,
                                       int (*skip)(const char *name, size_t name_len));

/* Append every entry of src (later entries override earlier ones of the same name). */
hvd_status_t hvd__env_list_merge(hvd_env_list_t *dst, const hvd_env_list_t *src);

#endif
