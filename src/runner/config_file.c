#include "runner/config_file.h"

#include "common/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

static int line_of(const yaml_node_t *n) {
    return (int)n->start_mark.line + 1;
}

static hvd_status_t visit_mapping(yaml_document_t *doc, yaml_node_t *map, const char *prefix,
                                  const char *file, hvd_config_visit_fn visit, void *arg) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: keys must be plain names", file,
                                  k ? line_of(k) : 0);
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "",
                 (const char *)k->data.scalar.value);
        hvd_status_t st;
        if (v->type == YAML_SCALAR_NODE) {
            st = visit(path, (const char *)v->data.scalar.value, line_of(v), arg);
        } else if (v->type == YAML_MAPPING_NODE && !*prefix) {
            st = visit_mapping(doc, v, path, file, visit, arg);
        } else {
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%d: '%s' must be %s", file, line_of(v),
                                path, *prefix ? "a single value" : "a value or a section");
        }
        if (st != HVD_OK)
            return st;
    }
    return HVD_OK;
}

hvd_status_t hvd__config_file_read(const char *file, hvd_config_visit_fn visit, void *arg) {
    FILE *f = fopen(file, "rb");
    if (!f)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "cannot open config file %s: %s", file,
                              strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    hvd_status_t st = HVD_OK;
    if (!yaml_parser_initialize(&parser)) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "cannot initialise the YAML parser");
        goto err_close;
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s:%zu: YAML error: %s", file,
                            parser.problem_mark.line + 1,
                            parser.problem ? parser.problem : "unknown");
        goto err_parser;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type != YAML_MAPPING_NODE)
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "%s:%d: the config file must be a mapping of "
                            "sections",
                            file, line_of(root));
    else if (root)
        st = visit_mapping(&doc, root, "", file, visit, arg);
    yaml_document_delete(&doc);
err_parser:
    yaml_parser_delete(&parser);
err_close:
    fclose(f);
    return st;
}
