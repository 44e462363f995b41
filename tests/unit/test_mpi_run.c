/* horovodrun --mpi without an MPI installation: which MPI a `mpirun --version` text names
 * (every case Horovod tests), detection through fake `mpirun` scripts first in PATH (found,
 * failing, hanging past the deadline, leaving a child behind, printing too much), the mpirun
 * command for each implementation (Horovod's expected commands with the real default flags in
 * place of its mocks, MPICH and Intel MPI layouts and errors), mpirun's environment, and
 * running the command with its exit code and output passed through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "runner/mpi/mpi_run.h"

#include <hvd/hvd.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 30000

static char dir[64];
static char path_env[256];

/* A fresh directory with an executable `mpirun` holding body (after "#!/bin/sh"). */
static void fake_mpirun(const char *body) {
    strcpy(dir, "/tmp/hvd_mpi_run_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char file[128];
    snprintf(file, sizeof file, "%s/mpirun", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(file, 0755), 0);
    snprintf(path_env, sizeof path_env, "PATH=%s:/usr/bin:/bin", dir);
}

static void remove_dir(void) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void read_file(const char *file, char *out, size_t cap) {
    FILE *f = fopen(file, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* ---- parsing ----------------------------------------------------------------------------------
 */

static void test_parse(void **state) {
    (void)state;
    assert_int_equal(hvd__mpi_impl_parse(1, "mpirun (Open MPI) 2.1.1\nReport bugs to "
                                            "http://www.open-mpi.org/community/help/\n"),
                     HVD_MPI_OPENMPI);
    assert_int_equal(hvd__mpi_impl_parse(1, "OpenRTE"), HVD_MPI_OPENMPI);
    assert_int_equal(hvd__mpi_impl_parse(1, "IBM Spectrum MPI"), HVD_MPI_SPECTRUM);
    assert_int_equal(hvd__mpi_impl_parse(1, "HYDRA build details:\n"), HVD_MPI_MPICH);
    assert_int_equal(hvd__mpi_impl_parse(1, "MPICH Version: 4.0"), HVD_MPI_MPICH);
    assert_int_equal(hvd__mpi_impl_parse(1, "Intel(R) MPI"), HVD_MPI_INTEL);
    assert_int_equal(hvd__mpi_impl_parse(1, "Unknown MPI v1.00"), HVD_MPI_UNKNOWN);
    assert_int_equal(hvd__mpi_impl_parse(1, ""), HVD_MPI_UNKNOWN);
    assert_int_equal(hvd__mpi_impl_parse(1, NULL), HVD_MPI_UNKNOWN);
    /* a failed run is missing whatever it said */
    assert_int_equal(hvd__mpi_impl_parse(0, "mpirun (Open MPI) 2.1.1"), HVD_MPI_MISSING);
    assert_int_equal(hvd__mpi_impl_parse(0, NULL), HVD_MPI_MISSING);
    /* derived implementations whose text also names their base */
    assert_int_equal(hvd__mpi_impl_parse(1, "mpirun (IBM Spectrum MPI) 10.4\nOpenRTE"),
                     HVD_MPI_SPECTRUM);
    assert_int_equal(hvd__mpi_impl_parse(1, "Intel(R) MPI Library\nHYDRA build details:"),
                     HVD_MPI_INTEL);

    assert_string_equal(hvd__mpi_impl_name(HVD_MPI_OPENMPI), "Open MPI");
    assert_string_equal(hvd__mpi_impl_name(HVD_MPI_SPECTRUM), "IBM Spectrum MPI");
    assert_string_equal(hvd__mpi_impl_name(HVD_MPI_MPICH), "MPICH");
    assert_string_equal(hvd__mpi_impl_name(HVD_MPI_INTEL), "Intel(R) MPI");
    assert_string_equal(hvd__mpi_impl_name(HVD_MPI_UNKNOWN), "unknown MPI");
    assert_string_equal(hvd__mpi_impl_name(HVD_MPI_MISSING), "no MPI");
    assert_non_null(strstr(hvd__mpi_not_found_text(), "--gloo"));
}

/* ---- detection ---------------------------------------------------------------------------------
 */

static void test_detect_open_mpi(void **state) {
    (void)state;
    fake_mpirun("[ \"$1\" = --version ] || exit 9\n"
                "echo 'mpirun (Open MPI) 4.1.4'\necho\n"
                "echo 'Report bugs to http://www.open-mpi.org/community/help/' >&2");
    char *env[] = {path_env, NULL};
    char out[4096];
    assert_int_equal(hvd__mpi_detect(env, out, sizeof out), HVD_MPI_OPENMPI);
    assert_string_equal(out, "mpirun (Open MPI) 4.1.4\n\nReport bugs to "
                             "http://www.open-mpi.org/community/help/\n");
    /* output is optional, and a small buffer gets the start, terminated */
    assert_int_equal(hvd__mpi_detect(env, NULL, 0), HVD_MPI_OPENMPI);
    char small[8];
    assert_int_equal(hvd__mpi_detect(env, small, sizeof small), HVD_MPI_OPENMPI);
    assert_string_equal(small, "mpirun ");
    remove_dir();
}

static void test_detect_mpich_and_unknown(void **state) {
    (void)state;
    fake_mpirun("echo 'HYDRA build details:'\necho '    Version: 4.0.2'");
    char *env[] = {path_env, NULL};
    char out[4096];
    assert_int_equal(hvd__mpi_detect(env, out, sizeof out), HVD_MPI_MPICH);
    remove_dir();
    fake_mpirun("echo 'Unknown MPI v1.00'");
    env[0] = path_env;
    assert_int_equal(hvd__mpi_detect(env, out, sizeof out), HVD_MPI_UNKNOWN);
    assert_string_equal(out, "Unknown MPI v1.00\n");
    remove_dir();
}

static void test_detect_failing(void **state) {
    (void)state;
    fake_mpirun("echo 'mpirun (Open MPI) 4.1.4'\nexit 1");
    char *env[] = {path_env, NULL};
    char out[4096];
    assert_int_equal(hvd__mpi_detect(env, out, sizeof out), HVD_MPI_MISSING);
    assert_non_null(strstr(out, "mpirun (Open MPI) 4.1.4\n"));
    assert_non_null(strstr(out, "--version failed with exit code 1\n"));
    /* killed by a signal */
    remove_dir();
    fake_mpirun("kill -9 $$");
    env[0] = path_env;
    assert_int_equal(hvd__mpi_detect(env, out, sizeof out), HVD_MPI_MISSING);
    assert_non_null(strstr(out, "killed by signal 9"));
    remove_dir();
}

static void test_detect_not_found(void **state) {
    (void)state;
    fake_mpirun("echo 'mpirun (Open MPI) 4.1.4'");
    char file[128];
    snprintf(file, sizeof file, "%s/mpirun", dir);
    assert_int_equal(chmod(file, 0644), 0); /* not executable: not a candidate */
    char only[128];
    snprintf(only, sizeof only, "PATH=%s", dir);
    char *env[] = {only, NULL};
    char out[4096];
    assert_int_equal(hvd__mpi_detect(env, out, sizeof out), HVD_MPI_MISSING);
    assert_non_null(strstr(out, "mpirun was not found in PATH="));
    assert_non_null(strstr(out, dir));
    remove_dir();
    /* PATH of the launcher is not used: an environment without PATH looks in /bin:/usr/bin */
    char *none[] = {"HOME=/", NULL};
    hvd_mpi_impl_t impl = hvd__mpi_detect(none, out, sizeof out);
    if (access("/bin/mpirun", X_OK) != 0 && access("/usr/bin/mpirun", X_OK) != 0) {
        assert_int_equal(impl, HVD_MPI_MISSING);
        assert_non_null(strstr(out, "(unset, so /bin:/usr/bin)"));
    }
}

/* Whether pid is gone (or a zombie waiting for its new parent to reap it). */
static int dead(pid_t pid) {
    char file[64], buf[256];
    snprintf(file, sizeof file, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(file, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

static pid_t pid_from(const char *file) {
    char text[32];
    read_file(file, text, sizeof text);
    return (pid_t)atoi(text);
}

static int wait_dead(pid_t pid) {
    int64_t deadline = hvd__clock_now_ms() + 5000;
    while (!dead(pid) && hvd__clock_now_ms() < deadline)
        hvd__clock_sleep_ms(20);
    return dead(pid);
}

static void test_detect_deadline(void **state) {
    (void)state;
    /* sleeps in a child of the script, so killing the script alone would not close the pipe */
    fake_mpirun("echo 'mpirun (Open MPI) 4.1.4'\nsleep 1000 &\necho $! > \"$(dirname \"$0\")/pid\""
                "\nwait");
    char *env[] = {path_env, NULL};
    char out[4096];
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__mpi_detect_timeout(env, 500, out, sizeof out), HVD_MPI_MISSING);
    int64_t took = hvd__clock_now_ms() - t0;
    assert_true(took >= 450);
    assert_true(took < 3000);
    assert_non_null(strstr(out, "mpirun (Open MPI) 4.1.4\n"));
    assert_non_null(strstr(out, "--version did not finish within 500 ms and was killed\n"));
    char file[128];
    snprintf(file, sizeof file, "%s/pid", dir);
    assert_true(wait_dead(pid_from(file)));
    remove_dir();
}

static void test_detect_leftover_child(void **state) {
    (void)state;
    /* exits at once but leaves a child holding the output pipe: the answer still comes soon,
     * and the child is ended */
    fake_mpirun("sleep 1000 &\necho $! > \"$(dirname \"$0\")/pid\"\necho 'Intel(R) MPI Library'");
    char *env[] = {path_env, NULL};
    char out[4096];
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__mpi_detect_timeout(env, 5000, out, sizeof out), HVD_MPI_INTEL);
    assert_true(hvd__clock_now_ms() - t0 < 3000);
    assert_string_equal(out, "Intel(R) MPI Library\n");
    char file[128];
    snprintf(file, sizeof file, "%s/pid", dir);
    assert_true(wait_dead(pid_from(file)));
    remove_dir();
}

static void test_detect_much_output(void **state) {
    (void)state;
    /* more than the pipe holds and than is kept: read to the end, kept up to the bound */
    fake_mpirun("echo 'MPICH Version: 4.0'\nhead -c 300000 /dev/zero | tr '\\0' x");
    char *env[] = {path_env, NULL};
    static char out[HVD_MPI_DETECT_OUTPUT_CAP * 2];
    assert_int_equal(hvd__mpi_detect(env, out, sizeof out), HVD_MPI_MPICH);
    assert_int_equal(strlen(out), HVD_MPI_DETECT_OUTPUT_CAP - 1);
    /* a failure's reason survives a full buffer */
    remove_dir();
    fake_mpirun("head -c 300000 /dev/zero | tr '\\0' x\nexit 3");
    env[0] = path_env;
    assert_int_equal(hvd__mpi_detect(env, out, sizeof out), HVD_MPI_MISSING);
    assert_true(strlen(out) <= HVD_MPI_DETECT_OUTPUT_CAP - 1);
    const char *tail = "--version failed with exit code 3\n";
    assert_string_equal(out + strlen(out) - strlen(tail), tail);
    remove_dir();
    /* a writer that never stops still meets the deadline */
    fake_mpirun("echo 'mpirun (Open MPI) 4.1.4'\nexec yes");
    env[0] = path_env;
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__mpi_detect_timeout(env, 500, out, sizeof out), HVD_MPI_MISSING);
    assert_true(hvd__clock_now_ms() - t0 < 3000);
    assert_non_null(strstr(out, "did not finish within 500 ms"));
    remove_dir();
}

/* ---- the command -------------------------------------------------------------------------------
 */

static char *build(const hvd_mpi_config_t *c) {
    char *cmd = NULL;
    assert_int_equal(hvd__mpi_command(c, &cmd), HVD_OK);
    return cmd;
}

static void expect(const hvd_mpi_config_t *c, const char *want) {
    char *cmd = build(c);
    assert_string_equal(cmd, want);
    free(cmd);
}

static char *cmd_argv[] = {"cmd", NULL};

static void test_command_open_mpi_minimal(void **state) {
    (void)state;
    hvd_host_t h[] = {{"localhost", 2}};
    hvd_host_list_t hosts = {h, 1};
    hvd_mpi_config_t c = {.impl = HVD_MPI_OPENMPI,
                          .np = 2,
                          .hosts_text = "localhost:2",
                          .hosts = &hosts,
                          .argv = cmd_argv};
    /* Horovod's test_mpi_run_minimal with the real binding and implementation flags */
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 2 -H localhost:2 "
               "-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib       cmd");
    /* no hosts at all: this machine */
    c.hosts_text = NULL;
    c.hosts = NULL;
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 2 -H localhost:2 "
               "-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib       cmd");
    /* hosts from a hostfile: -H made from the list */
    hvd_host_t two[] = {{"h1", 2}, {"h2", 4}};
    hvd_host_list_t from_file = {two, 2};
    c.hosts = &from_file;
    c.np = 6;
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 6 -H h1:2,h2:4 "
               "-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib       cmd");
}

static void test_command_open_mpi_large_cluster(void **state) {
    (void)state;
    hvd_host_t h[64];
    char text[64 * 12] = "";
    for (int i = 0; i < 64; i++) {
        h[i] = (hvd_host_t){"localhost", 1};
        strcat(text, i ? ",localhost:1" : "localhost:1");
    }
    hvd_host_list_t hosts = {h, 64};
    hvd_mpi_config_t c = {
        .impl = HVD_MPI_OPENMPI, .np = 2, .hosts_text = text, .hosts = &hosts, .argv = cmd_argv};
    char want[2048];
    snprintf(want, sizeof want,
             "mpirun --allow-run-as-root --tag-output -np 2 -H %s -bind-to none -map-by slot "
             "-mca pml ob1 -mca btl ^openib -mca plm_rsh_no_tree_spawn true "
             "-mca plm_rsh_num_concurrent 64       cmd",
             text);
    expect(&c, want);
    /* 63 hosts: not yet */
    hosts.count = 63;
    char *cmd = build(&c);
    assert_null(strstr(cmd, "plm_rsh"));
    free(cmd);
}

static void test_command_open_mpi_full(void **state) {
    (void)state;
    hvd_host_t h[] = {{"localhost", 1}};
    hvd_host_list_t hosts = {h, 1};
    const char *nics[] = {"eth0", "eth1"};
    const char *env[] = {"env2", "env1"};
    char *argv[] = {"cmd", "arg1", "arg2", NULL};
    hvd_mpi_config_t c = {.impl = HVD_MPI_OPENMPI,
                          .np = 1,
                          .hosts_text = "localhost:1",
                          .hosts = &hosts,
                          .ssh_port = 1022,
                          .nics = nics,
                          .nic_count = 2,
                          .nics_from_user = 1,
                          .output_dir = "/tmp/hvd-out",
                          .binding_args = "-bind-to core -map-by core",
                          .mpi_args = "-mca btl_base_verbose 30 --report-bindings",
                          .env_names = env,
                          .env_name_count = 2,
                          .argv = argv};
    /* Horovod's test_mpi_run_full with the real implementation flags */
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 1 -H localhost:1 "
               "-bind-to core -map-by core -mca pml ob1 -mca btl ^openib "
               "-mca plm_rsh_args \"-p 1022\" -mca btl_tcp_if_include eth0,eth1 "
               "-x NCCL_SOCKET_IFNAME=eth0,eth1 --output-filename /tmp/hvd-out "
               "-x env1 -x env2 -mca btl_base_verbose 30 --report-bindings cmd arg1 arg2");
    /* discovered interfaces are used by Open MPI too; identity, timestamps */
    c.nics_from_user = 0;
    c.ssh_identity = "/home/u/.ssh/id \"x\"";
    c.prefix_timestamp = 1;
    c.nic_count = 1;
    c.env_name_count = 0;
    c.mpi_args = NULL;
    c.binding_args = NULL;
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 1 -H localhost:1 "
               "-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib --timestamp-output "
               "-mca plm_rsh_args \"-p 1022 -i /home/u/.ssh/id \\\"x\\\"\" "
               "-mca btl_tcp_if_include eth0 -x NCCL_SOCKET_IFNAME=eth0 "
               "--output-filename /tmp/hvd-out   cmd arg1 arg2");
    c.ssh_port = 0;
    c.ssh_identity = "/k";
    c.prefix_timestamp = 0;
    c.nic_count = 0;
    c.output_dir = NULL;
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 1 -H localhost:1 "
               "-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib "
               "-mca plm_rsh_args \"-i /k\"      cmd arg1 arg2");
    /* horovod.spark's rsh agent instead of ssh (its options then unused) */
    c.rsh_agent = "/venv/bin/python -m horovod.spark.rsh";
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 1 -H localhost:1 "
               "-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib "
               "-mca plm_rsh_agent \"/venv/bin/python -m horovod.spark.rsh\"      cmd arg1 arg2");
    /* MPICH's launcher takes one program: refused, saying why */
    c.impl = HVD_MPI_MPICH;
    char *cmd = NULL;
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    assert_null(cmd);
    assert_non_null(strstr(hvd_last_error(), "run with Open MPI's mpirun, or without MPI"));
}

static void test_command_quoting_and_secret(void **state) {
    (void)state;
    const char *env[] = {"_HOROVOD_SECRET_KEY", "HOROVOD_RANK_PLACEHOLDER"};
    char *argv[] = {"python3", "train.py", "--name", "a b", "", "it's", "$HOME", NULL};
    hvd_mpi_config_t c = {.impl = HVD_MPI_OPENMPI,
                          .np = 1,
                          .hosts_text = "localhost:1",
                          .output_dir = "/tmp/my out",
                          .env_names = env,
                          .env_name_count = 2,
                          .argv = argv};
    char *cmd = build(&c);
    /* names only, in byte order (upper case sorts before the underscore) */
    assert_non_null(strstr(cmd, " -x HOROVOD_RANK_PLACEHOLDER -x _HOROVOD_SECRET_KEY "));
    assert_non_null(strstr(cmd, "--output-filename '/tmp/my out' "));
    const char *tail = " python3 train.py --name 'a b' '' 'it'\"'\"'s' '$HOME'";
    assert_string_equal(cmd + strlen(cmd) - strlen(tail), tail);
    free(cmd);
}

static void test_command_spectrum(void **state) {
    (void)state;
    hvd_mpi_config_t c = {
        .impl = HVD_MPI_SPECTRUM, .np = 4, .hosts_text = "a:2,b:2", .argv = cmd_argv};
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 4 -H a:2,b:2 "
               "-bind-to socket -map-by socket -rank-by core        cmd");
    c.tcp = 1;
    c.prefix_timestamp = 1;
    c.binding_args = "-bind-to core";
    const char *env[] = {"X"};
    c.env_names = env;
    c.env_name_count = 1;
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 4 -H a:2,b:2 "
               "-bind-to core -tcp --timestamp-output     -x X  cmd");
    /* no -tcp: the large-cluster flags lead */
    hvd_host_t h[64];
    for (int i = 0; i < 64; i++)
        h[i] = (hvd_host_t){"n", 1};
    hvd_host_list_t hosts = {h, 64};
    c.hosts = &hosts;
    c.tcp = 0;
    c.prefix_timestamp = 0;
    c.env_name_count = 0;
    expect(&c, "mpirun --allow-run-as-root --tag-output -np 4 -H a:2,b:2 -bind-to core "
               "-mca plm_rsh_no_tree_spawn true -mca plm_rsh_num_concurrent 64       cmd");
}

static void test_command_mpich_intel(void **state) {
    (void)state;
    hvd_host_t h[] = {{"h1", 2}, {"h2", 2}};
    hvd_host_list_t hosts = {h, 2};
    const char *nics[] = {"eth0"};
    const char *env[] = {"_HOROVOD_SECRET_KEY"};
    char *argv[] = {"cmd", "arg 1", NULL};
    hvd_mpi_config_t c = {.impl = HVD_MPI_MPICH,
                          .np = 4,
                          .hosts_text = "h1:2,h2:2",
                          .hosts = &hosts,
                          .binding_args = "-bind-to core", /* not followed by MPICH */
                          .prefix_timestamp = 1,           /* no MPICH flag */
                          .tcp = 1,
                          .env_names = env, /* MPICH passes the environment itself */
                          .env_name_count = 1,
                          .argv = argv};
    expect(&c, "mpirun -l -np 4 -ppn 2 -hosts h1,h2 -bind-to none -map-by slot        cmd "
               "'arg 1'");
    c.impl = HVD_MPI_INTEL;
    expect(&c, "mpirun -l -np 4 -ppn 2 -hosts h1,h2         cmd 'arg 1'");
    c.ssh_port = 2222;
    c.ssh_identity = "/id";
    c.nics = nics;
    c.nic_count = 1;
    c.nics_from_user = 1;
    c.output_dir = "/out";
    c.mpi_args = "-v";
    expect(&c, "mpirun -l -np 4 -ppn 2 -hosts h1,h2   -bootstrap=ssh -bootstrap-exec-args "
               "\"-p 2222 -i /id\" -iface eth0 -genv NCCL_SOCKET_IFNAME=eth0 "
               "-outfile-pattern /out  -v cmd 'arg 1'");
    /* discovered interfaces: NCCL is told, MPI is not */
    c.nics_from_user = 0;
    c.impl = HVD_MPI_MPICH;
    c.ssh_port = 0;
    c.ssh_identity = NULL;
    c.output_dir = NULL;
    c.mpi_args = NULL;
    expect(&c, "mpirun -l -np 4 -ppn 2 -hosts h1,h2 -bind-to none -map-by slot    "
               "-genv NCCL_SOCKET_IFNAME=eth0    cmd 'arg 1'");
    /* no hosts: localhost with np slots; no large-cluster flags for MPICH */
    c.hosts = NULL;
    c.nic_count = 0;
    expect(&c, "mpirun -l -np 4 -ppn 4 -hosts localhost -bind-to none -map-by slot        "
               "cmd 'arg 1'");
    hvd_host_t many[64];
    for (int i = 0; i < 64; i++)
        many[i] = (hvd_host_t){"n", 1};
    hvd_host_list_t big = {many, 64};
    c.hosts = &big;
    char *cmd = build(&c);
    assert_null(strstr(cmd, "plm_rsh"));
    free(cmd);
}

static void test_command_errors(void **state) {
    (void)state;
    hvd_host_t h[] = {{"h1", 2}, {"h2", 4}};
    hvd_host_list_t hosts = {h, 2};
    char *cmd = (char *)0x1;
    hvd_mpi_config_t c = {.impl = HVD_MPI_INTEL, .np = 6, .hosts = &hosts, .argv = cmd_argv};
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    assert_string_equal(hvd_last_error(),
                        "Different slots in -hosts parameter are not supported in Intel(R) MPI. "
                        "Use -machinefile <machine_file> for this purpose.");
    c.impl = HVD_MPI_MPICH;
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    /* Open MPI takes unequal slots */
    c.impl = HVD_MPI_OPENMPI;
    char *ok = build(&c);
    free(ok);

    const char *nics[] = {"eth0", "eth1"};
    hosts.count = 1;
    c = (hvd_mpi_config_t){.impl = HVD_MPI_MPICH,
                           .np = 2,
                           .hosts = &hosts,
                           .nics = nics,
                           .nic_count = 2,
                           .nics_from_user = 1,
                           .argv = cmd_argv};
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    assert_string_equal(hvd_last_error(),
                        "Intel MPI and MPICH do not support multiple interfaces.");
    c.impl = HVD_MPI_INTEL;
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    /* several discovered interfaces are only NCCL's business */
    c.nics_from_user = 0;
    ok = build(&c);
    assert_non_null(strstr(ok, "-genv NCCL_SOCKET_IFNAME=eth0,eth1"));
    assert_null(strstr(ok, "-iface"));
    free(ok);

    c = (hvd_mpi_config_t){.impl = HVD_MPI_UNKNOWN, .np = 1, .argv = cmd_argv};
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    c.impl = HVD_MPI_MISSING;
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    c.impl = HVD_MPI_OPENMPI;
    c.np = 0;
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    c.np = 1;
    char *empty[] = {NULL};
    c.argv = empty;
    assert_int_equal(hvd__mpi_command(&c, &cmd), HVD_ERR_INVALID_ARG);
    assert_ptr_equal(cmd, (char *)0x1); /* untouched on error */
}

/* ---- mpirun's environment and running it -------------------------------------------------------
 */

static void test_env(void **state) {
    (void)state;
    char *launcher[] = {"PATH=/launcher/bin", "PYTHONPATH=/launcher/py", "HOME=/root", NULL};
    char *base[] = {"A=1", "_HOROVOD_SECRET_KEY=s3cr3t", NULL};
    hvd_env_list_t env;
    assert_int_equal(hvd__mpi_env(base, launcher, &env), HVD_OK);
    assert_int_equal(env.count, 4);
    assert_string_equal(hvd__env_list_get(&env, "A"), "1");
    assert_string_equal(hvd__env_list_get(&env, "_HOROVOD_SECRET_KEY"), "s3cr3t");
    assert_string_equal(hvd__env_list_get(&env, "PATH"), "/launcher/bin");
    assert_string_equal(hvd__env_list_get(&env, "PYTHONPATH"), "/launcher/py");
    assert_null(hvd__env_list_get(&env, "HOME"));
    assert_null(env.entries[env.count]);
    hvd__env_list_fini(&env);
    /* the job's own values win */
    char *own[] = {"PATH=/job/bin", "PYTHONPATH=", NULL};
    assert_int_equal(hvd__mpi_env(own, launcher, &env), HVD_OK);
    assert_int_equal(env.count, 2);
    assert_string_equal(hvd__env_list_get(&env, "PATH"), "/job/bin");
    assert_string_equal(hvd__env_list_get(&env, "PYTHONPATH"), "");
    hvd__env_list_fini(&env);
    /* neither has them */
    char *bare[] = {"HOME=/", NULL};
    assert_int_equal(hvd__mpi_env(NULL, bare, &env), HVD_OK);
    assert_int_equal(env.count, 0);
    hvd__env_list_fini(&env);
}

/* Run hvd__mpi_run in a child whose stdout and stderr are files (the relay writes to ours and
 * blocks signals for good); its exit status is mpirun's exit code, or 200 if it failed. */
static int run_in_child(const char *cmd, char *const *env, const char *out_file,
                        const char *err_file) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int o = open(out_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(201);
        int code;
        _exit(hvd__mpi_run(cmd, env, &code) == HVD_OK ? code : 200);
    }
    int64_t deadline = hvd__clock_now_ms() + DEADLINE_MS;
    int status;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (hvd__clock_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("hvd__mpi_run did not finish within %d ms", DEADLINE_MS);
        }
        hvd__clock_sleep_ms(20);
    }
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_run(void **state) {
    (void)state;
    /* a fake mpirun that shows its arguments and the secret it was given by environment */
    fake_mpirun("for a in \"$@\"; do printf '<%s>' \"$a\"; done\necho\n"
                "printf 'no newline at the end'\n"
                "echo \"secret=$_HOROVOD_SECRET_KEY\" >&2\nexit 3");
    char secret[] = "_HOROVOD_SECRET_KEY=s3cr3t";
    char *env[] = {path_env, secret, NULL};
    const char *names[] = {"_HOROVOD_SECRET_KEY"};
    char *argv[] = {"python3", "a b", NULL};
    hvd_mpi_config_t c = {
        .impl = HVD_MPI_OPENMPI, .np = 2, .env_names = names, .env_name_count = 1, .argv = argv};
    char *cmd = build(&c);
    assert_null(strstr(cmd, "s3cr3t"));
    char out_file[128], err_file[128], text[4096];
    snprintf(out_file, sizeof out_file, "%s/out", dir);
    snprintf(err_file, sizeof err_file, "%s/err", dir);
    assert_int_equal(run_in_child(cmd, env, out_file, err_file), 3);
    free(cmd);
    read_file(out_file, text, sizeof text);
    assert_string_equal(text, "<--allow-run-as-root><--tag-output><-np><2><-H><localhost:2>"
                              "<-bind-to><none><-map-by><slot><-mca><pml><ob1><-mca><btl>"
                              "<^openib><-x><_HOROVOD_SECRET_KEY><python3><a b>\n"
                              "no newline at the end");
    read_file(err_file, text, sizeof text);
    assert_string_equal(text, "secret=s3cr3t\n");

    /* success, and a command that is not there (the shell's 127) */
    assert_int_equal(run_in_child("mpirun >/dev/null 2>&1; exit 0", env, out_file, err_file), 0);
    assert_int_equal(run_in_child("no-such-mpirun-here", env, out_file, err_file), 127);
    remove_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_detect_open_mpi),
        cmocka_unit_test(test_detect_mpich_and_unknown),
        cmocka_unit_test(test_detect_failing),
        cmocka_unit_test(test_detect_not_found),
        cmocka_unit_test(test_detect_deadline),
        cmocka_unit_test(test_detect_leftover_child),
        cmocka_unit_test(test_detect_much_output),
        cmocka_unit_test(test_command_open_mpi_minimal),
        cmocka_unit_test(test_command_open_mpi_large_cluster),
        cmocka_unit_test(test_command_open_mpi_full),
        cmocka_unit_test(test_command_quoting_and_secret),
        cmocka_unit_test(test_command_spectrum),
        cmocka_unit_test(test_command_mpich_intel),
        cmocka_unit_test(test_command_errors),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
