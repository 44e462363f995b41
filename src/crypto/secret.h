/* The job secret: 32 random bytes made by horovodrun for each job, handed to workers through
 * the environment variable HVD_SECRET_ENV (never on a command line), and used to
 * authenticate every request to every listening port. */
#ifndef HVD_CRYPTO_SECRET_H
#define HVD_CRYPTO_SECRET_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

#define HVD_SECRET_LEN 32
#define HVD_SECRET_HEX_LEN (2 * HVD_SECRET_LEN)

typedef struct {
    uint8_t bytes[HVD_SECRET_LEN];
} hvd_secret_t;

/* Fill *secret_p from the kernel's random source. HVD_ERR_IO if it cannot be read. */
hvd_status_t hvd__secret_generate(hvd_secret_t *secret_p);

/* Parse exactly HVD_SECRET_HEX_LEN hex digits. HVD_ERR_INVALID_ARG otherwise (the message
 * never repeats the text, which may be a secret). */
hvd_status_t hvd__secret_from_hex(const char *hex, hvd_secret_t *secret_p);

/* Read a secret from a file holding its HVD_SECRET_HEX_LEN hex digits (surrounding white
 * space allowed; at most a few hundred bytes are read whatever the file is). HVD_ERR_IO
 * naming the file when it cannot be read, HVD_ERR_INVALID_ARG naming it when the content is
 * not a secret (never repeating the content). */
hvd_status_t hvd__secret_read_file(const char *path, hvd_secret_t *secret_p);

/* Write the hex form and a terminating NUL into out[HVD_SECRET_HEX_LEN + 1]. */
void hvd__secret_to_hex(const hvd_secret_t *secret, char *out);

/* Lower-case hex of n bytes into out[2n + 1]. */
void hvd__hex_encode(const uint8_t *bytes, size_t n, char *out);

/* The value of one hex digit (either case), or -1. */
int hvd__hex_digit(char c);

/* Decode exactly 2n hex digits into bytes[n]. Returns 0, or -1 if malformed. */
int hvd__hex_decode(const char *hex, size_t hex_len, uint8_t *bytes);

/* Wipe a secret from memory in a way the compiler cannot drop. */
void hvd__secret_wipe(hvd_secret_t *secret);

#endif
