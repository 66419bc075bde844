/*
 * The secret store: tenants' credentials, held only by this process.
 *
 * On disk (DATA/egress/): secrets.key, 32 random bytes, mode 0600, created
 * on first start; secrets.json, every value sealed with AES-256-GCM under
 * that key, a fresh 96-bit nonce per value and the secret's name as
 * associated data (so a sealed value cannot be moved to another name):
 *   {"format": 1, "secrets": {"NAME": {"nonce": hex, "sealed": hex,
 *                                      "updated_at": ms}}}
 * The file is replaced atomically (write, fsync, rename, fsync the
 * directory), so a crash leaves the old or the new set. In memory the
 * values are kept open, because every allowed request may need one.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/aead.h>
#include <openssl/mem.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egress_int.h"

#define KEY_BYTES 32
#define NONCE_BYTES 12
#define AD_PREFIX "edgenode-secret:"

typedef struct secret {
  char *name;
  char *value;   /* NUL-terminated; wiped before free */
  size_t len;
  int64_t updated_at;
} secret;

struct secret_store {
  char *dir;
  char *path;    /* secrets.json */
  uint8_t key[KEY_BYTES];
  secret *items; /* sorted by name */
  size_t n, cap;
};

static void secret_wipe(secret *s) {
  OPENSSL_cleanse(s->value, s->len);
  free(s->value);
  free(s->name);
}

void secrets_close(secret_store *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->n; i++) secret_wipe(&s->items[i]);
  free(s->items);
  OPENSSL_cleanse(s->key, sizeof s->key);
  free(s->dir);
  free(s->path);
  free(s);
}

/* ---- files ---- */

static int write_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int secrets_read_file(const char *path, uint8_t **out, size_t *len, size_t max) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t cap = 4096, n = 0;
  uint8_t *buf = xmalloc(cap);
  for (;;) {
    if (n == cap) {
      if (cap >= max) {
        free(buf);
        close(fd);
        return -EFBIG;
      }
      cap *= 2;
      buf = xrealloc(buf, cap);
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int rc = -errno;
      free(buf);
      close(fd);
      return rc;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  *out = buf;
  *len = n;
  return 0;
}

static int load_key(secret_store *s, char **err) {
  char *path = xasprintf("%s/secrets.key", s->dir);
  int rc = 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    if (RAND_bytes(s->key, sizeof s->key) != 1 || write_all(fd, s->key, sizeof s->key) != 0 ||
        fsync(fd) != 0) {
      *err = xasprintf("%s: cannot write the key: %s", path, strerror(errno));
      rc = -1;
    }
    close(fd);
    if (rc != 0) unlink(path);
    free(path);
    return rc;
  }
  if (errno != EEXIST) {
    *err = xasprintf("%s: %s", path, strerror(errno));
    free(path);
    return -1;
  }
  struct stat st;
  uint8_t *data = NULL;
  size_t len = 0;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
    *err = xasprintf("%s: not a regular file", path);
    rc = -1;
  } else if (st.st_mode & 077) {
    *err = xasprintf("%s: must be readable by its owner only (mode 0600)", path);
    rc = -1;
  } else if (secrets_read_file(path, &data, &len, 4096) != 0 || len != KEY_BYTES) {
    *err = xasprintf("%s: must hold exactly %d bytes", path, KEY_BYTES);
    rc = -1;
  } else {
    memcpy(s->key, data, KEY_BYTES);
  }
  if (data) OPENSSL_cleanse(data, len);
  free(data);
  free(path);
  return rc;
}

char *secrets_hex(const uint8_t *p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  char *out = xmalloc(n * 2 + 1);
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  out[2 * n] = '\0';
  return out;
}

int secrets_unhex(const char *s, uint8_t **out, size_t *n) {
  size_t len = s ? strlen(s) : 1;
  if (len % 2) return -1;
  uint8_t *buf = xmalloc(len / 2 + 1);
  for (size_t i = 0; i < len / 2; i++) {
    int v = 0;
    for (int j = 0; j < 2; j++) {
      char c = s[2 * i + j];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) {
        free(buf);
        return -1;
      }
      v = v * 16 + d;
    }
    buf[i] = (uint8_t)v;
  }
  *out = buf;
  *n = len / 2;
  return 0;
}

/* ---- sealing ---- */

json_t *secrets_aead_seal(const EVP_AEAD *aead, const uint8_t *key, size_t key_len,
                          size_t nonce_len, const char *ad, const char *value, size_t len) {
  EVP_AEAD_CTX ctx;
  if (!EVP_AEAD_CTX_init(&ctx, aead, key, key_len, EVP_AEAD_DEFAULT_TAG_LENGTH, NULL))
    return NULL;
  uint8_t nonce[EVP_AEAD_MAX_NONCE_LENGTH];
  size_t cap = len + EVP_AEAD_max_overhead(aead);
  uint8_t *out = xmalloc(cap);
  size_t out_len = 0;
  json_t *j = NULL;
  if (nonce_len <= sizeof nonce && RAND_bytes(nonce, nonce_len) == 1 &&
      EVP_AEAD_CTX_seal(&ctx, out, &out_len, cap, nonce, nonce_len, (const uint8_t *)value, len,
                        (const uint8_t *)ad, strlen(ad))) {
    char *n = secrets_hex(nonce, nonce_len), *c = secrets_hex(out, out_len);
    j = json_pack("{s:s, s:s}", "nonce", n, "sealed", c);
    free(n);
    free(c);
  }
  EVP_AEAD_CTX_cleanup(&ctx);
  free(out);
  return j;
}

int secrets_aead_open(const EVP_AEAD *aead, const uint8_t *key, size_t key_len, size_t nonce_len,
                      const char *ad, json_t *j, char **value, size_t *len) {
  uint8_t *nonce = NULL, *sealed = NULL;
  size_t got_nonce = 0, sealed_len = 0;
  if (secrets_unhex(json_string_value(json_object_get(j, "nonce")), &nonce, &got_nonce) != 0 ||
      got_nonce != nonce_len ||
      secrets_unhex(json_string_value(json_object_get(j, "sealed")), &sealed, &sealed_len) != 0) {
    free(nonce);
    return -1;
  }
  EVP_AEAD_CTX ctx;
  int rc = -1;
  if (EVP_AEAD_CTX_init(&ctx, aead, key, key_len, EVP_AEAD_DEFAULT_TAG_LENGTH, NULL)) {
    uint8_t *plain = xmalloc(sealed_len + 1);
    size_t plain_len = 0;
    if (EVP_AEAD_CTX_open(&ctx, plain, &plain_len, sealed_len, nonce, nonce_len, sealed,
                          sealed_len, (const uint8_t *)ad, strlen(ad))) {
      plain[plain_len] = '\0';
      *value = (char *)plain;
      *len = plain_len;
      rc = 0;
    } else {
      free(plain);
    }
    EVP_AEAD_CTX_cleanup(&ctx);
  }
  free(nonce);
  free(sealed);
  return rc;
}

static json_t *seal(secret_store *s, const secret *sec) {
  char *ad = xasprintf(AD_PREFIX "%s", sec->name);
  json_t *j = secrets_aead_seal(EVP_aead_aes_256_gcm(), s->key, KEY_BYTES, NONCE_BYTES, ad,
                                sec->value, sec->len);
  free(ad);
  if (j) json_object_set_new(j, "updated_at", json_integer((json_int_t)sec->updated_at));
  return j;
}

static int unseal(secret_store *s, const char *name, json_t *j, secret *out) {
  char *ad = xasprintf(AD_PREFIX "%s", name);
  int rc = secrets_aead_open(EVP_aead_aes_256_gcm(), s->key, KEY_BYTES, NONCE_BYTES, ad, j,
                             &out->value, &out->len);
  free(ad);
  if (rc != 0) return -1;
  out->name = xstrdup(name);
  out->updated_at = json_integer_value(json_object_get(j, "updated_at"));
  return 0;
}

static int cmp_secret(const void *a, const void *b) {
  return strcmp(((const secret *)a)->name, ((const secret *)b)->name);
}

static int load_store(secret_store *s, char **err) {
  uint8_t *data = NULL;
  size_t len = 0;
  int rc = secrets_read_file(s->path, &data, &len, 256u * 1024 * 1024);
  if (rc == -ENOENT) return 0;
  if (rc != 0) {
    *err = xasprintf("%s: %s", s->path, strerror(-rc));
    return -1;
  }
  json_error_t jerr;
  json_t *root = json_loadb((const char *)data, len, 0, &jerr);
  free(data);
  json_t *items = json_object_get(root, "secrets");
  if (!json_is_object(items)) {
    *err = xasprintf("%s: not a secret store", s->path);
    json_decref(root);
    return -1;
  }
  const char *name;
  json_t *v;
  json_object_foreach(items, name, v) {
    secret sec;
    if (unseal(s, name, v, &sec) != 0) {
      *err = xasprintf("%s: secret \"%s\" cannot be opened with %s/secrets.key", s->path, name,
                       s->dir);
      json_decref(root);
      return -1;
    }
    if (s->n == s->cap) {
      s->cap = s->cap ? s->cap * 2 : 16;
      s->items = xrealloc(s->items, s->cap * sizeof *s->items);
    }
    s->items[s->n++] = sec;
  }
  json_decref(root);
  qsort(s->items, s->n, sizeof *s->items, cmp_secret);
  return 0;
}

/* Writes every secret, sealed, and replaces the file atomically. */
static int save_store(secret_store *s, char **err) {
  if (s->path == NULL) return 0; /* a store in memory only */
  json_t *items = json_object();
  for (size_t i = 0; i < s->n; i++) {
    json_t *j = seal(s, &s->items[i]);
    if (j == NULL) {
      json_decref(items);
      *err = xstrdup("cannot seal a secret");
      return -1;
    }
    json_object_set_new(items, s->items[i].name, j);
  }
  json_t *root = json_pack("{s:i, s:o}", "format", 1, "secrets", items);
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
  json_decref(root);
  if (text == NULL) abort();
  char *tmp = xasprintf("%s.tmp", s->path);
  int rc = -1;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0 && write_all(fd, text, strlen(text)) == 0 && fsync(fd) == 0) {
    close(fd);
    fd = -1;
    if (rename(tmp, s->path) == 0) {
      int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
      }
      rc = 0;
    }
  }
  if (rc != 0) {
    *err = xasprintf("%s: %s", s->path, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
  }
  free(tmp);
  free(text);
  return rc;
}

secret_store *secrets_new_in_memory(void) { return xcalloc(1, sizeof(secret_store)); }

int secrets_open(const char *dir, secret_store **out, char **err) {
  secret_store *s = xcalloc(1, sizeof *s);
  s->dir = xstrdup(dir);
  s->path = xasprintf("%s/secrets.json", dir);
  if (load_key(s, err) != 0 || load_store(s, err) != 0) {
    secrets_close(s);
    return -1;
  }
  *out = s;
  return 0;
}

static secret *find(secret_store *s, const char *name, size_t len) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strncmp(s->items[mid].name, name, len);
    if (c == 0 && s->items[mid].name[len] != '\0') c = 1;
    if (c == 0) return &s->items[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

const char *secrets_get(secret_store *s, const char *name, size_t len) {
  secret *sec = find(s, name, len);
  return sec ? sec->value : NULL;
}


int secrets_put(secret_store *s, const char *name, const char *value, size_t len,
                int64_t now_ms, char **err) {
  secret *old = find(s, name, strlen(name));
  secret fresh = {.name = xstrdup(name), .value = xstrndup(value, len), .len = len,
                  .updated_at = now_ms};
  secret saved = {0};
  int created = old == NULL;
  if (old) {
    saved = *old;
    *old = fresh;
  } else {
    if (s->n == s->cap) {
      s->cap = s->cap ? s->cap * 2 : 16;
      s->items = xrealloc(s->items, s->cap * sizeof *s->items);
    }
    s->items[s->n++] = fresh;
    qsort(s->items, s->n, sizeof *s->items, cmp_secret);
  }
  if (save_store(s, err) != 0) {
    /* Keep memory and disk in agreement: undo. */
    secret *cur = find(s, name, strlen(name));
    secret_wipe(cur);
    if (created) {
      size_t i = (size_t)(cur - s->items);
      memmove(cur, cur + 1, (s->n - i - 1) * sizeof *cur);
      s->n--;
    } else {
      *cur = saved;
    }
    return -1;
  }
  if (!created) secret_wipe(&saved);
  return created;
}

int secrets_delete(secret_store *s, const char *name, char **err) {
  secret *cur = find(s, name, strlen(name));
  if (cur == NULL) return -ENOENT;
  secret removed = *cur;
  size_t i = (size_t)(cur - s->items);
  memmove(cur, cur + 1, (s->n - i - 1) * sizeof *cur);
  s->n--;
  if (save_store(s, err) != 0) {
    /* put it back where it was */
    memmove(s->items + i + 1, s->items + i, (s->n - i) * sizeof *s->items);
    s->items[i] = removed;
    s->n++;
    return -1;
  }
  secret_wipe(&removed);
  return 0;
}

json_t *secrets_list(secret_store *s) {
  json_t *list = json_array();
  for (size_t i = 0; i < s->n; i++) {
    json_array_append_new(list, json_pack("{s:s, s:I}", "name", s->items[i].name, "updated_at",
                                          (json_int_t)s->items[i].updated_at));
  }
  return list;
}
