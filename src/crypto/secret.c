/* The job secret (secret.h): drawn with getrandom, carried as hex, read from a file of at most a
 * few hundred bytes. Buffers that held it are wiped with explicit_bzero, and no error message
 * repeats the text it came from. */
#include "crypto/secret.h"

#include "common/error.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

hvd_status_t hvd__secret_generate(hvd_secret_t *secret_p) {
    size_t got = 0;
    while (got < HVD_SECRET_LEN) {
        ssize_t n = getrandom(secret_p->bytes + got, HVD_SECRET_LEN - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return hvd__error_set(HVD_ERR_IO, "cannot read random bytes for the job secret: %s",
                                  strerror(errno));
        }
        got += (size_t)n;
    }
    return HVD_OK;
}

int hvd__hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int hvd__hex_decode(const char *hex, size_t hex_len, uint8_t *bytes) {
    if (hex_len % 2)
        return -1;
    for (size_t i = 0; i < hex_len / 2; i++) {
        int hi = hvd__hex_digit(hex[2 * i]), lo = hvd__hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void hvd__hex_encode(const uint8_t *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

hvd_status_t hvd__secret_from_hex(const char *hex, hvd_secret_t *secret_p) {
    if (!hex || strlen(hex) != HVD_SECRET_HEX_LEN ||
        hvd__hex_decode(hex, HVD_SECRET_HEX_LEN, secret_p->bytes) != 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "the job secret is malformed (expected %d hex digits)",
                              HVD_SECRET_HEX_LEN);
    return HVD_OK;
}

void hvd__secret_to_hex(const hvd_secret_t *secret, char *out) {
    hvd__hex_encode(secret->bytes, HVD_SECRET_LEN, out);
}

void hvd__secret_wipe(hvd_secret_t *secret) {
    explicit_bzero(secret->bytes, sizeof secret->bytes);
}

hvd_status_t hvd__secret_read_file(const char *path, hvd_secret_t *secret_p) {
    /* room for the digits, a newline or two and some indentation: a longer file is not one */
    char buf[HVD_SECRET_HEX_LEN + 64];
    FILE *f = fopen(path, "r");
    if (!f)
        return hvd__error_set(HVD_ERR_IO, "cannot read the secret file %s: %s", path,
                              strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int more = n == sizeof buf - 1 && fgetc(f) != EOF;
    fclose(f);
    buf[n] = '\0';
    char *start = buf;
    while (*start && isspace((unsigned char)*start))
        start++;
    size_t len = strlen(start);
    while (len && isspace((unsigned char)start[len - 1]))
        start[--len] = '\0';
    hvd_status_t st = more || len != HVD_SECRET_HEX_LEN ? HVD_ERR_INVALID_ARG
                                                        : hvd__secret_from_hex(start, secret_p);
    explicit_bzero(buf, sizeof buf);
    if (st != HVD_OK)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "the secret file %s does not hold a job secret: %d hex digits "
                              "(e.g. from `openssl rand -hex %d`)",
                              path, HVD_SECRET_HEX_LEN, HVD_SECRET_LEN);
    return HVD_OK;
}
