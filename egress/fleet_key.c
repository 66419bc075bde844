/*
 * The fleet key: how a secret's value travels between the nodes of a fleet.
 * A value written on one node is sealed here, by that node's egress, and
 * reaches every other node's egress as ciphertext through the supervisors and
 * NATS, neither of which holds the key; each egress opens it here.
 *
 * The key is provisioned by the operator: one file, the same on every node,
 * given as --fleet-key FILE (repeatable: the first seals, every one opens,
 * which is how a key is rotated). A file holds 32 bytes, raw or as 64 hex
 * digits (a trailing newline allowed), and must not be readable by group or
 * others. A key's id is the first 8 bytes of its SHA-256, in hex: a sealed
 * value names the key that opens it, never the key itself.
 *
 * Sealed form: {"key": id, "nonce": 48 hex digits, "sealed": hex} with
 * XChaCha20-Poly1305 (BoringSSL): its 192-bit nonces can be drawn at random
 * by every node of a fleet for any number of writes without a collision to
 * fear, which AES-GCM's 96 bits would bound. The associated data is the
 * secret's name, so a value sealed for one name cannot be replayed as
 * another's.
 */
#include <errno.h>
#include <openssl/aead.h>
#include <openssl/mem.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "egress_int.h"

#define AD_PREFIX "edgenode-fleet-secret:"
#define NONCE_BYTES 24

static int hex_digit(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The key's bytes from a file's contents: 32 raw bytes or 64 hex digits. */
static int key_bytes(const uint8_t *data, size_t len, uint8_t key[FLEET_KEY_BYTES]) {
  if (len == FLEET_KEY_BYTES) {
    memcpy(key, data, FLEET_KEY_BYTES);
    return 0;
  }
  while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r')) len--;
  if (len != 2 * FLEET_KEY_BYTES) return -1;
  for (size_t i = 0; i < FLEET_KEY_BYTES; i++) {
    int hi = hex_digit(data[2 * i]), lo = hex_digit(data[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    key[i] = (uint8_t)(hi * 16 + lo);
  }
  return 0;
}

static int load_one(const char *path, fleet_key *k, char **err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    *err = xasprintf("--fleet-key %s: %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    *err = xasprintf("--fleet-key %s: not a regular file", path);
    return -1;
  }
  if (st.st_mode & 077) {
    *err = xasprintf("--fleet-key %s: must not be readable by group or others (chmod 0600)", path);
    return -1;
  }
  uint8_t *data = NULL;
  size_t len = 0;
  int rc = secrets_read_file(path, &data, &len, 4096);
  if (rc != 0) {
    *err = xasprintf("--fleet-key %s: %s", path, strerror(-rc));
    return -1;
  }
  rc = key_bytes(data, len, k->key);
  OPENSSL_cleanse(data, len);
  free(data);
  if (rc != 0) {
    *err = xasprintf("--fleet-key %s: must hold 32 bytes, raw or as 64 hex digits "
                     "(head -c 32 /dev/urandom > FILE)", path);
    return -1;
  }
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(k->key, FLEET_KEY_BYTES, digest);
  char *id = secrets_hex(digest, 8);
  memcpy(k->id, id, sizeof k->id - 1);
  k->id[sizeof k->id - 1] = '\0';
  free(id);
  return 0;
}

int fleet_keys_load(const char *const *files, size_t n, fleet_key **out, char **err) {
  *out = NULL;
  if (n == 0) return 0;
  fleet_key *keys = xcalloc(n, sizeof *keys);
  for (size_t i = 0; i < n; i++) {
    if (load_one(files[i], &keys[i], err) != 0) {
      fleet_keys_free(keys, n);
      return -1;
    }
  }
  *out = keys;
  return 0;
}

void fleet_keys_free(fleet_key *keys, size_t n) {
  if (keys == NULL) return;
  OPENSSL_cleanse(keys, n * sizeof *keys);
  free(keys);
}

json_t *fleet_key_seal(const fleet_key *k, const char *name, const char *value, size_t len) {
  char *ad = xasprintf(AD_PREFIX "%s", name);
  json_t *j = secrets_aead_seal(EVP_aead_xchacha20_poly1305(), k->key, FLEET_KEY_BYTES,
                                NONCE_BYTES, ad, value, len);
  free(ad);
  if (j) json_object_set_new(j, "key", json_string(k->id));
  return j;
}

static const fleet_key *key_of(const fleet_key *keys, size_t n, const char *id) {
  for (size_t i = 0; id && i < n; i++)
    if (strcmp(keys[i].id, id) == 0) return &keys[i];
  return NULL;
}

int fleet_key_open(const fleet_key *keys, size_t n, const char *name, json_t *sealed,
                   char **value, size_t *len, const char **why) {
  const fleet_key *k = key_of(keys, n, json_string_value(json_object_get(sealed, "key")));
  if (k == NULL) {
    *why = n ? "it was sealed with a fleet key this node does not have (--fleet-key)"
             : "this node has no fleet key (--fleet-key)";
    return -1;
  }
  *why = "it cannot be opened with the fleet key (damaged, or sealed for another name)";
  char *ad = xasprintf(AD_PREFIX "%s", name);
  int rc = secrets_aead_open(EVP_aead_xchacha20_poly1305(), k->key, FLEET_KEY_BYTES, NONCE_BYTES,
                             ad, sealed, value, len);
  free(ad);
  return rc;
}
