/* The store's name rule (kv_protocol.h), in one place for the server, the client and the elastic
 * keys. */
#include "rendezvous/kv_protocol.h"

int hvd__kv_name_valid(const char *s, size_t len, int allow_empty) {
    if ((len == 0 && !allow_empty) || len > HVD_KV_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-'))
            return 0;
    }
    return 1;
}
