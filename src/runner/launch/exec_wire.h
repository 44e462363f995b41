/* What crosses ssh between horovodrun and the supervisor of a remote host's ranks
 * (runner/launch/remote_exec.h). One ssh session carries every rank of a host: the spec and then
 * stop/kill commands go out on ssh's stdin, the ranks' output and ends come back as frames on
 * its stdout.
 *
 * horovodrun -> supervisor:
 *   spec: magic "HVDX" | version u16 | reserved u16 (0) | payload length u32 | payload, where
 *     payload = cwd | grace_ms u32 | env count u32 | env strings (shared by every rank) |
 *               argc u32 | argv strings | nranks u32 | per rank: env count u32 | env strings
 *     each string a u32 length and its bytes (no NUL inside). At most HVD_EXEC_SPEC_MAX bytes.
 *   then commands, HVD_EXEC_COMMAND_LEN bytes each: what u32 | rank index u32.
 *   The end of this input means horovodrun is gone: every rank is stopped.
 * supervisor -> horovodrun, frames: type u8 | 3 zero bytes | rank index u32 | length u32 |
 *   that many bytes (at most HVD_EXEC_FRAME_MAX):
 *     READY  index 0, no data: the spec was read and every rank was started
 *     OUT    bytes the rank wrote to its stdout
 *     ERR    bytes the rank wrote to its stderr
 *     EXIT   the rank's command ended; data: its raw wait status, i32
 *     END    nothing more comes for this rank (its tree is gone, its pipes are drained)
 *     STATE  the rank's command was stopped by a signal or continued (so that horovodrun can
 *            tell a rank left stopped after the others exited, runner/launch/stopped_ranks.h)
 *
 * Multi-byte fields are little-endian. Every field is checked before it is used, and nothing
 * is allocated for a count before the bytes it needs are known to be there. */
#ifndef HVD_RUNNER_EXEC_WIRE_H
#define HVD_RUNNER_EXEC_WIRE_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

#define HVD_EXEC_SPEC_VERSION 3
#define HVD_EXEC_SPEC_HEADER_LEN 12
#define HVD_EXEC_SPEC_MAX (1024 * 1024)
/* Ranks one supervisor runs: far more than a host has cores. */
#define HVD_EXEC_MAX_RANKS 4096

typedef struct {
    char *cwd;
    uint32_t grace_ms; /* SIGTERM -> SIGKILL for a stopped rank; 0: the default */
    char **env;        /* "NAME=VALUE" for every rank, NULL-terminated */
    char **argv;       /* NULL-terminated, at least one element */
    size_t nranks;
    char ***rank_env; /* [nranks]: each rank's own variables, NULL-terminated, set last */
} hvd_exec_spec_t;

/* Encode a spec into a malloc'd buffer (header included). HVD_ERR_INVALID_ARG when it would
 * exceed HVD_EXEC_SPEC_MAX (the message says by how much) or has no rank or too many;
 * HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__exec_spec_encode(const hvd_exec_spec_t *spec, uint8_t **buf_p, size_t *len_p);

/* Payload length announced by a header, after checking magic, version, reserved bytes and
 * the bound. HVD_ERR_PROTOCOL naming what is wrong. */
hvd_status_t hvd__exec_spec_header(const uint8_t header[HVD_EXEC_SPEC_HEADER_LEN],
                                   size_t *payload_len_p);

/* Decode a payload. HVD_ERR_PROTOCOL naming the field for anything malformed (truncated,
 * trailing bytes, a NUL inside a string, an env entry without '=', an empty argv, no rank or
 * more than HVD_EXEC_MAX_RANKS). */
hvd_status_t hvd__exec_spec_decode(const uint8_t *payload, size_t len, hvd_exec_spec_t *spec_p);

/* Free what decode allocated; the environment (the secret is in it) is wiped first. */
void hvd__exec_spec_fini(hvd_exec_spec_t *spec);

/* ---- commands ---- */

#define HVD_EXEC_COMMAND_LEN 8
enum { HVD_EXEC_STOP = 1, HVD_EXEC_KILL = 2 };

void hvd__exec_command_encode(uint8_t out[HVD_EXEC_COMMAND_LEN], uint32_t what, uint32_t index);
/* 0 and the command, or -1 when it is unknown or names no rank below nranks. */
int hvd__exec_command_decode(const uint8_t in[HVD_EXEC_COMMAND_LEN], size_t nranks,
                             uint32_t *what_p, uint32_t *index_p);

/* ---- frames ---- */

#define HVD_EXEC_FRAME_HEADER_LEN 12
#define HVD_EXEC_FRAME_MAX 65536
enum {
    HVD_EXEC_READY = 1,
    HVD_EXEC_OUT = 2,
    HVD_EXEC_ERR = 3,
    HVD_EXEC_EXIT = 4,
    HVD_EXEC_END = 5,
    HVD_EXEC_STATE = 6,
};
/* STATE's data: stopped u32 (1: the rank's command is stopped by a signal, 0: it is not) |
 * the command's pid u32. Sent when the state changes, looked at once a second. */
#define HVD_EXEC_STATE_LEN 8

void hvd__exec_frame_header(uint8_t out[HVD_EXEC_FRAME_HEADER_LEN], uint8_t type, uint32_t index,
                            uint32_t len);

typedef struct {
    uint8_t type;
    uint32_t index;
    const uint8_t *data; /* valid until the reader is fed again */
    uint32_t len;
} hvd_exec_frame_t;

/* Frames cut from a byte stream: at most one frame and one read chunk are buffered. */
typedef struct {
    uint8_t *buf;
    size_t start, len, cap;
    size_t nranks; /* indexes at or above are malformed */
} hvd_exec_reader_t;

void hvd__exec_reader_init(hvd_exec_reader_t *r, size_t nranks);
void hvd__exec_reader_fini(hvd_exec_reader_t *r);
/* Append bytes. HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__exec_reader_feed(hvd_exec_reader_t *r, const void *data, size_t n);
/* 1 and the next whole frame; 0 when more bytes are needed; -1 (error set, HVD_ERR_PROTOCOL
 * naming what) for an unknown type, non-zero reserved bytes, an index out of range, a length
 * over the bound or one that does not fit its type. */
int hvd__exec_reader_next(hvd_exec_reader_t *r, hvd_exec_frame_t *frame_p);

#endif
