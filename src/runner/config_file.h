/* --config-file: Horovod's YAML schema (reference 1.11), read with libyaml. This module only
 * walks the document; settings.c decides what each key means, so the schema lives in one
 * table there next to the flags it mirrors. */
#ifndef HVD_RUNNER_CONFIG_FILE_H
#define HVD_RUNNER_CONFIG_FILE_H

#include <hvd/types.h>

/* Called for every scalar: path is "key" at the top level or "section.key" inside a section;
 * line is 1-based. Return HVD_OK to go on, or an error (with its message set) to stop. */
typedef hvd_status_t (*hvd_config_visit_fn)(const char *path, const char *value, int line,
                                            void *arg);

/* Read file and visit its scalars in document order. Errors (HVD_ERR_INVALID_ARG) name the
 * file and line: unreadable file, YAML syntax, a structure other than a mapping of scalars
 * and one level of sections, or whatever visit returned. */
hvd_status_t hvd__config_file_read(const char *file, hvd_config_visit_fn visit, void *arg);

#endif
