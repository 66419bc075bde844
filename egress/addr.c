/*
 * Address checks: which resolved addresses a tenant's fetch may connect to.
 * A name is resolved by the egress itself and every address it yields is
 * judged here before a connection is attempted, so neither a DNS answer nor
 * an IP literal in any spelling can point a fetch at the node's own network.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "egress.h"

typedef struct range {
  uint8_t net[16];
  int prefix;
  const char *why;
} range;

/* IPv4 ranges, addresses in the first four bytes. */
static const range v4_ranges[] = {
    {{0, 0, 0, 0}, 8, "unspecified"},          /* "this network" */
    {{10, 0, 0, 0}, 8, "private"},
    {{100, 64, 0, 0}, 10, "CGNAT"},
    {{127, 0, 0, 0}, 8, "loopback"},
    {{169, 254, 0, 0}, 16, "link-local"},      /* cloud metadata lives here */
    {{172, 16, 0, 0}, 12, "private"},
    {{192, 0, 0, 0}, 24, "reserved"},          /* IETF protocol assignments */
    {{192, 0, 2, 0}, 24, "reserved"},          /* documentation */
    {{192, 88, 99, 0}, 24, "reserved"},        /* 6to4 relay anycast */
    {{192, 168, 0, 0}, 16, "private"},
    {{198, 18, 0, 0}, 15, "reserved"},         /* benchmarking */
    {{198, 51, 100, 0}, 24, "reserved"},
    {{203, 0, 113, 0}, 24, "reserved"},
    {{224, 0, 0, 0}, 4, "multicast"},
    {{240, 0, 0, 0}, 4, "reserved"},           /* and the broadcast address */
};

static const range v6_ranges[] = {
    {{0}, 128, "unspecified"},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, "loopback"},
    {{0x01, 0x00}, 64, "reserved"},             /* discard prefix */
    {{0x20, 0x01, 0x00, 0x00}, 32, "reserved"}, /* Teredo: hides an IPv4 address */
    {{0x20, 0x01, 0x00, 0x02, 0x00, 0x00}, 48, "reserved"}, /* benchmarking */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, "reserved"}, /* documentation */
    {{0xfc}, 7, "private"},                     /* unique local */
    {{0xfe, 0x80}, 10, "link-local"},
    {{0xfe, 0xc0}, 10, "private"},              /* site-local, deprecated */
    {{0xff}, 8, "multicast"},
};

static int prefix_match(const uint8_t *a, const uint8_t *net, int prefix) {
  int full = prefix / 8, rest = prefix % 8;
  if (memcmp(a, net, (size_t)full) != 0) return 0;
  if (rest == 0) return 1;
  uint8_t mask = (uint8_t)(0xff << (8 - rest));
  return (a[full] & mask) == (net[full] & mask);
}

/*
 * The IPv4 address an IPv6 address stands for, when it embeds one in a way
 * that reaches that IPv4 host: mapped (::ffff:a.b.c.d), compatible
 * (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:AABB:CCDD::).
 */
static int embedded_v4(const uint8_t a[16], uint8_t out[4]) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const uint8_t compat[12] = {0};
  static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b};
  static const uint8_t nat64_local[6] = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}; /* /48 */
  if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0 ||
      (memcmp(a, compat, 12) == 0 && (a[12] | a[13]) != 0)) {
    memcpy(out, a + 12, 4);
    return 1;
  }
  if (memcmp(a, nat64_local, 6) == 0) {
    memcpy(out, a + 12, 4);
    return 1;
  }
  if (a[0] == 0x20 && a[1] == 0x02) {
    memcpy(out, a + 2, 4);
    return 1;
  }
  return 0;
}

static const char *v4_refusal(const uint8_t a[4]) {
  for (size_t i = 0; i < sizeof v4_ranges / sizeof v4_ranges[0]; i++)
    if (prefix_match(a, v4_ranges[i].net, v4_ranges[i].prefix)) return v4_ranges[i].why;
  return NULL;
}

const char *egress_addr_refusal(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    return v4_refusal((const uint8_t *)&in->sin_addr);
  }
  if (sa->sa_family != AF_INET6) return "reserved";
  const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
  uint8_t v4[4];
  if (embedded_v4(a, v4)) return v4_refusal(v4);
  for (size_t i = 0; i < sizeof v6_ranges / sizeof v6_ranges[0]; i++)
    if (prefix_match(a, v6_ranges[i].net, v6_ranges[i].prefix)) return v6_ranges[i].why;
  /* Only global unicast (2000::/3) is routable on the internet. */
  if ((a[0] & 0xe0) != 0x20) return "reserved";
  return NULL;
}

int egress_cidr_contains(const egress_cidr *c, const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    if (c->family != AF_INET) return 0;
    return prefix_match((const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr, c->addr,
                        c->prefix);
  }
  if (sa->sa_family != AF_INET6) return 0;
  const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
  if (c->family == AF_INET6) return prefix_match(a, c->addr, c->prefix);
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(a, mapped, 12) == 0 && prefix_match(a + 12, c->addr, c->prefix);
}

const char *egress_addr_check(const struct sockaddr *sa, const egress_cidr *allow,
                              size_t n_allow) {
  const char *why = egress_addr_refusal(sa);
  if (why == NULL) return NULL;
  for (size_t i = 0; i < n_allow; i++)
    if (egress_cidr_contains(&allow[i], sa)) return NULL;
  return why;
}

int egress_cidr_parse(const char *s, egress_cidr *out) {
  memset(out, 0, sizeof *out);
  char buf[64];
  const char *slash = strchr(s, '/');
  size_t n = slash ? (size_t)(slash - s) : strlen(s);
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  int max;
  if (inet_pton(AF_INET, buf, out->addr) == 1) {
    out->family = AF_INET;
    max = 32;
  } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
    out->family = AF_INET6;
    max = 128;
  } else {
    return -1;
  }
  int prefix = max;
  if (slash) {
    const char *p = slash + 1;
    if (*p == '\0' || (p[0] == '0' && p[1] != '\0')) return -1;
    prefix = 0;
    for (; *p; p++) {
      if (*p < '0' || *p > '9') return -1;
      prefix = prefix * 10 + (*p - '0');
      if (prefix > max) return -1;
    }
  }
  out->prefix = prefix;
  /* Host bits set means the operator meant something else: refuse it. */
  for (int bit = prefix; bit < max; bit++)
    if (out->addr[bit / 8] & (0x80 >> (bit % 8))) return -1;
  return 0;
}
