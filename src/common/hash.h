/* FNV-1a string hashing for in-process tables whose keys come from trusted code or are
 * bounded in number (the rendezvous server's held requests, the elastic driver's slots). */
#ifndef HVD_COMMON_HASH_H
#define HVD_COMMON_HASH_H
#include <stddef.h>
#include <stdint.h>

#define HVD_HASH_FNV_BASIS 0xcbf29ce484222325ull

/* Continue hash h over the NUL-terminated string s (start from HVD_HASH_FNV_BASIS). */
static inline uint64_t hvd__hash_fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Continue hash h over n bytes at p. */
static inline uint64_t hvd__hash_fnv1a_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#endif
