/*
 * egress: the edgenode-egress process, the only process of a node that talks
 * to the outside world and the only one that holds tenants' secrets. Worker
 * processes hand it their tenants' fetch() calls over proto/; it checks each
 * against the tenant's allow-list, injects credentials, refuses addresses a
 * tenant must never reach (SSRF), and streams the response back.
 *
 * This header is the module's testable core, shared with the supervisor
 * (which validates rules at deploy time with the same code): URLs, the
 * per-worker policy and its matching, header templates, and the address
 * checks. None of it does I/O or needs BoringSSL. The process itself
 * (egress_int.h) is internal to the folder.
 */
#ifndef EDGENODE_EGRESS_H
#define EDGENODE_EGRESS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Process-wide defaults; a rule may override the first three. */
#define EGRESS_DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define EGRESS_DEFAULT_TIMEOUT_MS 30000u
#define EGRESS_DEFAULT_MAX_RESPONSE_BYTES (32u * 1024u * 1024u)
#define EGRESS_DEFAULT_SUB_REQUESTS 50
#define EGRESS_MAX_CONCURRENT_PER_REQUEST 6
#define EGRESS_MAX_REDIRECTS 20
#define EGRESS_MAX_RULES 256
#define EGRESS_SECRET_NAME_MAX 64
#define EGRESS_SECRET_VALUE_MAX 8192

/* ---- URLs ------------------------------------------------------------------------
 *
 * Only absolute http and https URLs without credentials. The host is kept
 * lowercase without a trailing dot; IPv6 literals without their brackets.
 * The target (path and query, fragment dropped) has its "." and ".."
 * segments removed, percent-encoded forms included, and stays otherwise as
 * written (still percent-encoded): policies match on that form.
 */
typedef struct egress_url {
  int https;          /* 1 for https, 0 for http */
  char host[256];
  int ip;             /* 4 or 6 when host is an IP literal, else 0 */
  int port;           /* explicit, or 80 / 443 */
  int default_port;   /* port is the scheme's default */
  char *target;       /* "/v1/items?id=3"; owned */
  size_t path_len;    /* bytes of target before '?' */
} egress_url;

/*
 * Parses an absolute URL. Returns 0, or -1 with *err pointing at a constant
 * message ("unsupported URL scheme ...", "URL has credentials", ...).
 */
int egress_url_parse(const char *s, size_t len, egress_url *out, const char **err);

/* Resolves a Location header value against `base` (absolute or relative). */
int egress_url_resolve(const egress_url *base, const char *ref, size_t len, egress_url *out,
                       const char **err);

void egress_url_free(egress_url *u);

/* "https://api.example.com:8443" (port only when not the default); heap string. */
char *egress_url_origin(const egress_url *u);

/* The origin and target: the URL as sent upstream; heap string. */
char *egress_url_string(const egress_url *u);

/* The Host header value: host (bracketed for IPv6), with the port when not default. */
char *egress_url_host_header(const egress_url *u);

/* ---- addresses (SSRF defence) -------------------------------------------------- */

typedef struct egress_cidr {
  int family;          /* AF_INET or AF_INET6 */
  uint8_t addr[16];    /* network byte order; IPv4 in the first 4 bytes */
  int prefix;          /* 0..32 or 0..128 */
} egress_cidr;

/* "127.0.0.1/32", "10.0.0.0/8", "::1/128", or a bare address (a host route).
 * Host bits below the prefix must be zero. Returns 0 or -1. */
int egress_cidr_parse(const char *s, egress_cidr *out);

/* Whether sa (AF_INET or AF_INET6; IPv4-mapped IPv6 counts as its IPv4
 * address) lies in c. */
int egress_cidr_contains(const egress_cidr *c, const struct sockaddr *sa);

/*
 * Why an address must not be reached, or NULL when it is a public unicast
 * address: "loopback", "private", "link-local", "CGNAT", "multicast",
 * "unspecified", "reserved". IPv4 embedded in IPv6 (mapped, compatible,
 * NAT64, 6to4) is judged as IPv4.
 */
const char *egress_addr_refusal(const struct sockaddr *sa);

/* As egress_addr_refusal, but NULL also when one of the allowed CIDRs holds sa. */
const char *egress_addr_check(const struct sockaddr *sa, const egress_cidr *allow,
                              size_t n_allow);

/* ---- policy ------------------------------------------------------------------------
 *
 * A worker's policy is a list of rules (JSON, as deployed):
 *   {"match": "https://api.example.com/v1/...", "methods": ["GET", "POST"],
 *    "inject": {"headers": {"Authorization": "Bearer ${secret:EXAMPLE_TOKEN}"}},
 *    "timeout_ms": 30000, "connect_timeout_ms": 10000, "max_response_bytes": 1048576}
 * Only "match" is required. A request is allowed by the first rule that
 * matches its scheme, host, port, path and method; nothing else is allowed.
 */
typedef struct egress_inject {
  char *name;          /* header name as written */
  char *value;         /* template: text with ${secret:NAME} references */
} egress_inject;

typedef struct egress_rule {
  char *match;         /* as written, for logs and listings */
  int https;
  char *host;          /* exact host, or for "*.example.com" the suffix ".example.com" */
  int wildcard;        /* host is a suffix that needs at least one label before it */
  int port;            /* exact port, or -1 for any (":*") */
  char *path;          /* a segment prefix, or a glob when it has '*' */
  int glob;
  char **methods;      /* uppercase; NULL = every method */
  size_t n_methods;
  egress_inject *inject;
  size_t n_inject;
  uint32_t connect_timeout_ms;  /* 0 = the process default */
  uint32_t timeout_ms;
  uint64_t max_response_bytes;
} egress_rule;

typedef struct egress_policy {
  egress_rule *rules;
  size_t n_rules;
} egress_policy;

/*
 * Checks and compiles a JSON array of rules. Returns the policy, or NULL with
 * *err a heap string naming the rule and the problem
 * ("egress[1].match: the host must be ..."), which the caller frees.
 */
egress_policy *egress_policy_parse(json_t *rules, char **err);
void egress_policy_free(egress_policy *p);

typedef enum egress_verdict {
  EGRESS_ALLOW = 0,
  EGRESS_DENY_HOST,    /* no rule names this scheme, host and port */
  EGRESS_DENY_PATH,    /* the origin is named, the path is not */
  EGRESS_DENY_METHOD,  /* origin and path are named, the method is not */
} egress_verdict;

/*
 * The first rule allowing `method` on `u`, or NULL with *verdict saying how
 * close the closest rule came (for a useful refusal). p may be NULL (deny).
 */
const egress_rule *egress_policy_match(const egress_policy *p, const egress_url *u,
                                       const char *method, egress_verdict *verdict);

/* ---- secrets and templates ------------------------------------------------------- */

/* Secret names: [A-Za-z_][A-Za-z0-9_]{0,63}. */
int egress_secret_name_valid(const char *name, size_t len);

/* Values go into header values: no control characters but tab, at most
 * EGRESS_SECRET_VALUE_MAX bytes. */
int egress_secret_value_valid(const char *value, size_t len);

/* Returns the value of secret `name` (not NUL-terminated name), or NULL. */
typedef const char *(*egress_secret_lookup)(void *data, const char *name, size_t len);

/*
 * Expands every ${secret:NAME} in tmpl. Returns a heap string, or NULL with
 * *missing set to a heap copy of the first name that has no value.
 */
char *egress_template_expand(const char *tmpl, egress_secret_lookup lookup, void *data,
                             char **missing);

/* Checks a template's syntax; NULL or a constant message. */
const char *egress_template_problem(const char *tmpl);

/* ---- grants ------------------------------------------------------------------------
 *
 * A secret is injected only into the fetches of the workers it is granted
 * to. granted() answers whether `secret` (not NUL-terminated, len bytes) is
 * granted to `worker`: 1 yes, 0 no.
 */
typedef int (*egress_granted_fn)(void *data, const char *secret, size_t len, const char *worker);

/*
 * Checks every ${secret:NAME} the policy's injections name against the
 * grants. Returns NULL when each is granted to `worker` (p may be NULL), or
 * a heap string "secret NAME is not granted to worker W" for the first that
 * is not.
 */
char *egress_policy_ungranted(const egress_policy *p, const char *worker,
                              egress_granted_fn granted, void *data);

#endif
