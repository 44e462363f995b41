/* What crosses a host's ssh session (runner/launch/exec_wire.h): the spec of its ranks (round trip,
 * every malformed form, the bounds), the stop/kill commands, and the frames coming back, cut
 * from a byte stream however it arrives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runner/launch/exec_wire.h"
#include "wire/le.h"

#include <stdlib.h>
#include <string.h>

static uint8_t *encode(const char *cwd, char **env, char **argv, size_t nranks, char ***rank_env,
                       size_t *len_p, hvd_status_t want) {
    hvd_exec_spec_t spec = {.cwd = (char *)cwd,
                            .grace_ms = 1234,
                            .env = env,
                            .argv = argv,
                            .nranks = nranks,
                            .rank_env = rank_env};
    uint8_t *buf = NULL;
    assert_int_equal(hvd__exec_spec_encode(&spec, &buf, len_p), want);
    return buf;
}

static void test_spec_round_trip(void **state) {
    (void)state;
    char *env[] = {"A=1", "EMPTY=", "MULTI=line one\nline two", NULL};
    char *argv[] = {"sh", "-c", "echo 'quoted' \"$A\"", "", NULL};
    char *r0[] = {"HOROVOD_RANK=4", "_HOROVOD_SECRET_KEY=abc", NULL};
    char *r1[] = {NULL};
    char *r2[] = {"HOROVOD_RANK=6", NULL};
    char **ranks[] = {r0, r1, r2};
    size_t len;
    uint8_t *buf = encode("/some dir", env, argv, 3, ranks, &len, HVD_OK);
    size_t payload;
    assert_int_equal(hvd__exec_spec_header(buf, &payload), HVD_OK);
    assert_int_equal(payload + HVD_EXEC_SPEC_HEADER_LEN, len);
    hvd_exec_spec_t spec;
    assert_int_equal(hvd__exec_spec_decode(buf + HVD_EXEC_SPEC_HEADER_LEN, payload, &spec), HVD_OK);
    assert_string_equal(spec.cwd, "/some dir");
    assert_int_equal(spec.grace_ms, 1234);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(spec.env[i], env[i]);
    assert_null(spec.env[3]);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(spec.argv[i], argv[i]);
    assert_null(spec.argv[4]);
    assert_int_equal(spec.nranks, 3);
    assert_string_equal(spec.rank_env[0][1], "_HOROVOD_SECRET_KEY=abc");
    assert_null(spec.rank_env[0][2]);
    assert_null(spec.rank_env[1][0]);
    assert_string_equal(spec.rank_env[2][0], "HOROVOD_RANK=6");
    hvd__exec_spec_fini(&spec);

    /* every truncation of the payload is refused, never read past */
    for (size_t cut = 0; cut < payload; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf + HVD_EXEC_SPEC_HEADER_LEN, cut);
        assert_int_equal(hvd__exec_spec_decode(copy, cut, &spec), HVD_ERR_PROTOCOL);
        free(copy);
    }
    free(buf);
}

static void test_spec_malformed(void **state) {
    (void)state;
    char *argv[] = {"true", NULL};
    char *none[] = {NULL};
    char **one[] = {none};
    size_t len, payload;
    hvd_exec_spec_t spec;
    uint8_t *buf = encode("/", NULL, argv, 1, one, &len, HVD_OK);
    uint8_t h[HVD_EXEC_SPEC_HEADER_LEN];
    memcpy(h, buf, sizeof h);
    h[0] = 'X'; /* magic */
    assert_int_equal(hvd__exec_spec_header(h, &payload), HVD_ERR_PROTOCOL);
    memcpy(h, buf, sizeof h);
    hvd__le16_put(h + 4, 1); /* the one-rank-per-session version of older horovodruns */
    assert_int_equal(hvd__exec_spec_header(h, &payload), HVD_ERR_PROTOCOL);
    memcpy(h, buf, sizeof h);
    h[6] = 1; /* reserved */
    assert_int_equal(hvd__exec_spec_header(h, &payload), HVD_ERR_PROTOCOL);
    memcpy(h, buf, sizeof h);
    hvd__le32_put(h + 8, HVD_EXEC_SPEC_MAX); /* more than the bound */
    assert_int_equal(hvd__exec_spec_header(h, &payload), HVD_ERR_PROTOCOL);

    /* trailing bytes */
    uint8_t *p = buf + HVD_EXEC_SPEC_HEADER_LEN;
    size_t n = len - HVD_EXEC_SPEC_HEADER_LEN;
    uint8_t *longer = calloc(n + 1, 1);
    memcpy(longer, p, n);
    assert_int_equal(hvd__exec_spec_decode(longer, n + 1, &spec), HVD_ERR_PROTOCOL);
    /* no rank, and more ranks than the bytes could hold: refused before allocating */
    size_t at = n - 8; /* rank count, then the one rank's empty list */
    hvd__le32_put(longer + at, 0);
    assert_int_equal(hvd__exec_spec_decode(longer, n, &spec), HVD_ERR_PROTOCOL);
    hvd__le32_put(longer + at, HVD_EXEC_MAX_RANKS);
    assert_int_equal(hvd__exec_spec_decode(longer, n, &spec), HVD_ERR_PROTOCOL);
    free(longer);
    /* a count far beyond what is there is refused before allocating */
    uint8_t huge_env[] = {1, 0, 0, 0, '/', 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f};
    assert_int_equal(hvd__exec_spec_decode(huge_env, sizeof huge_env, &spec), HVD_ERR_PROTOCOL);
    free(buf);

    /* an env entry that is not NAME=VALUE (shared or a rank's); an empty argv; a NUL inside */
    char *bad_env[] = {"NOEQUALS", NULL};
    buf = encode("/", bad_env, argv, 1, one, &len, HVD_OK);
    assert_int_equal(hvd__exec_spec_decode(buf + 12, len - 12, &spec), HVD_ERR_PROTOCOL);
    free(buf);
    char **bad_rank[] = {bad_env};
    buf = encode("/", NULL, argv, 1, bad_rank, &len, HVD_OK);
    assert_int_equal(hvd__exec_spec_decode(buf + 12, len - 12, &spec), HVD_ERR_PROTOCOL);
    free(buf);
    buf = encode("/", NULL, none, 1, one, &len, HVD_OK);
    assert_int_equal(hvd__exec_spec_decode(buf + 12, len - 12, &spec), HVD_ERR_PROTOCOL);
    free(buf);
    buf = encode("/ab", NULL, argv, 1, one, &len, HVD_OK);
    buf[12 + 4 + 1] = 0; /* "/\0b" */
    assert_int_equal(hvd__exec_spec_decode(buf + 12, len - 12, &spec), HVD_ERR_PROTOCOL);
    free(buf);

    /* too large to send, and rank counts out of bounds */
    size_t big = HVD_EXEC_SPEC_MAX;
    char *value = malloc(big);
    memset(value, 'x', big - 1);
    memcpy(value, "BIG=", 4);
    value[big - 1] = '\0';
    char *big_env[] = {value, NULL};
    assert_null(encode("/", big_env, argv, 1, one, &len, HVD_ERR_INVALID_ARG));
    free(value);
    assert_null(encode("/", NULL, argv, 0, one, &len, HVD_ERR_INVALID_ARG));
}

static void test_commands(void **state) {
    (void)state;
    uint8_t c[HVD_EXEC_COMMAND_LEN];
    uint32_t what, index;
    hvd__exec_command_encode(c, HVD_EXEC_KILL, 6);
    assert_int_equal(hvd__exec_command_decode(c, 7, &what, &index), 0);
    assert_int_equal(what, HVD_EXEC_KILL);
    assert_int_equal(index, 6);
    assert_int_equal(hvd__exec_command_decode(c, 6, &what, &index), -1); /* no rank 6 */
    hvd__exec_command_encode(c, 3, 0);
    assert_int_equal(hvd__exec_command_decode(c, 7, &what, &index), -1); /* unknown */
}

static void put_frame(uint8_t *out, size_t *at, uint8_t type, uint32_t index, const void *data,
                      uint32_t len) {
    hvd__exec_frame_header(out + *at, type, index, len);
    memcpy(out + *at + HVD_EXEC_FRAME_HEADER_LEN, data, len);
    *at += HVD_EXEC_FRAME_HEADER_LEN + len;
}

/* The same frames come out whether the stream arrives whole or a byte at a time. */
static void test_frames_any_cut(void **state) {
    (void)state;
    uint8_t stream[256];
    size_t n = 0;
    uint8_t status[4];
    hvd__le32_put(status, 7 << 8);
    put_frame(stream, &n, HVD_EXEC_READY, 0, "", 0);
    put_frame(stream, &n, HVD_EXEC_OUT, 1, "hello\n", 6);
    put_frame(stream, &n, HVD_EXEC_ERR, 0, "oops", 4);
    put_frame(stream, &n, HVD_EXEC_EXIT, 1, status, 4);
    put_frame(stream, &n, HVD_EXEC_END, 1, "", 0);
    uint8_t st[HVD_EXEC_STATE_LEN];
    hvd__le32_put(st, 1);
    hvd__le32_put(st + 4, 4242);
    put_frame(stream, &n, HVD_EXEC_STATE, 0, st, sizeof st);
    for (size_t step = 1; step <= n; step++) {
        hvd_exec_reader_t r;
        hvd__exec_reader_init(&r, 2);
        int seen = 0;
        for (size_t at = 0; at < n; at += step) {
            size_t take = n - at < step ? n - at : step;
            assert_int_equal(hvd__exec_reader_feed(&r, stream + at, take), HVD_OK);
            hvd_exec_frame_t f;
            int got;
            while ((got = hvd__exec_reader_next(&r, &f)) == 1) {
                static const uint8_t types[] = {HVD_EXEC_READY, HVD_EXEC_OUT, HVD_EXEC_ERR,
                                                HVD_EXEC_EXIT,  HVD_EXEC_END, HVD_EXEC_STATE};
                assert_true(seen < 6);
                assert_int_equal(f.type, types[seen]);
                if (f.type == HVD_EXEC_OUT)
                    assert_memory_equal(f.data, "hello\n", 6);
                if (f.type == HVD_EXEC_EXIT)
                    assert_int_equal(hvd__le32_get(f.data), 7 << 8);
                if (f.type == HVD_EXEC_STATE)
                    assert_int_equal(hvd__le32_get(f.data + 4), 4242);
                seen++;
            }
            assert_int_equal(got, 0);
        }
        assert_int_equal(seen, 6);
        hvd__exec_reader_fini(&r);
    }
}

static void test_frames_malformed(void **state) {
    (void)state;
    struct {
        uint8_t type;
        uint32_t index, len;
        int reserved;
    } bad[] = {
        {0, 0, 0, 0},                                 /* unknown type */
        {HVD_EXEC_STATE + 1, 0, 0, 0},                /* unknown type */
        {HVD_EXEC_STATE, 0, 7, 0},                    /* a state is 8 bytes */
        {HVD_EXEC_OUT, 0, 1, 1},                      /* reserved bytes */
        {HVD_EXEC_OUT, 2, 1, 0},                      /* index out of range */
        {HVD_EXEC_READY, 1, 0, 0},                    /* READY names no rank */
        {HVD_EXEC_OUT, 0, HVD_EXEC_FRAME_MAX + 1, 0}, /* over the bound: refused at once */
        {HVD_EXEC_EXIT, 0, 3, 0},                     /* a status is 4 bytes */
        {HVD_EXEC_END, 0, 1, 0},                      /* END carries nothing */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t h[HVD_EXEC_FRAME_HEADER_LEN];
        hvd__exec_frame_header(h, bad[i].type, bad[i].index, bad[i].len);
        if (bad[i].reserved)
            h[2] = 1;
        hvd_exec_reader_t r;
        hvd__exec_reader_init(&r, 2);
        assert_int_equal(hvd__exec_reader_feed(&r, h, sizeof h), HVD_OK);
        hvd_exec_frame_t f;
        assert_int_equal(hvd__exec_reader_next(&r, &f), -1);
        hvd__exec_reader_fini(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_round_trip),  cmocka_unit_test(test_spec_malformed),
        cmocka_unit_test(test_commands),         cmocka_unit_test(test_frames_any_cut),
        cmocka_unit_test(test_frames_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
