/* --config-file: Horovod's YAML layout (docs/reference.md, "`horovodrun`"), read with libyaml.
 *
 * The file is a mapping whose values are scalars (`controller: gloo`) or sections, mappings
 * of scalars (`params: {fusion_threshold_mb: 32}`). This module only walks the document and
 * reports every entry with its key path and line; settings.c decides what each key means, so
 * the schema lives in one table there, next to the flags it mirrors, and the precedence rule
 * (a flag given on the command line wins) is applied where both are known. */
#ifndef HVD_RUNNER_CONFIG_FILE_H
#define HVD_RUNNER_CONFIG_FILE_H

#include <hvd/types.h>

/* The largest config file hvd reads (Horovod's has a dozen keys); a larger one, or one with a
 * NUL byte, is refused before parsing, so a wrong path cannot exhaust memory. */
#define HVD_CONFIG_FILE_MAX_BYTES (1u << 20)

typedef enum {
    HVD_CONFIG_SCALAR,   /* a value: text in value (quoted or plain) */
    HVD_CONFIG_NULL,     /* a plain empty, ~ or null value: "not set" as in PyYAML */
    HVD_CONFIG_MAPPING,  /* a mapping where a value was expected (not walked further) */
    HVD_CONFIG_SEQUENCE, /* a list where a value was expected */
} hvd_config_kind_t;

typedef struct {
    const char *file;       /* the path given to hvd__config_file_read */
    const char *path;       /* "key" at the top level, "section.key" inside a section */
    hvd_config_kind_t kind; /* what the value is */
    const char *value;      /* the scalar's text; "" unless kind is HVD_CONFIG_SCALAR */
    int line;               /* 1-based line of the value */
} hvd_config_entry_t;

/* Called for every entry, in document order. Top-level mappings (sections) are not reported
 * themselves; their entries are. Return HVD_OK to go on, or an error (message set) to stop. */
typedef hvd_status_t (*hvd_config_visit_fn)(const hvd_config_entry_t *entry, void *arg);

/* Read file and visit its entries. Blocks on file I/O only; not thread-safe (it reports
 * errors through the calling thread's last error). An empty file visits nothing. Errors are
 * HVD_ERR_INVALID_ARG naming the file and line: unreadable file, YAML syntax, a document that
 * is not a mapping, a key that is not a plain value, more than one document, or whatever
 * visit returned. */
hvd_status_t hvd__config_file_read(const char *file, hvd_config_visit_fn visit, void *arg);

#endif
