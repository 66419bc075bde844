/*
 * Checking a request's authority (a Host header, or the authority of an
 * absolute-form target) before anything is routed or built from it.
 *
 * RFC 3986 section 3.2 without userinfo, and a little stricter where the URL
 * Standard (which the workers' URL class follows) refuses what RFC 3986
 * allows: "http://" + an accepted authority + a path always parses.
 */
#include <string.h>
#include <unicode/uidna.h>

#include "http.h"

static const char err_empty[] = "it is empty";
static const char err_userinfo[] = "user information (\"@\") is not allowed, only host[:port]";
static const char err_path[] = "a path is not allowed, only host[:port]";
static const char err_space[] = "it holds whitespace or a control character";
static const char err_percent[] = "percent-encoded host names are not served";
static const char err_char[] = "it holds a character not allowed in a host name";
static const char err_ipv6[] = "not a valid IPv6 address in brackets";
static const char err_number[] = "a host name that ends in a number must be an IPv4 address";
static const char err_idna[] = "an internationalized (xn--) label is not valid";
static const char err_port[] = "the port is not a number from 1 to 65535";

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* RFC 3986 reg-name characters, less pct-encoded (refused on its own). */
static int is_name_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c)) return 1;
  return c != '\0' && strchr("-._~!$&'()*+,;=", c) != NULL;
}

/* dec-octet: 0-255 without leading zeros. */
static int dec_octet(const char *s, size_t n) {
  if (n == 0 || n > 3 || (n > 1 && s[0] == '0')) return 0;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!is_digit(s[i])) return 0;
    v = v * 10 + (s[i] - '0');
  }
  return v <= 255;
}

/* RFC 3986 IPv4address: exactly four dec-octets. */
static int ipv4_valid(const char *s, size_t n) {
  size_t start = 0, parts = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && s[i] != '.') continue;
    if (++parts > 4 || !dec_octet(s + start, i - start)) return 0;
    start = i + 1;
  }
  return parts == 4;
}

/* RFC 3986 IPv6address: eight h16 pieces (an IPv4 tail counts two), or
 * fewer around one "::". */
static int ipv6_valid(const char *s, size_t n) {
  size_t i = 0, pieces = 0;
  int compressed = 0;
  if (n >= 2 && s[0] == ':' && s[1] == ':') {
    compressed = 1;
    i = 2;
  } else if (n == 0 || s[0] == ':') {
    return 0;
  }
  while (i < n) {
    size_t start = i;
    while (i < n && is_hex(s[i]) && i - start < 5) i++;
    if (i < n && s[i] == '.') {
      if (!ipv4_valid(s + start, n - start)) return 0;
      pieces += 2;
      break;
    }
    if (i == start || i - start > 4) return 0;
    pieces++;
    if (i == n) break;
    if (s[i++] != ':' || i == n) return 0;
    if (s[i] == ':') {
      if (compressed) return 0;
      compressed = 1;
      i++;
    }
  }
  return compressed ? pieces <= 7 : pieces == 8;
}

/* The URL Standard reads a host whose last label is a number (decimal, or
 * 0x hexadecimal) as an IPv4 address, and fails unless all of it is one. */
static int ends_in_number(const char *s, size_t n) {
  if (n > 0 && s[n - 1] == '.') n--;
  size_t start = n;
  while (start > 0 && s[start - 1] != '.') start--;
  const char *last = s + start;
  size_t len = n - start;
  if (len == 0 || !is_digit(last[0])) return 0;
  size_t i = 0;
  if (len >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) {
    for (i = 2; i < len && is_hex(last[i]); i++) {}
  } else {
    for (i = 0; i < len && is_digit(last[i]); i++) {}
  }
  return i == len;
}

static int has_ace_label(const char *s, size_t n) {
  for (size_t i = 0; i + 4 <= n; i++) {
    if (i > 0 && s[i - 1] != '.') continue;
    if ((s[i] | 0x20) == 'x' && (s[i + 1] | 0x20) == 'n' && s[i + 2] == '-' && s[i + 3] == '-')
      return 1;
  }
  return 0;
}

/* UTS #46 as the URL Standard's "domain to ASCII" applies it, plus CheckBidi
 * over the whole name, which is stricter than the URL class's per-label
 * rule: what passes here, the URL class accepts. */
static int idna_valid(const char *s, size_t n) {
  UErrorCode status = U_ZERO_ERROR;
  UIDNA *uts46 = uidna_openUTS46(UIDNA_CHECK_BIDI | UIDNA_CHECK_CONTEXTJ |
                                     UIDNA_NONTRANSITIONAL_TO_ASCII,
                                 &status);
  if (U_FAILURE(status)) return 0;
  const uint32_t ignored = UIDNA_ERROR_EMPTY_LABEL | UIDNA_ERROR_LABEL_TOO_LONG |
                           UIDNA_ERROR_DOMAIN_NAME_TOO_LONG | UIDNA_ERROR_LEADING_HYPHEN |
                           UIDNA_ERROR_TRAILING_HYPHEN | UIDNA_ERROR_HYPHEN_3_4;
  char out[256];
  UIDNAInfo info = UIDNA_INFO_INITIALIZER;
  int32_t len = n > INT32_MAX ? -1 : (int32_t)n;
  int ok = len >= 0;
  if (ok) {
    uidna_nameToASCII_UTF8(uts46, s, len, out, (int32_t)sizeof out, &info, &status);
    /* A long name only overflows the buffer: its verdict is complete. */
    ok = (U_SUCCESS(status) || status == U_BUFFER_OVERFLOW_ERROR) &&
         (info.errors & ~ignored) == 0;
  }
  uidna_close(uts46);
  return ok;
}

static const char *name_check(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') return err_percent;
    if (!is_name_char(s[i])) return err_char;
  }
  if (ends_in_number(s, n)) return err_number;
  if (has_ace_label(s, n) && !idna_valid(s, n)) return err_idna;
  return NULL;
}

/* Whole-input faults first: they say more than "bad character". */
static const char *shape_check(const char *s, size_t len) {
  if (len == 0) return err_empty;
  if (memchr(s, '@', len)) return err_userinfo;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c <= 0x20 || c == 0x7f) return err_space;
    if (c == '/' || c == '?' || c == '#' || c == '\\') return err_path;
  }
  return NULL;
}

/* port: 1 to 5 digits, 1 to 65535. */
static int port_valid(const char *s, size_t n) {
  if (n == 0 || n > 5) return 0;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!is_digit(s[i])) return 0;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= 65535;
}

const char *http_authority_parse(const char *s, size_t len, http_authority *out) {
  const char *err = shape_check(s, len);
  if (err) return err;
  const char *end = s + len;
  const char *host_end;
  http_host_kind kind;
  if (s[0] == '[') {
    host_end = memchr(s, ']', len);
    if (host_end == NULL || !ipv6_valid(s + 1, (size_t)(host_end - s - 1))) return err_ipv6;
    host_end++;
    kind = HTTP_HOST_IPV6;
    if (host_end < end && *host_end != ':') return err_ipv6;
  } else {
    host_end = memchr(s, ':', len);
    if (host_end == NULL) host_end = end;
    size_t n = (size_t)(host_end - s);
    if (n == 0) return err_empty;
    kind = ipv4_valid(s, n) ? HTTP_HOST_IPV4 : HTTP_HOST_NAME;
    if (kind == HTTP_HOST_NAME && (err = name_check(s, n)) != NULL) return err;
  }
  const char *port = host_end < end ? host_end + 1 : NULL;
  size_t port_len = port ? (size_t)(end - port) : 0;
  if (port && !port_valid(port, port_len)) return err_port;
  out->kind = kind;
  out->host = s;
  out->host_len = (size_t)(host_end - s);
  out->port = port;
  out->port_len = port_len;
  return NULL;
}
