/* Parsing and applying the --network-interface(s) filter (nic_filter.h). Networks are held in host
 * byte order with their canonical text as the key; duplicates are dropped, and a network with host
 * bits set is refused with the corrected form suggested. */
#include "runner/discovery/nic_filter.h"

#include "common/error.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

static int parse_ipv4(const char *text, uint32_t *addr_p) {
    struct in_addr a;
    if (inet_pton(AF_INET, text, &a) != 1)
        return -1;
    *addr_p = ntohl(a.s_addr);
    return 0;
}

static hvd_status_t parse_cidr(const char *item, hvd_cidr_t *c) {
    const char *slash = strchr(item, '/');
    char addr[32];
    size_t alen = (size_t)(slash - item);
    if (alen == 0 || alen >= sizeof addr)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "network interface '%s': not an IPv4 network like 10.77.0.0/24",
                              item);
    memcpy(addr, item, alen);
    addr[alen] = '\0';
    uint32_t net;
    if (parse_ipv4(addr, &net) != 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "network interface '%s': '%s' is not an IPv4 address (networks are "
                              "written like 10.77.0.0/24)",
                              item, addr);
    const char *p = slash + 1;
    int prefix = 0;
    if (!*p || strlen(p) > 2)
        prefix = -1;
    for (; prefix >= 0 && *p; p++) {
        if (*p < '0' || *p > '9') {
            prefix = -1;
            break;
        }
        prefix = prefix * 10 + (*p - '0');
    }
    if (prefix < 0 || prefix > 32)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "network interface '%s': the prefix length must be a number from 0 "
                              "to 32",
                              item);
    uint32_t mask = prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
    if (net & ~mask) {
        struct in_addr a = {.s_addr = htonl(net & mask)};
        char fixed[16];
        inet_ntop(AF_INET, &a, fixed, sizeof fixed);
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "network interface '%s': host bits are set; did you mean %s/%d?",
                              item, fixed, prefix);
    }
    c->net = net;
    c->mask = mask;
    struct in_addr a = {.s_addr = htonl(net)};
    char canon[16];
    inet_ntop(AF_INET, &a, canon, sizeof canon);
    snprintf(c->text, sizeof c->text, "%s/%d", canon, prefix);
    return HVD_OK;
}

hvd_status_t hvd__nic_filter_parse(const char *const *items, size_t n, hvd_nic_filter_t *f_p) {
    hvd_nic_filter_t f;
    memset(&f, 0, sizeof f);
    if (n > HVD_NIC_FILTER_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "more than %d network interfaces given",
                              HVD_NIC_FILTER_MAX);
    for (size_t i = 0; i < n; i++) {
        const char *item = items[i];
        uint32_t ignored;
        if (!item || !*item)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "empty network interface name");
        if (strchr(item, '/')) {
            hvd_cidr_t c;
            hvd_status_t st = parse_cidr(item, &c);
            if (st != HVD_OK)
                return st;
            int dup = 0;
            for (size_t k = 0; k < f.cidr_count; k++)
                dup |= strcmp(f.cidrs[k].text, c.text) == 0;
            if (!dup)
                f.cidrs[f.cidr_count++] = c;
            continue;
        }
        if (parse_ipv4(item, &ignored) == 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "network interface '%s' is an address; give an interface name "
                                  "or a network such as %s/32",
                                  item, item);
        if (strlen(item) >= HVD_NIC_NAME_MAX || strpbrk(item, " \t\n:"))
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "network interface '%s' is not a valid interface name (at most "
                                  "%d characters, no spaces or ':')",
                                  item, HVD_NIC_NAME_MAX - 1);
        int dup = 0;
        for (size_t k = 0; k < f.name_count; k++)
            dup |= strcmp(f.names[k], item) == 0;
        if (!dup)
            snprintf(f.names[f.name_count++], HVD_NIC_NAME_MAX, "%s", item);
    }
    *f_p = f;
    return HVD_OK;
}

int hvd__nic_filter_is_empty(const hvd_nic_filter_t *f) {
    return f->name_count == 0 && f->cidr_count == 0;
}

int hvd__cidr_contains(const hvd_cidr_t *c, const char *addr) {
    uint32_t a;
    return parse_ipv4(addr, &a) == 0 && (a & c->mask) == c->net;
}

const char *hvd__nic_filter_key(const hvd_nic_filter_t *f, const char *iface, const char *addr) {
    for (size_t i = 0; i < f->cidr_count; i++)
        if (hvd__cidr_contains(&f->cidrs[i], addr))
            return f->cidrs[i].text;
    if (hvd__nic_filter_is_empty(f))
        return iface;
    for (size_t i = 0; i < f->name_count; i++)
        if (strcmp(f->names[i], iface) == 0)
            return iface;
    return NULL;
}

const hvd_cidr_t *hvd__nic_filter_cidr(const hvd_nic_filter_t *f, const char *key) {
    for (size_t i = 0; i < f->cidr_count; i++)
        if (strcmp(f->cidrs[i].text, key) == 0)
            return &f->cidrs[i];
    return NULL;
}

void hvd__nic_filter_format(const hvd_nic_filter_t *f, char *out, size_t out_size) {
    size_t used = 0;
    if (out_size == 0)
        return;
    out[0] = '\0';
    if (hvd__nic_filter_is_empty(f)) {
        snprintf(out, out_size, "(none)");
        return;
    }
    for (size_t i = 0; i < f->name_count + f->cidr_count && used < out_size; i++) {
        const char *t = i < f->name_count ? f->names[i] : f->cidrs[i - f->name_count].text;
        int w = snprintf(out + used, out_size - used, "%s%s", i ? "," : "", t);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}
