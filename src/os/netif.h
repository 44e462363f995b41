/* Local network interfaces: which IPv4 addresses this host has, and whether a host name
 * given by the user is this host (as in Horovod, a host is local when it resolves to one of
 * this host's addresses; unresolvable names are remote). */
#ifndef HVD_OS_NETIF_H
#define HVD_OS_NETIF_H

#include <hvd/types.h>

#include <stddef.h>

typedef struct {
    char name[32]; /* interface name, e.g. "lo", "eth0" */
    char addr[16]; /* dotted IPv4 address */
} hvd_netif_t;

/* Every IPv4 address of every interface that is up, in the kernel's order. The caller frees
 * *list_p. HVD_ERR_IO if the interfaces cannot be read. */
hvd_status_t hvd__netif_list(hvd_netif_t **list_p, size_t *count_p);

/* 1 when host resolves (IPv4) to one of the addresses in list, else 0. */
int hvd__netif_is_local_host(const char *host, const hvd_netif_t *list, size_t count);

/* The interface holding addr, or NULL. */
const hvd_netif_t *hvd__netif_by_addr(const char *addr, const hvd_netif_t *list, size_t count);

/* The first entry whose address is in network "a.b.c.d/len", or NULL (also for a malformed
 * network). */
const hvd_netif_t *hvd__netif_in_network(const char *cidr, const hvd_netif_t *list, size_t count);

/* The first entry of interface name, or NULL. */
const hvd_netif_t *hvd__netif_by_name(const char *name, const hvd_netif_t *list, size_t count);

#endif
