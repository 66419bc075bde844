/*
 * Web Crypto's digests, MACs and key derivation on OpenSSL 3: cryptoDigest
 * (SHA-1/256/384/512, MD5), cryptoHmac, cryptoPbkdf2 and cryptoHkdf.
 */
#include <limits.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>

#include <vector>

#include "internal.h"

namespace iso {
namespace crypto {

/* cryptoDigest(hash, data) -> Uint8Array */
void crypto_digest(const Info &info) {
  const EVP_MD *md;
  bytes data;
  if (!arg_md(info, 0, &md) || !arg_bytes(info, 1, &data))
    return;
  uint8_t out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.p, data.n, out, &len, md, nullptr) != 1) {
    throw_error(info.GetIsolate(), "digest failed");
    return;
  }
  return_bytes(info, out, len);
}

/* cryptoHmac(hash, key, data) -> Uint8Array */
void crypto_hmac(const Info &info) {
  const EVP_MD *md;
  bytes key, data;
  if (!arg_md(info, 0, &md) || !arg_bytes(info, 1, &key) || !arg_bytes(info, 2, &data))
    return;
  if (!fits_int(key)) {
    throw_error(info.GetIsolate(), "key too long");
    return;
  }
  uint8_t out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(md, key.p, (int)key.n, data.p, data.n, out, &len) == nullptr) {
    throw_error(info.GetIsolate(), "HMAC failed");
    return;
  }
  return_bytes(info, out, len);
}

/* cryptoPbkdf2(hash, password, salt, iterations, length) -> Uint8Array */
void crypto_pbkdf2(const Info &info) {
  const EVP_MD *md;
  bytes pass, salt;
  uint32_t iterations, length;
  if (!arg_md(info, 0, &md) || !arg_bytes(info, 1, &pass) || !arg_bytes(info, 2, &salt) ||
      !arg_uint(info, 3, &iterations) || !arg_uint(info, 4, &length))
    return;
  if (!fits_int(pass) || !fits_int(salt) || iterations == 0 || iterations > INT_MAX ||
      length > (1u << 24)) {
    throw_error(info.GetIsolate(), "invalid PBKDF2 parameters");
    return;
  }
  buf out(length ? length : 1);
  if (PKCS5_PBKDF2_HMAC((const char *)pass.p, (int)pass.n, salt.p, (int)salt.n, (int)iterations,
                        md, (int)length, out.data()) != 1) {
    throw_error(info.GetIsolate(), "PBKDF2 failed");
    return;
  }
  return_bytes(info, out.data(), length);
}

/* cryptoHkdf(hash, key, salt, info, length) -> Uint8Array */
void crypto_hkdf(const Info &info) {
  const EVP_MD *md;
  bytes key, salt, inf;
  uint32_t length;
  if (!arg_md(info, 0, &md) || !arg_bytes(info, 1, &key) || !arg_bytes(info, 2, &salt) ||
      !arg_bytes(info, 3, &inf) || !arg_uint(info, 4, &length))
    return;
  v8::Isolate *isolate = info.GetIsolate();
  if (length == 0 || length > 255u * (uint32_t)EVP_MD_get_size(md) || !fits_int(key) ||
      !fits_int(salt) || !fits_int(inf)) {
    throw_error(isolate, "invalid HKDF parameters");
    return;
  }
  /* RFC 5869: an absent salt is HashLen zero bytes, which is also what an
   * empty one gives in HMAC. */
  uint8_t zeros[EVP_MAX_MD_SIZE] = {0};
  if (salt.n == 0)
    salt = {zeros, (size_t)EVP_MD_get_size(md)};
  buf out(length);
  EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  size_t outlen = length;
  bool ok = ctx != nullptr && EVP_PKEY_derive_init(ctx) == 1 &&
            EVP_PKEY_CTX_set_hkdf_md(ctx, md) == 1 &&
            EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt.p, (int)salt.n) == 1 &&
            EVP_PKEY_CTX_set1_hkdf_key(ctx, key.n ? key.p : zeros, (int)key.n) == 1 &&
            EVP_PKEY_CTX_add1_hkdf_info(ctx, inf.p, (int)inf.n) == 1 &&
            EVP_PKEY_derive(ctx, out.data(), &outlen) == 1 && outlen == length;
  EVP_PKEY_CTX_free(ctx);
  if (!ok) {
    throw_error(isolate, "HKDF failed");
    return;
  }
  return_bytes(info, out.data(), length);
}

}  // namespace crypto
}  // namespace iso
