/* Explicit little-endian loads and stores for wire codecs: every multi-byte field on every
 * hvd wire is little-endian whatever the host, and is read byte by byte (no alignment or
 * aliasing assumptions). The compiler turns these into single moves on x86. */
#ifndef HVD_WIRE_LE_H
#define HVD_WIRE_LE_H

#include <stdint.h>

static inline void hvd__le16_put(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void hvd__le32_put(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void hvd__le64_put(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t hvd__le16_get(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t hvd__le32_get(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint64_t hvd__le64_get(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#endif
