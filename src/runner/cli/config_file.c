/* The --config-file walker (config_file.h) on libyaml's document API. The file is read whole,
 * bounded by HVD_CONFIG_FILE_MAX_BYTES, and read as PyYAML's safe_load would: plain empty, ~ and
 * null mean unset, and a second document is refused. */
#include "runner/cli/config_file.h"

#include "common/error.h"
#include "common/text_file.h"

#include <stdio.h>
#include <string.h>
#include <yaml.h>

static int line_of(const yaml_node_t *n) {
    return (int)n->start_mark.line + 1;
}

/* YAML 1.1 (PyYAML, which the reference uses) reads these plain scalars as None. */
static int is_null(const yaml_node_t *n) {
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static hvd_status_t visit_node(const char *file, const char *path, const yaml_node_t *v,
                               hvd_config_visit_fn visit, void *arg) {
    hvd_config_entry_t e = {.file = file, .path = path, .value = "", .line = line_of(v)};
    switch (v->type) {
    case YAML_SCALAR_NODE:
        e.kind = is_null(v) ? HVD_CONFIG_NULL : HVD_CONFIG_SCALAR;
        if (e.kind == HVD_CONFIG_SCALAR)
            e.value = (const char *)v->data.scalar.value;
        break;
    case YAML_MAPPING_NODE:
        e.kind = HVD_CONFIG_MAPPING;
        break;
    default:
        e.kind = HVD_CONFIG_SEQUENCE;
        break;
    }
    return visit(&e, arg);
}

/* Walk one mapping: the root (prefix "") or a section (prefix "section"). Only the root's
 * mappings are descended into, so the walk is bounded even for documents whose aliases make
 * a node its own descendant. */
static hvd_status_t visit_mapping(yaml_document_t *doc, const yaml_node_t *map, const char *prefix,
                                  const char *file, hvd_config_visit_fn visit, void *arg) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: malformed YAML mapping", file,
                                  line_of(map));
        if (k->type != YAML_SCALAR_NODE)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: keys must be plain names", file,
                                  line_of(k));
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "",
                 (const char *)k->data.scalar.value);
        hvd_status_t st;
        if (v->type == YAML_MAPPING_NODE && !*prefix)
            st = visit_mapping(doc, v, path, file, visit, arg);
        else
            st = visit_node(file, path, v, visit, arg);
        if (st != HVD_OK)
            return st;
    }
    return HVD_OK;
}

hvd_status_t hvd__config_file_read(const char *file, hvd_config_visit_fn visit, void *arg) {
    yaml_parser_t parser;
    yaml_document_t doc;
    hvd_status_t st = HVD_OK;
    char *text;
    size_t len;
    st = hvd__text_file_read(file, "config file", HVD_CONFIG_FILE_MAX_BYTES, &text, &len);
    if (st != HVD_OK)
        return st;
    if (!yaml_parser_initialize(&parser)) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "cannot initialise the YAML parser");
        goto free_text;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%zu: YAML error: %s%s%s", file,
                            parser.problem_mark.line + 1, parser.context ? parser.context : "",
                            parser.context ? ", " : "",
                            parser.problem ? parser.problem : "unknown problem");
        goto delete_parser;
    }
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type == YAML_SCALAR_NODE && is_null(root))
        root = NULL; /* "---" and nothing else: an empty configuration */
    if (root && root->type != YAML_MAPPING_NODE)
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "%s:%d: the config file must be a mapping of keys and sections "
                            "(e.g. 'params:' followed by indented 'fusion_threshold_mb: 32')",
                            file, line_of(root));
    else if (root)
        st = visit_mapping(&doc, root, "", file, visit, arg);
    yaml_document_delete(&doc);
    if (st != HVD_OK)
        goto delete_parser;
    /* PyYAML's safe_load refuses a second document rather than ignoring it; so do we. */
    if (!yaml_parser_load(&parser, &doc)) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%zu: YAML error: %s", file,
                            parser.problem_mark.line + 1,
                            parser.problem ? parser.problem : "unknown problem");
        goto delete_parser;
    }
    root = yaml_document_get_root_node(&doc);
    if (root)
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "%s:%d: a second YAML document; the config file must hold one", file,
                            line_of(root));
    yaml_document_delete(&doc);
delete_parser:
    yaml_parser_delete(&parser);
free_text:
    free(text);
    return st;
}
