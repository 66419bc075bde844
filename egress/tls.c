/*
 * TLS for upstream connections: BoringSSL driven through memory BIOs, so
 * that libuv owns the socket and this file only turns ciphertext into
 * plaintext and back. Certificates are verified against the system bundle
 * plus any --ca-file, and the name (or IP address) the fetch asked for.
 */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egress_int.h"

struct tls {
  SSL *ssl;
  BIO *in;   /* ciphertext from the network, read by BoringSSL */
  BIO *out;  /* ciphertext BoringSSL wrote, for the network */
  char host[256];
  char error[640];
};

/* Where distributions keep their CA bundle. */
static const char *const system_bundles[] = {
    "/etc/ssl/certs/ca-certificates.crt", /* Debian, Ubuntu, Alpine */
    "/etc/pki/tls/certs/ca-bundle.crt",   /* Fedora, RHEL */
    "/etc/ssl/ca-bundle.pem",             /* openSUSE */
    "/etc/ssl/cert.pem",
};

static void last_error(char *buf, size_t len) {
  unsigned long e = ERR_get_error();
  if (e == 0) {
    snprintf(buf, len, "unknown error");
    return;
  }
  ERR_error_string_n(e, buf, len);
  ERR_clear_error();
}

SSL_CTX *tls_ctx_new(const egress_config *cfg, char **err) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_method());
  if (ctx == NULL) {
    *err = xstrdup("TLS: cannot create a context");
    return NULL;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  const char *env = getenv("SSL_CERT_FILE");
  int loaded = 0;
  if (env && *env && SSL_CTX_load_verify_locations(ctx, env, NULL) == 1) loaded = 1;
  for (size_t i = 0; !loaded && i < ARRAY_SIZE(system_bundles); i++) {
    if (access(system_bundles[i], R_OK) != 0) continue;
    if (SSL_CTX_load_verify_locations(ctx, system_bundles[i], NULL) == 1) loaded = 1;
  }
  ERR_clear_error();
  if (!loaded) log_warn("no system CA bundle found: only --ca-file certificates are trusted");
  for (size_t i = 0; i < cfg->n_ca_files; i++) {
    if (SSL_CTX_load_verify_locations(ctx, cfg->ca_files[i], NULL) != 1) {
      char why[256];
      last_error(why, sizeof why);
      *err = xasprintf("--ca-file %s: cannot load certificates: %s", cfg->ca_files[i], why);
      SSL_CTX_free(ctx);
      return NULL;
    }
  }
  return ctx;
}

void tls_ctx_free(SSL_CTX *ctx) { SSL_CTX_free(ctx); }

tls *tls_new(SSL_CTX *ctx, const char *host, int ip) {
  tls *t = xcalloc(1, sizeof *t);
  snprintf(t->host, sizeof t->host, "%s", host);
  t->ssl = SSL_new(ctx);
  t->in = BIO_new(BIO_s_mem());
  t->out = BIO_new(BIO_s_mem());
  if (t->ssl == NULL || t->in == NULL || t->out == NULL) abort(); /* only on OOM */
  /* An empty input BIO means "more to come", not end of stream. */
  BIO_set_mem_eof_return(t->in, -1);
  SSL_set_bio(t->ssl, t->in, t->out);
  SSL_set_connect_state(t->ssl);
  static const uint8_t alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_set_alpn_protos(t->ssl, alpn, sizeof alpn);
  if (ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), host);
  } else {
    SSL_set_tlsext_host_name(t->ssl, host);
    SSL_set1_host(t->ssl, host);
  }
  return t;
}

void tls_free(tls *t) {
  if (t == NULL) return;
  SSL_free(t->ssl); /* frees both BIOs */
  free(t);
}

const char *tls_error(tls *t) { return t->error; }

/* Names the failure the way an operator can act on it. */
static void describe_failure(tls *t) {
  long verify = SSL_get_verify_result(t->ssl);
  if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
    snprintf(t->error, sizeof t->error, "TLS certificate is not valid for %s", t->host);
  } else if (verify != X509_V_OK) {
    snprintf(t->error, sizeof t->error, "TLS certificate of %s is not trusted: %s", t->host,
             X509_verify_cert_error_string(verify));
  } else {
    char why[256];
    last_error(why, sizeof why);
    snprintf(t->error, sizeof t->error, "TLS handshake with %s failed: %s", t->host, why);
  }
  ERR_clear_error();
}

int tls_handshake(tls *t) {
  int rc = SSL_do_handshake(t->ssl);
  if (rc == 1) return 1;
  int e = SSL_get_error(t->ssl, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  describe_failure(t);
  return -1;
}

void tls_feed(tls *t, const void *data, size_t len) {
  /* Memory BIOs grow as needed; a write only fails on OOM. */
  if (BIO_write(t->in, data, (int)len) != (int)len) abort();
}

int tls_read(tls *t, void *buf, size_t cap) {
  int n = SSL_read(t->ssl, buf, cap > 1u << 30 ? 1 << 30 : (int)cap);
  if (n > 0) return n;
  int e = SSL_get_error(t->ssl, n);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  if (e == SSL_ERROR_ZERO_RETURN) return -2;
  char why[256];
  last_error(why, sizeof why);
  snprintf(t->error, sizeof t->error, "TLS error from %s: %s", t->host, why);
  return -1;
}

int tls_write(tls *t, const void *data, size_t len) {
  if (len == 0) return 0;
  int n = SSL_write(t->ssl, data, (int)len);
  if (n == (int)len) return 0;
  char why[256];
  last_error(why, sizeof why);
  snprintf(t->error, sizeof t->error, "TLS error towards %s: %s", t->host, why);
  return -1;
}

uint8_t *tls_take_output(tls *t, size_t *len) {
  size_t n = BIO_pending(t->out);
  *len = 0;
  if (n == 0) return NULL;
  uint8_t *buf = xmalloc(n);
  int got = BIO_read(t->out, buf, (int)n);
  if (got <= 0) {
    free(buf);
    return NULL;
  }
  *len = (size_t)got;
  return buf;
}
