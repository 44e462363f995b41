/* The environment list (env_list.h): a growable array kept NULL-terminated after every change so it
 * can go to execve as is; lookups scan it by name. */
#include "runner/process/env_list.h"

#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hvd__env_list_init(hvd_env_list_t *list) {
    memset(list, 0, sizeof *list);
}

void hvd__env_list_fini(hvd_env_list_t *list) {
    for (size_t i = 0; i < list->count; i++)
        free(list->entries[i]);
    free(list->entries);
    memset(list, 0, sizeof *list);
}

static size_t find(const hvd_env_list_t *list, const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < list->count; i++)
        if (strncmp(list->entries[i], name, n) == 0 && list->entries[i][n] == '=')
            return i;
    return (size_t)-1;
}

hvd_status_t hvd__env_list_set(hvd_env_list_t *list, const char *name, const char *value) {
    size_t nl = strlen(name), vl = strlen(value);
    char *entry = malloc(nl + vl + 2);
    if (!entry)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory setting %s", name);
    memcpy(entry, name, nl);
    entry[nl] = '=';
    memcpy(entry + nl + 1, value, vl + 1);
    size_t i = find(list, name);
    if (i != (size_t)-1) {
        free(list->entries[i]);
        list->entries[i] = entry;
        return HVD_OK;
    }
    if (list->count + 2 > list->capacity) {
        size_t cap = list->capacity ? list->capacity * 2 : 16;
        char **grown = realloc(list->entries, cap * sizeof *grown);
        if (!grown) {
            free(entry);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory setting %s", name);
        }
        list->entries = grown;
        list->capacity = cap;
    }
    list->entries[list->count++] = entry;
    list->entries[list->count] = NULL;
    return HVD_OK;
}

hvd_status_t hvd__env_list_setf(hvd_env_list_t *list, const char *name, const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "value of %s is too long", name);
    return hvd__env_list_set(list, name, buf);
}

void hvd__env_list_unset(hvd_env_list_t *list, const char *name) {
    size_t i = find(list, name);
    if (i == (size_t)-1)
        return;
    free(list->entries[i]);
    memmove(&list->entries[i], &list->entries[i + 1], (list->count - i) * sizeof(char *));
    list->count--;
}

const char *hvd__env_list_get(const hvd_env_list_t *list, const char *name) {
    size_t i = find(list, name);
    return i == (size_t)-1 ? NULL : list->entries[i] + strlen(name) + 1;
}

hvd_status_t hvd__env_list_merge(hvd_env_list_t *dst, const hvd_env_list_t *src) {
    for (size_t i = 0; i < src->count; i++) {
        const char *eq = strchr(src->entries[i], '=');
        if (!eq)
            continue;
        char name[512];
        size_t nl = (size_t)(eq - src->entries[i]);
        if (nl >= sizeof name)
            return hvd__error_set(HVD_ERR_TOO_LARGE, "environment variable name too long");
        memcpy(name, src->entries[i], nl);
        name[nl] = '\0';
        hvd_status_t st = hvd__env_list_set(dst, name, eq + 1);
        if (st != HVD_OK)
            return st;
    }
    return HVD_OK;
}

hvd_status_t hvd__env_list_set_entries(hvd_env_list_t *list, char *const *entries,
                                       int (*skip)(const char *name, size_t name_len)) {
    hvd_status_t st = HVD_OK;
    for (char *const *e = entries; e && *e && st == HVD_OK; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || eq == *e || (skip && skip(*e, (size_t)(eq - *e))))
            continue;
        char *name = strndup(*e, (size_t)(eq - *e));
        if (!name)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory copying an environment");
        st = hvd__env_list_set(list, name, eq + 1);
        free(name);
    }
    return st;
}
