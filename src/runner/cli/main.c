/* horovodrun: parse the command line, plan the slots, start the rendezvous store, launch and
 * supervise the ranks. Exit codes are documented in README.md and in --help. */
#include <hvd/hvd.h>

#include "common/error.h"
#include "common/log.h"
#include "common/params.h"
#include "crypto/secret.h"
#include "os/netif.h"
#include "os/socket.h"
#include "os/spawn.h"
#include "runner/rendezvous/kv_server.h"
#include "rendezvous/rank_plan.h"
#include "runner/cli/help.h"
#include "runner/hosts/hosts.h"
#include "runner/launch/launch.h"
#include "runner/launch/workers.h"
#include "runner/mpi/mpi_run.h"
#include "runner/cli/cache.h"
#include "runner/elastic/elastic_driver.h"
#include "runner/elastic/host_discovery.h"
#include "runner/discovery/nic_discovery.h"
#include "runner/discovery/task_service.h"
#include "runner/launch/remote_exec.h"
#include "runner/launch/ssh.h"
#include "runner/hosts/store_scopes.h"
#include "runner/cli/settings.h"
#include "runner/slurm/slurm_alloc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define EXIT_USAGE 2
#define EXIT_LAUNCH 1
/* SIGTERM -> SIGKILL grace for ranks being terminated (Horovod's GRACEFUL_TERMINATION_TIME_S) */
#define KILL_GRACE_MS 5000

static int usage_error(void) {
    fprintf(stderr, "horovodrun: error: %s\n", hvd_last_error());
    return EXIT_USAGE;
}

/* -H, --hostfile, else the Slurm allocation horovodrun runs in (*from_slurm_p = 1: remote
 * ranks then start through srun), else this host with -np slots. */
static hvd_status_t load_hosts(const hvd_settings_t *s, hvd_host_list_t *hosts, int *from_slurm_p) {
    *from_slurm_p = 0;
    if (s->hosts)
        return hvd__hosts_parse(s->hosts, hosts);
    if (s->hostfile)
        return hvd__hosts_parse_file(s->hostfile, hosts);
    hvd_status_t st = hvd__slurm_alloc_hosts(hvd__slurm_getenv, NULL, hosts, from_slurm_p);
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun: %s\n", hvd_last_error());
        return st;
    }
    if (*from_slurm_p) {
        if (s->verbose)
            printf("Hosts from Slurm allocation %s (SLURM_JOB_NODELIST=%s); remote ranks start "
                   "through srun\n",
                   getenv("SLURM_JOB_ID"), getenv("SLURM_JOB_NODELIST"));
        return HVD_OK;
    }
    char local[32];
    snprintf(local, sizeof local, "localhost:%d", s->num_proc);
    return hvd__hosts_parse(local, hosts);
}

/* An elastic job's hosts at start: the discovery script's first answer, else -H/--hostfile
 * (or the allocation's). *via_srun_p: its remote ranks start through srun, as for a
 * static job, when its hosts are the allocation's, and also when a discovery script names them
 * from inside an allocation: they are then nodes of this user's Slurm jobs (the allocation
 * it runs in or another: scripts/horovodrun-slurm-hosts), which srun reaches with no ssh. */
static hvd_status_t initial_elastic_hosts(const hvd_settings_t *s, hvd_host_list_t *hosts,
                                          int *via_srun_p) {
    if (!s->discovery_script)
        return load_hosts(s, hosts, via_srun_p);
    const char *job = getenv("SLURM_JOB_ID");
    *via_srun_p = job && *job;
    hvd_host_discovery_config_t dc = {.script = s->discovery_script,
                                      .default_slots = s->slots_per_host};
    return hvd__host_discovery_run(&dc, hosts);
}

/* Refuse what this build cannot do yet, with a message saying so, rather than half-doing it. */
static hvd_status_t check_supported(const hvd_settings_t *s) {
    if (s->controller == HVD_CONTROLLER_JSRUN)
        return hvd__error_set(HVD_ERR_UNSUPPORTED,
                              "--jsrun: this build has no jsrun launch path; --mpi runs the job "
                              "with mpirun, the default (or --gloo) without MPI");
    if (s->elastic && s->controller == HVD_CONTROLLER_MPI)
        return hvd__error_set(HVD_ERR_UNSUPPORTED,
                              "elastic mode (--min-np / --host-discovery-script) starts and "
                              "replaces workers itself and cannot run under mpirun: drop --mpi");
    return HVD_OK;
}

/* The hosts of the plan: each once, in plan order, whether it is another machine (as in
 * Horovod, a host is local when it resolves to one of this machine's addresses; each name is
 * resolved once), the remote ones, and for each slot whether it is remote. */
typedef struct {
    const char **names;    /* borrowed from the plan */
    unsigned char *remote; /* per name */
    size_t count;
    const char **remote_names; /* the remote ones, in plan order */
    size_t nremote;
    unsigned char *slot_remote; /* per slot of the plan */
} job_hosts_t;

static void job_hosts_fini(job_hosts_t *h) {
    free(h->names);
    free(h->remote);
    free(h->remote_names);
    free(h->slot_remote);
    memset(h, 0, sizeof *h);
}

static hvd_status_t job_hosts_init(const hvd_slot_plan_t *plan, const hvd_netif_t *ifs, size_t n,
                                   int all_remote, int verbose, job_hosts_t *h) {
    size_t cap = plan->count ? plan->count : 1;
    *h = (job_hosts_t){.names = calloc(cap, sizeof *h->names),
                       .remote = calloc(cap, 1),
                       .remote_names = calloc(cap, sizeof *h->remote_names),
                       .slot_remote = calloc(cap, 1)};
    if (!h->names || !h->remote || !h->remote_names || !h->slot_remote) {
        job_hosts_fini(h);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < plan->count; i++) {
        const char *name = plan->slots[i].host;
        size_t k = 0;
        while (k < h->count && strcmp(h->names[k], name) != 0)
            k++;
        if (k == h->count) {
            h->names[h->count] = name;
            /* (an rsh agent's host names are names only: its hosts are all elsewhere) */
            h->remote[h->count] = all_remote || !hvd__netif_is_local_host(name, ifs, n);
            if (h->remote[h->count])
                h->remote_names[h->nremote++] = name;
            h->count++;
        }
        h->slot_remote[i] = h->remote[k];
    }
    if (verbose) {
        printf("Filtering local host names.\nRemote host found:");
        for (size_t k = 0; k < h->nremote; k++)
            printf(" %s", h->remote_names[k]);
        printf("%s\n", h->nremote ? "" : " ");
    }
    return HVD_OK;
}

/* The data-plane interfaces and the address ranks reach the rendezvous store at.
 * All hosts local: the user's interfaces (each must exist here), else the one holding
 * 127.0.0.1, as Horovod does; the store listens on loopback.
 * Remote hosts: the user's interfaces, else the one this machine uses to reach the first
 * remote host; the store is reached at this machine's address on that interface. Hosts
 * reached through an rsh agent have no address to route to: NIC discovery, which always runs
 * for them, decides. */
static hvd_status_t choose_network(const hvd_settings_t *s, const hvd_netif_t *ifs, size_t n,
                                   const char *first_remote, char *iface, size_t iface_size,
                                   char *all, size_t all_size, char driver_ip[16]) {
    all[0] = '\0';
    if (s->nic_count) {
        size_t used = 0;
        for (size_t i = 0; i < s->nic_count; i++) {
            if (!first_remote && !hvd__netif_by_name(s->nics[i], ifs, n))
                return hvd__error_set(HVD_ERR_INVALID_ARG,
                                      "network interface '%s' does not exist or has no IPv4 "
                                      "address on this host",
                                      s->nics[i]);
            used += (size_t)snprintf(all + used, all_size > used ? all_size - used : 0, "%s%s",
                                     i ? "," : "", s->nics[i]);
        }
        snprintf(iface, iface_size, "%s", s->nics[0]);
        const hvd_netif_t *mine = hvd__netif_by_name(s->nics[0], ifs, n);
        if (!first_remote)
            snprintf(driver_ip, 16, "127.0.0.1");
        else if (s->rsh_agent)
            driver_ip[0] = '\0';
        else if (mine)
            snprintf(driver_ip, 16, "%s", mine->addr);
        else
            return hvd__socket_route_addr(first_remote, 22, driver_ip);
        return HVD_OK;
    }
    if (first_remote && s->rsh_agent) {
        iface[0] = driver_ip[0] = '\0';
        return HVD_OK;
    }
    if (first_remote) {
        hvd_status_t st = hvd__socket_route_addr(first_remote, 22, driver_ip);
        if (st != HVD_OK)
            return hvd__error_wrap(st, "cannot find this machine's address toward host %s",
                                   first_remote);
        const hvd_netif_t *mine = hvd__netif_by_addr(driver_ip, ifs, n);
        snprintf(iface, iface_size, "%s", mine ? mine->name : "");
        snprintf(all, all_size, "%s", iface);
        return HVD_OK;
    }
    const hvd_netif_t *lo = hvd__netif_by_addr("127.0.0.1", ifs, n);
    snprintf(iface, iface_size, "%s", lo ? lo->name : "lo");
    snprintf(all, all_size, "%s", iface);
    snprintf(driver_ip, 16, "127.0.0.1");
    if (s->verbose) {
        printf("All hosts are local, finding the interfaces with address 127.0.0.1\n");
        printf("Local interface found %s\n", iface);
    }
    return HVD_OK;
}

static void free_strings(char **v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

/* Split "a,b" into a malloc'd array of malloc'd strings. */
static hvd_status_t split_csv(const char *csv, char ***v_p, size_t *n_p) {
    size_t cap = 1;
    for (const char *c = csv; *c; c++)
        cap += *c == ',';
    char **v = calloc(cap, sizeof *v);
    size_t n = 0;
    for (const char *c = csv; v && *c;) {
        size_t len = strcspn(c, ",");
        if (len && !(v[n++] = strndup(c, len))) {
            free_strings(v, n);
            v = NULL;
        }
        c += len + (c[len] == ',');
    }
    if (!v)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    *v_p = v;
    *n_p = n;
    return HVD_OK;
}

/* --mpi: mpirun starts the ranks; horovodrun builds its command, gives it the job's
 * environment (every variable passed by name with -x, the secret among them, so no value is
 * on a command line), serves the rendezvous store while it runs, and exits with its code. */
static hvd_status_t launch_mpi(const hvd_settings_t *s, const hvd_host_list_t *hosts,
                               hvd_mpi_impl_t impl, const hvd_env_list_t *exports,
                               const hvd_secret_t *secret, const char *nics_csv, int *code_p) {
    hvd_env_list_t job, mpienv;
    hvd__env_list_init(&job);
    hvd__env_list_init(&mpienv);
    char **names = NULL, **nics = NULL, *cmd = NULL;
    size_t n_names = 0, n_nics = 0;
    hvd_status_t st = hvd__env_list_set_entries(
        &job, environ, s->rsh_agent ? hvd__workers_not_job_variable : hvd__workers_excluded_name);
    if (st == HVD_OK)
        st = hvd__env_list_merge(&job, exports);
    if (st == HVD_OK) {
        char hex[HVD_SECRET_HEX_LEN + 1];
        hvd__secret_to_hex(secret, hex);
        st = hvd__env_list_set(&job, HVD_SECRET_ENV, hex);
        explicit_bzero(hex, sizeof hex);
    }
    if (st == HVD_OK && !(names = calloc(job.count + 1, sizeof *names)))
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; st == HVD_OK && i < job.count; i++) {
        names[i] = strndup(job.entries[i], strcspn(job.entries[i], "="));
        if (!names[i])
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        n_names = i + 1;
    }
    if (st == HVD_OK)
        st = split_csv(nics_csv, &nics, &n_nics);
    if (st == HVD_OK) {
        hvd_mpi_config_t mc = {.impl = impl,
                               .np = s->num_proc,
                               .hosts_text = s->hosts,
                               .hosts = hosts,
                               .ssh_port = s->ssh_port,
                               .ssh_identity = s->ssh_identity_file,
                               .rsh_agent = s->rsh_agent,
                               .nics = (const char *const *)nics,
                               .nic_count = n_nics,
                               .nics_from_user = s->nic_count > 0,
                               .output_dir = s->output_dir,
                               .prefix_timestamp = s->prefix_timestamp,
                               .tcp = s->tcp,
                               .binding_args = s->binding_args,
                               .mpi_args = s->mpi_args,
                               .env_names = (const char *const *)names,
                               .env_name_count = n_names,
                               .argv = s->command};
        st = hvd__mpi_command(&mc, &cmd);
    }
    if (st == HVD_OK && s->verbose)
        printf("%s\n", cmd);
    if (st == HVD_OK)
        st = hvd__mpi_env(job.entries, environ, &mpienv);
    fflush(stdout);
    if (st == HVD_OK)
        st = hvd__mpi_run(cmd, mpienv.entries, code_p);
    for (size_t i = 0; i < job.count; i++)
        explicit_bzero(job.entries[i], strlen(job.entries[i]));
    for (size_t i = 0; i < mpienv.count; i++)
        explicit_bzero(mpienv.entries[i], strlen(mpienv.entries[i]));
    hvd__env_list_fini(&job);
    hvd__env_list_fini(&mpienv);
    free_strings(names, n_names);
    free_strings(nics, n_nics);
    free(cmd);
    return st;
}

/* items joined by sep into out; 0 when they did not all fit (out then holds a prefix). */
static int join(const char *const *items, size_t n, const char *sep, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s", i ? sep : "", items[i]);
    return used < size;
}

/* NIC discovery (or the network check) of the job's hosts, as the settings ask. */
static hvd_nic_discovery_config_t discovery_config(const hvd_settings_t *s, const job_hosts_t *jh,
                                                   const hvd_ssh_opts_t *ssh, const char *exe,
                                                   const hvd_secret_t *secret) {
    return (hvd_nic_discovery_config_t){.hosts = jh->names,
                                        .remote = jh->remote,
                                        .count = jh->count,
                                        .ssh = ssh,
                                        .exe = exe,
                                        .secret = secret,
                                        .nics = (const char *const *)s->nics,
                                        .nic_count = s->nic_count,
                                        .timeout_s = s->start_timeout,
                                        .verbose = s->verbose,
                                        .out_fd = STDOUT_FILENO,
                                        .err_fd = STDERR_FILENO};
}

/* How remote hosts are reached: ssh as the settings say, or srun inside an allocation. */
static hvd_ssh_opts_t ssh_opts(const hvd_settings_t *s, int via_srun) {
    return (hvd_ssh_opts_t){.port = s->ssh_port,
                            .identity = s->ssh_identity_file,
                            .connect_timeout_s = s->start_timeout,
                            .srun = via_srun,
                            .agent = s->rsh_agent};
}

/* Start-up checks when some hosts are remote (docs/running.md, "Across hosts"): ssh into each,
 * then, unless the user named the interfaces, NIC discovery, whose result chooses the
 * data-plane interfaces and the address ranks reach the rendezvous store at. Both results are
 * cached for an hour per parameter set (np, hosts, ssh port and key, interfaces) unless
 * --disable-cache; failures never are. Interfaces given by name are used as given, as
 * Horovod does; given as networks (CIDR), discovery runs with them as its filter and each
 * rank finds its own interface in that network (HOROVOD_GLOO_IFACE holds the network).
 * When discovery runs, its task services' ssh sessions are the ssh check (same retries, same
 * words on failure), and with keep_p they go on to carry the launch: one ssh session per host
 * for the whole start-up, as mpirun's one daemon per host. */
static hvd_status_t remote_checks(const hvd_settings_t *s, const job_hosts_t *jh,
                                  const hvd_ssh_opts_t *ssh, const char *exe,
                                  const hvd_secret_t *secret, char *iface, size_t iface_size,
                                  char *nics, size_t nics_size, char driver_ip[16],
                                  hvd_ready_session_t **keep_p, size_t *nkeep_p) {
    hvd_status_t st = HVD_OK;
    char all[8192], remote_list[8192];
    /* the host lists key the cache: a list too long to hold whole is not cached at all */
    int keyed = join(jh->names, jh->count, ",", all, sizeof all) &
                join(jh->remote_names, jh->nremote, ",", remote_list, sizeof remote_list);
    hvd_start_cache_t *cache = NULL;
    int64_t now = (int64_t)time(NULL);
    const char *home = getenv("HOME");
    char dir[4096], *params = NULL;
    /* (an agent's host names are not hosts a later launch would find again) */
    if (!s->disable_cache && !ssh->agent && keyed && home && *home &&
        hvd__start_cache_default_dir(home, dir, sizeof dir) == HVD_OK &&
        hvd__start_cache_params(s->num_proc, all, s->ssh_port, s->ssh_identity_file,
                                (const char *const *)s->nics, s->nic_count, &params) == HVD_OK &&
        hvd__start_cache_open(dir, params, now, &cache) != HVD_OK)
        cache = NULL; /* no cache is no reason to fail the job */
    free(params);

    int by_network = 0;
    for (size_t i = 0; i < s->nic_count; i++)
        by_network |= strchr(s->nics[i], '/') != NULL;
    int discover = s->nic_count == 0 || by_network || ssh->agent;
    hvd_disc_result_t r;
    int have = discover && cache && hvd__start_cache_get_discovery(cache, all, now, &r) == HVD_OK;
    /* (srun has nothing to check, and nothing to remember for a later launch over ssh) */
    int ssh_ok = !ssh->srun && cache && hvd__start_cache_get_ssh_ok(cache, remote_list, now);
    if (ssh_ok) {
        if (s->verbose)
            printf("SSH was successful into all the remote hosts (cached).\n");
    } else if (!discover || have) {
        st = hvd__ssh_check_hosts(ssh, jh->remote_names, jh->nremote, s->start_timeout, s->verbose,
                                  STDOUT_FILENO, STDERR_FILENO);
        ssh_ok = st == HVD_OK;
        if (ssh_ok && cache && !ssh->srun)
            hvd__start_cache_put_ssh_ok(cache, remote_list, now);
    } /* else discovery's task services check ssh: one session per host instead of two */
    if (st == HVD_OK && discover) {
        if (have && s->verbose)
            printf("Common interface found (cached): %s\n", r.nics[0]);
        if (!have) {
            hvd_nic_discovery_config_t dc = discovery_config(s, jh, ssh, exe, secret);
            dc.keep_p = keep_p;
            dc.nkeep_p = nkeep_p;
            dc.ssh_check = !ssh_ok;
            fflush(stdout);
            st = hvd__nic_discovery_run(&dc, &r);
            have = st == HVD_OK;
            if (have && cache)
                hvd__start_cache_put_discovery(cache, all, &r, now);
            if (have && cache && !ssh_ok)
                hvd__start_cache_put_ssh_ok(cache, remote_list, now);
        }
        if (have) {
            /* deterministic (Horovod took an arbitrary element of a set) */
            snprintf(iface, iface_size, "%s", r.nics[0]);
            const char *names[HVD_DISC_MAX_ADDRS];
            for (size_t i = 0; i < r.nic_count; i++)
                names[i] = by_network ? r.hosts[0].iface : r.nics[i];
            join(names, by_network ? 1 : r.nic_count, ",", nics, nics_size);
            snprintf(driver_ip, 16, "%s", r.driver_addr);
            hvd__disc_result_fini(&r);
        }
    }
    hvd__start_cache_close(cache);
    return st;
}

/* The ranks a launch places: -np, or with --check-network and no -np every slot of the
 * hosts (so that every host is checked). */
static int check_np(const hvd_settings_t *s, const hvd_host_list_t *hosts) {
    if (s->num_proc > 0 || !s->check_network)
        return s->num_proc;
    long long total = 0;
    for (size_t i = 0; i < hosts->count; i++)
        total += hosts->hosts[i].slots;
    return total < 1 ? 1 : total > 1 << 20 ? 1 << 20 : (int)total;
}

/* --check-network: start the task service on every host of the plan (over ssh or srun where
 * remote), let each probe every other on each address that passes the interface filter, and
 * print the matrix (runner/discovery/discovery.h) with the cause of each failure. 0 when some
 * interface works on every link, EXIT_LAUNCH otherwise. */
static int check_network(const hvd_settings_t *s, const hvd_slot_plan_t *plan, int via_srun) {
    hvd_netif_t *ifs = NULL;
    size_t nifs = 0;
    job_hosts_t jh = {0};
    hvd_status_t st = hvd__netif_list(&ifs, &nifs);
    if (st == HVD_OK)
        st = job_hosts_init(plan, ifs, nifs, s->rsh_agent != NULL, s->verbose, &jh);
    free(ifs);
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun: %s\n", hvd_last_error());
        return EXIT_LAUNCH;
    }
    if (jh.count < 2) {
        printf("Network check: the job has one host (%s), so no link to check.\n",
               jh.count ? jh.names[0] : "?");
        job_hosts_fini(&jh);
        return 0;
    }
    char exe[4096] = "";
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0)
        exe[len] = '\0';
    hvd_ssh_opts_t ssh = ssh_opts(s, via_srun);
    hvd_secret_t secret;
    st = hvd__secret_generate(&secret);
    hvd_disc_result_t r = {0};
    if (st == HVD_OK) {
        hvd_nic_discovery_config_t dc = discovery_config(s, &jh, &ssh, exe, &secret);
        dc.ssh_check = 1;
        dc.mesh = 1;
        fflush(stdout);
        st = hvd__nic_discovery_run(&dc, &r);
        hvd__disc_result_fini(&r);
    }
    hvd__secret_wipe(&secret);
    job_hosts_fini(&jh);
    if (st == HVD_ERR_NOT_FOUND) /* (the matrix above says why) */
        return EXIT_LAUNCH;
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun: %s\n", hvd_last_error());
        return EXIT_LAUNCH;
    }
    return 0;
}

/* The ranks' HOROVOD_GLOO_TIMEOUT_SECONDS: what horovodrun exports to them (a flag or the
 * config file), else its own environment's (which they inherit). */
static int job_timeout_s(const hvd_settings_t *s, const hvd_env_list_t *exports) {
    const char *v = hvd__env_list_get(exports, "HOROVOD_GLOO_TIMEOUT_SECONDS");
    return v ? atoi(v) : s->gloo_timeout;
}

/* Elastic mode (runner/elastic/elastic_driver.h): the driver starts and replaces workers. */
static hvd_status_t launch_elastic(const hvd_settings_t *s, const hvd_host_list_t *hosts,
                                   const job_hosts_t *jh, const hvd_env_list_t *exports,
                                   const hvd_secret_t *secret, hvd_kv_server_t *server,
                                   const hvd_ssh_opts_t *ssh, const char *exe, const char *cwd,
                                   int *code_p) {
    hvd_netif_t *ifs = NULL;
    size_t nifs = 0;
    hvd_status_t st = hvd__netif_list(&ifs, &nifs);
    if (st != HVD_OK)
        return st;
    hvd_host_discovery_config_t dc = {.script = s->discovery_script,
                                      .default_slots = s->slots_per_host};
    hvd_workers_config_t wc = {.command = s->command,
                               .exports = exports,
                               .secret = secret,
                               .output_dir = s->output_dir,
                               .prefix_timestamp = s->prefix_timestamp,
                               .verbose = s->verbose,
                               .kill_grace_ms = KILL_GRACE_MS,
                               .ssh = ssh,
                               .remote_exe = exe,
                               .cwd = cwd,
                               .out_fd = STDOUT_FILENO,
                               .err_fd = STDERR_FILENO};
    hvd_elastic_config_t ec = {.script = s->discovery_script ? &dc : NULL,
                               .fixed = hosts,
                               .initial_np = s->num_proc,
                               .min_np = s->min_np,
                               .max_np = s->max_np,
                               .reset_limit = s->reset_limit,
                               .elastic_timeout_s = s->elastic_timeout,
                               .cooldown_lower_s = s->cooldown_min,
                               .cooldown_upper_s = s->cooldown_max,
                               .start_timeout_s = s->start_timeout,
                               .silence_timeout_s = job_timeout_s(s, exports),
                               .server = server,
                               .workers = &wc,
                               .ifs = ifs,
                               .nifs = nifs,
                               .verified = jh->remote_names,
                               .nverified = jh->nremote,
                               .verbose = s->verbose};
    fflush(stdout);
    st = hvd__elastic_run(&ec, code_p);
    free(ifs);
    return st;
}

static int run_job(const hvd_settings_t *s, const hvd_host_list_t *hosts,
                   const hvd_slot_plan_t *plan, int via_srun) {
    hvd_netif_t *ifs = NULL;
    size_t nifs = 0;
    char iface[64] = "", nics[1024] = "", driver_ip[16] = "", exe[4096] = "", cwd[4096] = "";
    job_hosts_t jh = {0};
    int code = EXIT_LAUNCH;
    int mpi = s->controller == HVD_CONTROLLER_MPI;
    hvd_mpi_impl_t impl = HVD_MPI_MISSING;
    if (mpi) {
        char version[HVD_MPI_DETECT_OUTPUT_CAP];
        impl = hvd__mpi_detect(environ, version, sizeof version);
        if (impl == HVD_MPI_MISSING || impl == HVD_MPI_UNKNOWN) {
            fprintf(stderr, "horovodrun: --mpi: `mpirun --version` %s:\n%s\nhorovodrun: %s\n",
                    impl == HVD_MPI_MISSING ? "failed" : "names no MPI hvd knows", version,
                    hvd__mpi_not_found_text());
            return EXIT_LAUNCH;
        }
        if (s->verbose)
            printf("MPI implementation: %s\n", hvd__mpi_impl_name(impl));
    }
    hvd_status_t st = hvd__netif_list(&ifs, &nifs);
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun: %s\n", hvd_last_error());
        return EXIT_LAUNCH;
    }
    st = job_hosts_init(plan, ifs, nifs, s->rsh_agent != NULL, s->verbose, &jh);
    if (st == HVD_OK)
        st = choose_network(s, ifs, nifs, jh.nremote ? jh.remote_names[0] : NULL, iface,
                            sizeof iface, nics, sizeof nics, driver_ip);
    free(ifs);
    if (st != HVD_OK) {
        job_hosts_fini(&jh);
        return usage_error();
    }
    hvd_ssh_opts_t ssh = ssh_opts(s, via_srun);
    hvd_secret_t secret;
    hvd_ready_session_t *ready = NULL; /* discovery's ssh sessions, for the launch */
    size_t nready = 0;
    st = hvd__secret_generate(&secret);
    if (st == HVD_OK && (jh.nremote || s->elastic)) {
        /* remote hosts run this very program, found at the same path there (an elastic job
         * may gain remote hosts later) */
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (len > 0)
            exe[len] = '\0';
        /* (an agent's ranks run where its task runs: "" leaves them there) */
        if (s->rsh_agent)
            cwd[0] = '\0';
        else if (!getcwd(cwd, sizeof cwd))
            snprintf(cwd, sizeof cwd, ".");
        fflush(stdout);
        /* a static launch starts each host's ranks through discovery's ssh session */
        if (jh.nremote)
            st = remote_checks(s, &jh, &ssh, exe, &secret, iface, sizeof iface, nics, sizeof nics,
                               driver_ip, mpi || s->elastic ? NULL : &ready, &nready);
    }
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun: %s\n", hvd_last_error());
        hvd__ready_sessions_end(ready, nready);
        hvd__secret_wipe(&secret);
        job_hosts_fini(&jh);
        return EXIT_LAUNCH;
    }
    /* All ranks on this host: the store listens on loopback only; else on every interface
     * (every request is authenticated with the job secret). */
    int any_interface = jh.nremote || s->discovery_script; /* a script may add remote hosts */
    size_t ranks =
        s->max_np > 0 && (size_t)s->max_np > plan->count ? (size_t)s->max_np : plan->count;
    hvd_kv_server_config_t kc = {.bind_addr = any_interface ? "" : "127.0.0.1",
                                 .secret = &secret,
                                 .max_connections = hvd__kv_server_connections_for(ranks)};
    hvd_kv_server_t *server = NULL;
    hvd_env_list_t exports;
    hvd__env_list_init(&exports);
    st = hvd__kv_server_start(&kc, &server);
    /* The elastic driver declares them per round. Under mpirun, mpirun places the ranks, so
     * the ranks get no plan from here and check in with every record. */
    if (st == HVD_OK && !s->elastic)
        st = hvd__store_scopes_declare(server, plan, mpi ? NULL : HVD_RANK_PLAN_STATIC_KEY);
    if (st == HVD_OK && s->verbose)
        printf("Launched horovod server.\n");
    if (st == HVD_OK)
        st = hvd__env_list_merge(&exports, &s->exports);
    if (st == HVD_OK)
        st = hvd__env_list_set(&exports, "HOROVOD_GLOO_RENDEZVOUS_ADDR", driver_ip);
    if (st == HVD_OK)
        st = hvd__env_list_setf(&exports, "HOROVOD_GLOO_RENDEZVOUS_PORT", "%d",
                                hvd__kv_server_port(server));
    /* under mpirun the ranks' collectives are still hvd's own; NCCL's interfaces go on
     * mpirun's command line */
    if (st == HVD_OK && !mpi)
        st = hvd__env_list_set(&exports, "HOROVOD_CONTROLLER", "gloo");
    if (st == HVD_OK && !mpi)
        st = hvd__env_list_set(&exports, "HOROVOD_CPU_OPERATIONS", "gloo");
    if (st == HVD_OK)
        st = hvd__env_list_set(&exports, "HOROVOD_GLOO_IFACE", iface);
    if (st == HVD_OK && !mpi)
        st = hvd__env_list_set(&exports, "NCCL_SOCKET_IFNAME", nics);
    if (st == HVD_OK && mpi) {
        st = launch_mpi(s, hosts, impl, &exports, &secret, nics, &code);
    } else if (st == HVD_OK && s->elastic) {
        st = launch_elastic(s, hosts, &jh, &exports, &secret, server, &ssh, exe, cwd, &code);
    } else if (st == HVD_OK) {
        hvd_launch_config_t lc = {.plan = plan,
                                  .command = s->command,
                                  .exports = &exports,
                                  .secret = &secret,
                                  .output_dir = s->output_dir,
                                  .prefix_timestamp = s->prefix_timestamp,
                                  .verbose = s->verbose,
                                  .kill_grace_ms = KILL_GRACE_MS,
                                  .remote = jh.nremote ? jh.slot_remote : NULL,
                                  .ready = ready,
                                  .nready = nready,
                                  .ssh = &ssh,
                                  .remote_exe = exe,
                                  .cwd = cwd,
                                  .out_fd = STDOUT_FILENO,
                                  .err_fd = STDERR_FILENO,
                                  .server = server,
                                  .stopped_timeout_s = job_timeout_s(s, &exports)};
        fflush(stdout);
        st = hvd__launch_run(&lc, &code);
    }
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun: %s\n", hvd_last_error());
        code = EXIT_LAUNCH;
    }
    hvd__ready_sessions_end(ready, nready);
    hvd__env_list_fini(&exports);
    hvd__kv_server_stop(server);
    hvd__secret_wipe(&secret);
    job_hosts_fini(&jh);
    return code;
}

int main(int argc, char **argv) {
    /* horovodrun on a remote host, started over ssh by the launcher */
    if (argc == 2 && strcmp(argv[1], HVD_EXEC_OPTION) == 0)
        return hvd__remote_exec_main();
    /* the NIC discovery task on a host of the job, started by the launcher */
    if (argc == 2 && strcmp(argv[1], HVD_TASK_OPTION) == 0)
        return hvd__task_service_main();
    /* Signals that the launch loop reads through a signalfd must be blocked in every thread,
     * so before the rendezvous server starts any. */
    sigset_t mask;
    hvd__spawn_launcher_signals(&mask);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);

    hvd_params_t env;
    if (hvd__params_load(&env, NULL, NULL) != HVD_OK)
        return usage_error();
    hvd__log_configure(env.log_level, env.log_hide_time, -1);
    hvd_settings_t s;
    if (hvd__settings_parse(argc, argv, &env, &s) != HVD_OK) {
        hvd__params_fini(&env);
        return usage_error();
    }
    hvd__params_fini(&env);
    hvd__log_configure(s.log_level, s.log_hide_time, -1);

    int code = 0;
    if (s.show_help) {
        hvd__help_print_usage(stdout);
    } else if (s.show_version) {
        hvd__help_print_version(stdout);
    } else if (s.show_check_build) {
        hvd__help_print_check_build(stdout);
    } else if (s.show_help_env) {
        hvd__help_print_env(stdout);
    } else if (check_supported(&s) != HVD_OK) {
        code = usage_error();
    } else {
        hvd_host_list_t hosts = {0};
        hvd_slot_plan_t plan = {0};
        int from_slurm = 0;
        if (s.elastic) {
            /* the hosts known now choose the network; the driver follows them afterwards */
            if (initial_elastic_hosts(&s, &hosts, &from_slurm) != HVD_OK) {
                fprintf(stderr, "horovodrun: %s\n", hvd_last_error());
                code = EXIT_LAUNCH;
            } else {
                long long total = 0;
                for (size_t i = 0; i < hosts.count; i++)
                    total += hosts.hosts[i].slots;
                if (total > 0 &&
                    hvd__slot_plan_create(&hosts, (int)(total > 1 << 20 ? 1 << 20 : total),
                                          &plan) != HVD_OK)
                    code = usage_error();
                else
                    code = run_job(&s, &hosts, &plan, from_slurm);
            }
        } else if (load_hosts(&s, &hosts, &from_slurm) != HVD_OK ||
                   hvd__slot_plan_create(&hosts, check_np(&s, &hosts), &plan) != HVD_OK) {
            code = usage_error();
        } else if (s.check_network) {
            code = check_network(&s, &plan, from_slurm);
        } else if (s.dry_run) {
            for (size_t i = 0; i < plan.count; i++) {
                char line[512];
                hvd__slot_format(&plan.slots[i], line, sizeof line);
                printf("%s\n", line);
            }
        } else {
            code = run_job(&s, &hosts, &plan, from_slurm);
        }
        hvd__slot_plan_fini(&plan);
        hvd__hosts_fini(&hosts);
    }
    hvd__settings_fini(&s);
    return code;
}
