/* The --network-interface(s) filter of NIC discovery: interface names ("eth0") and/or IPv4
 * networks in CIDR form ("10.77.0.0/24").
 *
 * Matching NICs by name across hosts is fragile (a complaint of Horovod's users: hosts whose
 * NICs are named differently never find a common one), so a filter may name networks instead.
 * Every address a host advertises gets a key: the text of the first CIDR of the filter that holds
 * it, else its interface name. The ring probe compares keys, and the common set is the
 * intersection of keys, so "10.77.0.0/24" is common to hosts that reach each other on that
 * network whatever their NICs are called. Without a filter every address is kept and keyed by
 * its interface name, as in the reference. */
#ifndef HVD_RUNNER_NIC_FILTER_H
#define HVD_RUNNER_NIC_FILTER_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

#define HVD_NIC_FILTER_MAX 64 /* as many as --network-interfaces accepts */
#define HVD_NIC_NAME_MAX 16   /* IFNAMSIZ: 15 characters and the NUL */
#define HVD_NIC_KEY_MAX 20    /* "255.255.255.255/32" and the NUL; also holds a name */

typedef struct {
    uint32_t net, mask; /* host byte order */
    char text[HVD_NIC_KEY_MAX];
} hvd_cidr_t;

typedef struct {
    char names[HVD_NIC_FILTER_MAX][HVD_NIC_NAME_MAX];
    size_t name_count;
    hvd_cidr_t cidrs[HVD_NIC_FILTER_MAX];
    size_t cidr_count;
} hvd_nic_filter_t;

/* Parse n items (each a name or a CIDR; n == 0: no filter). Errors are HVD_ERR_INVALID_ARG
 * naming the item and what is wrong: a malformed address or prefix, host bits set ("did you
 * mean 10.77.0.0/24?"), a bare address, a name longer than 15 characters, more than
 * HVD_NIC_FILTER_MAX items. Pure; *f_p is written only on success. */
hvd_status_t hvd__nic_filter_parse(const char *const *items, size_t n, hvd_nic_filter_t *f_p);

/* 1 when the filter lets everything through. */
int hvd__nic_filter_is_empty(const hvd_nic_filter_t *f);

/* The key of address addr (dotted IPv4) on interface iface: the text of the first CIDR
 * holding addr, else iface when the filter is empty or names iface; NULL when filtered out. */
const char *hvd__nic_filter_key(const hvd_nic_filter_t *f, const char *iface, const char *addr);

/* The filter's CIDR with text key, or NULL (key is an interface name). */
const hvd_cidr_t *hvd__nic_filter_cidr(const hvd_nic_filter_t *f, const char *key);

/* 1 when dotted IPv4 addr lies in c. */
int hvd__cidr_contains(const hvd_cidr_t *c, const char *addr);

/* The filter as given, comma-separated, for messages ("(none)" when empty). */
void hvd__nic_filter_format(const hvd_nic_filter_t *f, char *out, size_t out_size);

#endif
