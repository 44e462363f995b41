/* Running a rank on a remote host: what crosses ssh, and the supervisor on the far side.
 *
 * horovodrun starts a remote rank as `ssh ... HOST '<horovodrun>' --internal-exec` and
 * writes the rank's spec on ssh's stdin: the launcher's working directory, the variables to
 * set (the job secret among them, so it is never on a command line) and the command's argv.
 * On HOST, `horovodrun --internal-exec` reads the spec, changes to that directory, and runs
 * the command under the same middleman as a local rank (os/spawn.h), copying its stdout and
 * stderr to its own, which ssh carries back to the launcher, where they are tagged.
 *
 * Why a supervisor at all: ssh without a terminal does not signal the remote command when the
 * connection goes away, so a rank that writes nothing would run on forever after horovodrun
 * died. The supervisor treats the end of its stdin (the launcher's middleman holds the other
 * end; ssh forwards its closing, and sshd closes it when the connection drops) and a failed
 * write to its stdout as "the launcher is gone" and ends the rank's whole tree.
 *
 * Spec encoding (little-endian): magic "HVDX" | version u16 | reserved u16 | payload length
 * u32 | payload, where the payload is: cwd string | env count u32 | env strings | argc u32 |
 * argv strings, each string a u32 length and its bytes (no NUL inside). Bounded by
 * HVD_EXEC_SPEC_MAX; every field is checked before it is used. */
#ifndef HVD_RUNNER_REMOTE_EXEC_H
#define HVD_RUNNER_REMOTE_EXEC_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

#define HVD_EXEC_SPEC_VERSION 1
#define HVD_EXEC_SPEC_HEADER_LEN 12
#define HVD_EXEC_SPEC_MAX (1024 * 1024)
/* The option that selects the supervisor in horovodrun's argv (argv[1]). */
#define HVD_EXEC_OPTION "--internal-exec"

typedef struct {
    char *cwd;
    char **env;  /* "NAME=VALUE", NULL-terminated */
    char **argv; /* NULL-terminated, at least one element */
    size_t env_count, argc;
} hvd_exec_spec_t;

/* Encode a spec into a malloc'd buffer. HVD_ERR_INVALID_ARG when it would exceed
 * HVD_EXEC_SPEC_MAX (the message says by how much), HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__exec_spec_encode(const char *cwd, char *const *env, char *const *argv,
                                   uint8_t **buf_p, size_t *len_p);

/* Payload length announced by a header, after checking magic, version, reserved bytes and
 * the bound. HVD_ERR_PROTOCOL naming what is wrong. */
hvd_status_t hvd__exec_spec_header(const uint8_t header[HVD_EXEC_SPEC_HEADER_LEN],
                                   size_t *payload_len_p);

/* Decode a payload. HVD_ERR_PROTOCOL naming the field for anything malformed (truncated,
 * trailing bytes, a NUL inside a string, an env entry without '=', an empty argv). */
hvd_status_t hvd__exec_spec_decode(const uint8_t *payload, size_t len, hvd_exec_spec_t *spec_p);

void hvd__exec_spec_fini(hvd_exec_spec_t *spec);

/* The supervisor: read the spec from stdin (bounded by a deadline), run the command, exit
 * code as a local rank's (the command's code, 128 + signal). A spec that cannot be read is
 * reported on stderr and exits 126. */
int hvd__remote_exec_main(void);

#endif
