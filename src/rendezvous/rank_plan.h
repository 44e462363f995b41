/* The launcher's slot plan as the ranks read it from the store: hosts in rank order, each with
 * its number of ranks. Ranks are numbered host by host, local ranks 0..n-1 on each host, and
 * a host's cross rank for local rank j is the number of earlier hosts with more than j ranks
 * (the reference's plan, runner/hosts/hosts.c). It takes O(hosts) bytes where the check-in's
 * records take one per rank: with it, a rank of a 16,384-rank job learns everyone's place without
 * downloading everyone's record (core/init.c, "the planned check-in").
 *
 * Text encoding: "HVP1 <hosts> <ranks>\n", then lines "<slots> <hosts>\n", where <hosts> is a
 * host name, or a range of names as Slurm writes them, "prefix[lo-hi]" (node[001-512]: lo
 * written with leading zeros pads every number to its width), for consecutive hosts with the
 * same rank count. A cluster's plan takes a line per run of alike hosts: a few dozen bytes
 * for 2,048 nodes. A host name is 1..HVD_RANK_PLAN_HOST_MAX bytes of printable ASCII other
 * than space and brackets. */
#ifndef HVD_RENDEZVOUS_RANK_PLAN_H
#define HVD_RENDEZVOUS_RANK_PLAN_H

#include <hvd/types.h>

#include <stddef.h>

#define HVD_RANK_PLAN_SCOPE "plan"
#define HVD_RANK_PLAN_STATIC_KEY "static" /* the plan of a static (non-elastic) launch */
#define HVD_RANK_PLAN_HOST_MAX 255
#define HVD_RANK_PLAN_MAX_RANKS (1 << 20)

typedef struct {
    char **hosts; /* count names */
    int *slots;   /* ranks on each host */
    int *first;   /* the first rank of each host */
    size_t count; /* hosts */
    int size;     /* ranks */
} hvd_rank_plan_t;

/* One rank's place in the plan. */
typedef struct {
    size_t host; /* index into hosts */
    int local_rank, local_size, cross_rank, cross_size;
} hvd_rank_place_t;

/* Encode n hosts (names and rank counts, every count >= 1) into a malloc'd text (*len_p bytes,
 * NUL-terminated). HVD_ERR_INVALID_ARG names a host name or count that cannot be encoded. */
hvd_status_t hvd__rank_plan_encode(const char *const *hosts, const int *slots, size_t n,
                                   char **text_p, size_t *len_p);

/* Decode text[0..len) (untrusted: every field is checked, HVD_ERR_PROTOCOL names the first
 * bad line). Release with hvd__rank_plan_fini. */
hvd_status_t hvd__rank_plan_decode(const char *text, size_t len, hvd_rank_plan_t *plan_p);
void hvd__rank_plan_fini(hvd_rank_plan_t *plan);

/* The places of every rank: places[r] for r in 0..size-1 (O(ranks) time and memory). */
hvd_status_t hvd__rank_plan_places(const hvd_rank_plan_t *plan, hvd_rank_place_t *places);

#endif
