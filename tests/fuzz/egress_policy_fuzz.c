/*
 * libFuzzer target for egress policies (egress/policy.c): rules as deployed
 * in a spec's "egress" array, and requests matched against them.
 *
 * Input layout: a JSON text up to the first NUL byte (the rules), then
 * optionally a method, a space and a URL to match. Checked: a rule that
 * allows a request really names its scheme, port, host and method; a rule's
 * own "match" (when it is a plain URL) allows that URL, so url.c and
 * policy.c agree on what a rule means; every template in an accepted rule
 * expands.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress.h"

/* Says which check failed: the crash input alone does not. */
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "egress_policy_fuzz:%d: check failed: %s\n", __LINE__, #cond); \
      abort();                                                                   \
    }                                                                            \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *any_secret(void *data, const char *name, size_t len) {
  (void)data;
  (void)name;
  (void)len;
  return "s3cr3t";
}

static void check_allowed(const egress_rule *r, const egress_url *u, const char *method) {
  CHECK(r->https == u->https);
  CHECK(r->port == -1 || r->port == u->port);
  if (r->wildcard) {
    size_t hl = strlen(u->host), sl = strlen(r->host);
    CHECK(!u->ip && hl > sl && strcmp(u->host + hl - sl, r->host) == 0);
  } else {
    CHECK(strcmp(r->host, u->host) == 0);
  }
  if (r->methods) {
    int found = 0;
    for (size_t i = 0; i < r->n_methods; i++) found |= strcasecmp(r->methods[i], method) == 0;
    CHECK(found);
  }
}

static void match_one(const egress_policy *p, const egress_url *u, const char *method) {
  egress_verdict v = EGRESS_ALLOW;
  const egress_rule *r = egress_policy_match(p, u, method, &v);
  if (r != NULL) {
    CHECK(v == EGRESS_ALLOW);
    CHECK(r >= p->rules && r < p->rules + p->n_rules);
    check_allowed(r, u, method);
  } else {
    CHECK(v == EGRESS_DENY_HOST || v == EGRESS_DENY_PATH || v == EGRESS_DENY_METHOD);
  }
}

/* A rule written as a plain URL (no '*', no escapes) allows that URL. */
static void check_rule_allows_itself(const egress_policy *p, const egress_rule *r) {
  if (strchr(r->match, '*') || strchr(r->match, '%')) return;
  egress_url u;
  const char *err;
  if (egress_url_parse(r->match, strlen(r->match), &u, &err) != 0) return;
  const char *method = r->methods ? r->methods[0] : "GET";
  egress_verdict v;
  const egress_rule *got = egress_policy_match(p, &u, method, &v);
  CHECK(got != NULL);
  check_allowed(got, &u, method);
  egress_url_free(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  const char *nul = memchr(s, '\0', size);
  size_t json_len = nul ? (size_t)(nul - s) : size;

  json_error_t jerr;
  json_t *rules = json_loadb(s, json_len, JSON_DECODE_ANY, &jerr);
  if (rules == NULL) return 0;
  char *err = NULL;
  egress_policy *p = egress_policy_parse(rules, &err);
  json_decref(rules);
  if (p == NULL) {
    CHECK(err != NULL && strncmp(err, "egress", 6) == 0);
    free(err);
    return 0;
  }
  CHECK(err == NULL && p->n_rules <= EGRESS_MAX_RULES);
  for (size_t i = 0; i < p->n_rules; i++) {
    const egress_rule *r = &p->rules[i];
    CHECK(r->match && r->host && r->path && r->path[0] == '/');
    for (size_t j = 0; j < r->n_inject; j++) {
      char *missing = NULL;
      char *v = egress_template_expand(r->inject[j].value, any_secret, NULL, &missing);
      CHECK(v != NULL && missing == NULL);
      free(v);
    }
    check_rule_allows_itself(p, r);
  }

  if (nul != NULL) {
    const char *req = nul + 1;
    size_t req_len = size - json_len - 1;
    const char *sp = memchr(req, ' ', req_len);
    if (sp != NULL && sp > req && (size_t)(sp - req) < 64) {
      char method[64];
      memcpy(method, req, (size_t)(sp - req));
      method[sp - req] = '\0';
      egress_url u;
      const char *uerr;
      if (strlen(method) == (size_t)(sp - req) &&
          egress_url_parse(sp + 1, req_len - (size_t)(sp - req) - 1, &u, &uerr) == 0) {
        match_one(p, &u, method);
        egress_url_free(&u);
      }
    }
  }
  egress_policy_free(p);
  return 0;
}
