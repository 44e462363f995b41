/* This host's IPv4 interfaces from getifaddrs, and the lookups the launcher makes in them
 * (netif.h). Every 127.x.x.x address counts as local, configured or not. */
#include "os/netif.h"

#include "common/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

hvd_status_t hvd__netif_list(hvd_netif_t **list_p, size_t *count_p) {
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        return hvd__error_set(HVD_ERR_IO, "cannot list network interfaces: %s", strerror(errno));
    size_t n = 0;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP))
            n++;
    hvd_netif_t *list = calloc(n ? n : 1, sizeof *list);
    if (!list) {
        freeifaddrs(ifa);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory listing interfaces");
    }
    size_t k = 0;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        snprintf(list[k].name, sizeof list[k].name, "%s", i->ifa_name);
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, list[k].addr,
                  sizeof list[k].addr);
        k++;
    }
    freeifaddrs(ifa);
    *list_p = list;
    *count_p = k;
    return HVD_OK;
}

const hvd_netif_t *hvd__netif_by_addr(const char *addr, const hvd_netif_t *list, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (strcmp(list[i].addr, addr) == 0)
            return &list[i];
    return NULL;
}

const hvd_netif_t *hvd__netif_by_name(const char *name, const hvd_netif_t *list, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (strcmp(list[i].name, name) == 0)
            return &list[i];
    return NULL;
}

int hvd__netif_is_local_host(const char *host, const hvd_netif_t *list, size_t count) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    int local = 0;
    for (struct addrinfo *ai = res; ai && !local; ai = ai->ai_next) {
        char addr[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, addr, sizeof addr);
        /* all of 127.0.0.0/8 is this host even when only 127.0.0.1 is configured */
        local = strncmp(addr, "127.", 4) == 0 || hvd__netif_by_addr(addr, list, count) != NULL;
    }
    freeaddrinfo(res);
    return local;
}

const hvd_netif_t *hvd__netif_in_network(const char *cidr, const hvd_netif_t *list, size_t count) {
    char net[16];
    const char *slash = strchr(cidr, '/');
    if (!slash || (size_t)(slash - cidr) >= sizeof net)
        return NULL;
    memcpy(net, cidr, (size_t)(slash - cidr));
    net[slash - cidr] = '\0';
    char *end;
    long len = strtol(slash + 1, &end, 10);
    struct in_addr n, a;
    if (*end || end == slash + 1 || len < 0 || len > 32 || inet_pton(AF_INET, net, &n) != 1)
        return NULL;
    uint32_t mask = len == 0 ? 0 : htonl(~(uint32_t)0 << (32 - len));
    for (size_t i = 0; i < count; i++)
        if (inet_pton(AF_INET, list[i].addr, &a) == 1 && (a.s_addr & mask) == (n.s_addr & mask))
            return &list[i];
    return NULL;
}
