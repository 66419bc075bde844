/*
 * Web Crypto primitives for runtime/19-subtle.js, on OpenSSL 3's EVP API
 * (the libcrypto libnode already loads). Every function is synchronous and
 * stateless: keys cross as bytes (symmetric keys raw; EC and OKP keys as the
 * private scalar and the public point; RSA keys as PKCS#8 / SPKI DER), and
 * an OpenSSL key object lives only for the call. Failures throw a plain
 * Error; the runtime decides which DOMException the caller sees.
 */
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include <vector>

#include "internal.h"
#include "natives.h"

namespace iso {
namespace {

using Info = v8::FunctionCallbackInfo<v8::Value>;
using buf = std::vector<uint8_t>;

struct bytes {
  const uint8_t *p;
  size_t n;
};

/* A non-null pointer for zero-length inputs: some OpenSSL calls reject NULL. */
const uint8_t kEmpty[1] = {0};

void throw_error(v8::Isolate *isolate, const char *msg) {
  ERR_clear_error();
  isolate->ThrowException(v8::Exception::Error(str(isolate, msg)));
}

void throw_type_error(v8::Isolate *isolate, const char *msg) {
  isolate->ThrowException(v8::Exception::TypeError(str(isolate, msg)));
}

/* Argument i as bytes (an ArrayBuffer or a view), without copying. The
 * runtime passes copies it owns, so the bytes do not change during the call. */
bool arg_bytes(const Info &info, int i, bytes *out) {
  v8::Local<v8::Value> v = info[i];
  if (v->IsArrayBufferView()) {
    v8::Local<v8::ArrayBufferView> view = v.As<v8::ArrayBufferView>();
    out->n = view->ByteLength();
    out->p = out->n ? (const uint8_t *)view->Buffer()->Data() + view->ByteOffset() : kEmpty;
    return true;
  }
  if (v->IsArrayBuffer()) {
    v8::Local<v8::ArrayBuffer> ab = v.As<v8::ArrayBuffer>();
    out->n = ab->ByteLength();
    out->p = out->n ? (const uint8_t *)ab->Data() : kEmpty;
    return true;
  }
  throw_type_error(info.GetIsolate(), "expected bytes");
  return false;
}

/* Same, where null or undefined stand for "absent" (out->p == nullptr). */
bool arg_bytes_opt(const Info &info, int i, bytes *out) {
  if (info[i]->IsNullOrUndefined()) {
    *out = {nullptr, 0};
    return true;
  }
  return arg_bytes(info, i, out);
}

/* Argument i as a short ASCII string (an algorithm or format name). */
bool arg_name(const Info &info, int i, char *dst, size_t cap) {
  v8::Isolate *isolate = info.GetIsolate();
  if (!info[i]->IsString() || (size_t)info[i].As<v8::String>()->Length() >= cap) {
    throw_type_error(isolate, "expected a name");
    return false;
  }
  int n = info[i].As<v8::String>()->WriteUtf8(isolate, dst, (int)cap - 1, nullptr,
                                              v8::String::NO_NULL_TERMINATION);
  dst[n] = '\0';
  return true;
}

bool arg_uint(const Info &info, int i, uint32_t *out) {
  if (!info[i]->IsUint32()) {
    throw_type_error(info.GetIsolate(), "expected an unsigned integer");
    return false;
  }
  *out = info[i].As<v8::Uint32>()->Value();
  return true;
}

bool fits_int(const bytes &b) {
  return b.n <= (size_t)INT_MAX;
}

/* A Uint8Array holding a copy of p[0..n). */
v8::MaybeLocal<v8::Uint8Array> to_js(v8::Isolate *isolate, const uint8_t *p, size_t n) {
  uint8_t *data;
  v8::Local<v8::Uint8Array> out;
  if (!new_bytes(worker_of(isolate->GetCurrentContext()), n, &data).ToLocal(&out))
    return {};
  if (n > 0)
    memcpy(data, p, n);
  return out;
}

void return_bytes(const Info &info, const uint8_t *p, size_t n) {
  v8::Local<v8::Uint8Array> out;
  if (to_js(info.GetIsolate(), p, n).ToLocal(&out))
    info.GetReturnValue().Set(out);
}

/* Returns [a, b, ...] of byte arrays; an empty buf stands for null. */
void return_list(const Info &info, const std::vector<const buf *> &items) {
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  v8::Local<v8::Array> arr = v8::Array::New(isolate, (int)items.size());
  for (size_t i = 0; i < items.size(); i++) {
    v8::Local<v8::Value> v = v8::Null(isolate);
    if (items[i] != nullptr) {
      v8::Local<v8::Uint8Array> u8;
      if (!to_js(isolate, items[i]->data(), items[i]->size()).ToLocal(&u8))
        return;
      v = u8;
    }
    if (arr->Set(context, (uint32_t)i, v).IsNothing())
      return;
  }
  info.GetReturnValue().Set(arr);
}

const EVP_MD *md_by_name(const char *name) {
  if (strcmp(name, "SHA-1") == 0)
    return EVP_sha1();
  if (strcmp(name, "SHA-256") == 0)
    return EVP_sha256();
  if (strcmp(name, "SHA-384") == 0)
    return EVP_sha384();
  if (strcmp(name, "SHA-512") == 0)
    return EVP_sha512();
  if (strcmp(name, "MD5") == 0)
    return EVP_md5();
  return nullptr;
}

bool arg_md(const Info &info, int i, const EVP_MD **md) {
  char name[16];
  if (!arg_name(info, i, name, sizeof(name)))
    return false;
  *md = md_by_name(name);
  if (*md == nullptr) {
    throw_error(info.GetIsolate(), "unsupported hash");
    return false;
  }
  return true;
}

/* ---- digests, MACs, KDFs ---- */

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

/* ---- AES ---- */

const EVP_CIPHER *aes_cipher(const char *mode, size_t key_len) {
  int bits = (int)key_len * 8;
  if (strcmp(mode, "AES-GCM") == 0)
    return bits == 128 ? EVP_aes_128_gcm() : bits == 192 ? EVP_aes_192_gcm()
         : bits == 256 ? EVP_aes_256_gcm() : nullptr;
  if (strcmp(mode, "AES-CBC") == 0)
    return bits == 128 ? EVP_aes_128_cbc() : bits == 192 ? EVP_aes_192_cbc()
         : bits == 256 ? EVP_aes_256_cbc() : nullptr;
  if (strcmp(mode, "AES-CTR") == 0)
    return bits == 128 ? EVP_aes_128_ctr() : bits == 192 ? EVP_aes_192_ctr()
         : bits == 256 ? EVP_aes_256_ctr() : nullptr;
  if (strcmp(mode, "AES-KW") == 0)
    return bits == 128 ? EVP_aes_128_wrap() : bits == 192 ? EVP_aes_192_wrap()
         : bits == 256 ? EVP_aes_256_wrap() : nullptr;
  return nullptr;
}

/*
 * cryptoAes(mode, encrypt, key, iv, data, aad, tagLength) -> Uint8Array
 * mode "AES-GCM" | "AES-CBC" | "AES-CTR" | "AES-KW". For GCM the tag (tagLength
 * bytes) follows the ciphertext, as Web Crypto has it; `aad` may be null. For
 * CTR `iv` is the whole counter block; for KW it is ignored.
 */
void crypto_aes(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  char mode[16];
  bytes key, iv, data, aad;
  uint32_t tag_len = 0;
  if (!arg_name(info, 0, mode, sizeof(mode)) || !arg_bytes(info, 2, &key) ||
      !arg_bytes_opt(info, 3, &iv) || !arg_bytes(info, 4, &data) || !arg_bytes_opt(info, 5, &aad))
    return;
  bool encrypt = info[1]->BooleanValue(isolate);
  bool gcm = strcmp(mode, "AES-GCM") == 0;
  bool kw = strcmp(mode, "AES-KW") == 0;
  if (gcm && !arg_uint(info, 6, &tag_len))
    return;
  if (gcm && (tag_len < 4 || tag_len > 16)) {
    throw_error(isolate, "invalid tag length");
    return;
  }
  const EVP_CIPHER *cipher = aes_cipher(mode, key.n);
  if (cipher == nullptr || !fits_int(data) || !fits_int(aad) || !fits_int(iv) ||
      (!kw && iv.p == nullptr)) {
    throw_error(isolate, "invalid AES parameters");
    return;
  }
  size_t in_len = data.n;
  if (gcm && !encrypt) {
    if (data.n < tag_len) {
      throw_error(isolate, "the data is shorter than the tag");
      return;
    }
    in_len -= tag_len;
  }
  buf out(data.n + 32);
  int n = 0, total = 0;
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  bool ok = ctx != nullptr;
  if (ok && kw)
    EVP_CIPHER_CTX_set_flags(ctx, EVP_CIPHER_CTX_FLAG_WRAP_ALLOW);
  ok = ok && EVP_CipherInit_ex(ctx, cipher, nullptr, nullptr, nullptr, encrypt) == 1;
  if (ok && gcm)
    ok = iv.n > 0 && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, (int)iv.n, nullptr) == 1;
  if (ok && !gcm && !kw)
    ok = iv.n == 16;
  ok = ok && EVP_CipherInit_ex(ctx, nullptr, nullptr, key.p, kw ? nullptr : iv.p, encrypt) == 1;
  if (ok && gcm && aad.p != nullptr && aad.n > 0)
    ok = EVP_CipherUpdate(ctx, nullptr, &n, aad.p, (int)aad.n) == 1;
  if (ok && in_len > 0) {
    ok = EVP_CipherUpdate(ctx, out.data(), &n, data.p, (int)in_len) == 1;
    total = n;
  }
  if (ok && gcm && !encrypt)
    ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, (int)tag_len,
                             (void *)(data.p + in_len)) == 1;
  if (ok) {
    ok = EVP_CipherFinal_ex(ctx, out.data() + total, &n) == 1;
    total += n;
  }
  if (ok && gcm && encrypt) {
    ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, (int)tag_len, out.data() + total) == 1;
    total += (int)tag_len;
  }
  EVP_CIPHER_CTX_free(ctx);
  if (!ok) {
    throw_error(isolate, "the operation failed for an operation-specific reason");
    return;
  }
  return_bytes(info, out.data(), (size_t)total);
}

/* ---- elliptic curves: EC (P-256/384/521) and OKP (Ed25519, X25519) ---- */

struct curve {
  const char *name;   /* Web Crypto's namedCurve, or the OKP algorithm */
  const char *group;  /* OpenSSL's group name (EC) or key type (OKP) */
  int okp_type;       /* EVP_PKEY_ED25519 / EVP_PKEY_X25519, 0 for EC */
  size_t size;        /* bytes of a coordinate, the scalar or a raw OKP key */
};

const curve kCurves[] = {
    {"P-256", "prime256v1", 0, 32},
    {"P-384", "secp384r1", 0, 48},
    {"P-521", "secp521r1", 0, 66},
    {"Ed25519", "ED25519", EVP_PKEY_ED25519, 32},
    {"X25519", "X25519", EVP_PKEY_X25519, 32},
};

bool arg_curve(const Info &info, int i, const curve **out) {
  char name[16];
  if (!arg_name(info, i, name, sizeof(name)))
    return false;
  for (const curve &c : kCurves) {
    if (strcmp(c.name, name) == 0) {
      *out = &c;
      return true;
    }
  }
  throw_error(info.GetIsolate(), "unsupported curve");
  return false;
}

bool bn_pad(const BIGNUM *bn, size_t size, uint8_t *dst) {
  return BN_bn2binpad(bn, dst, (int)size) == (int)size;
}

/* The key's private scalar (when `priv` is non-null and it has one) and its
 * public point, uncompressed (EC) or raw (OKP). Checks it is on curve c. */
bool key_parts(const curve *c, EVP_PKEY *pkey, buf *priv, buf *pub) {
  if (c->okp_type != 0) {
    if (EVP_PKEY_get_id(pkey) != c->okp_type)
      return false;
    size_t n = c->size;
    pub->resize(n);
    if (EVP_PKEY_get_raw_public_key(pkey, pub->data(), &n) != 1 || n != c->size)
      return false;
    if (priv != nullptr) {
      n = c->size;
      priv->resize(n);
      if (EVP_PKEY_get_raw_private_key(pkey, priv->data(), &n) != 1 || n != c->size)
        return false;
    }
    return true;
  }
  char group[32];
  if (!EVP_PKEY_is_a(pkey, "EC") ||
      EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group),
                                     nullptr) != 1 ||
      strcmp(group, c->group) != 0)
    return false;
  BIGNUM *x = nullptr, *y = nullptr, *d = nullptr;
  bool ok = EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_EC_PUB_X, &x) == 1 &&
            EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_EC_PUB_Y, &y) == 1;
  if (ok) {
    pub->assign(1 + 2 * c->size, 0x04);
    ok = bn_pad(x, c->size, pub->data() + 1) && bn_pad(y, c->size, pub->data() + 1 + c->size);
  }
  if (ok && priv != nullptr) {
    priv->resize(c->size);
    ok = EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_PRIV_KEY, &d) == 1 &&
         bn_pad(d, c->size, priv->data());
  }
  BN_free(x);
  BN_free(y);
  BN_clear_free(d);
  return ok;
}

/* An OpenSSL key from a scalar (may be absent) and a public point (may be
 * absent for OKP private keys). Null when they do not make a valid key.
 * `check`: for key data from outside, also check that the point is on the
 * curve and belongs to the scalar (keys the runtime holds passed already). */
EVP_PKEY *key_build(const curve *c, const bytes &priv, const bytes &pub, bool check) {
  if (c->okp_type != 0) {
    EVP_PKEY *pkey;
    if (priv.p != nullptr) {
      if (priv.n != c->size)
        return nullptr;
      pkey = EVP_PKEY_new_raw_private_key(c->okp_type, nullptr, priv.p, priv.n);
      if (pkey != nullptr && pub.p != nullptr && check) {
        /* A public key given with the private one must be its own. */
        buf mine;
        if (!key_parts(c, pkey, nullptr, &mine) || mine.size() != pub.n ||
            CRYPTO_memcmp(mine.data(), pub.p, pub.n) != 0) {
          EVP_PKEY_free(pkey);
          return nullptr;
        }
      }
      return pkey;
    }
    if (pub.p == nullptr || pub.n != c->size)
      return nullptr;
    return EVP_PKEY_new_raw_public_key(c->okp_type, nullptr, pub.p, pub.n);
  }
  if (pub.p == nullptr || (priv.p != nullptr && priv.n != c->size))
    return nullptr;
  OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
  BIGNUM *d = priv.p != nullptr ? BN_bin2bn(priv.p, (int)priv.n, nullptr) : nullptr;
  OSSL_PARAM *params = nullptr;
  EVP_PKEY_CTX *ctx = nullptr;
  EVP_PKEY *pkey = nullptr;
  bool ok = bld != nullptr && (priv.p == nullptr || d != nullptr) &&
            OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, c->group, 0) == 1 &&
            OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub.p, pub.n) == 1 &&
            (d == nullptr || OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PRIV_KEY, d) == 1);
  if (ok)
    params = OSSL_PARAM_BLD_to_param(bld);
  if (params != nullptr)
    ctx = EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr);
  ok = ctx != nullptr && EVP_PKEY_fromdata_init(ctx) == 1 &&
       EVP_PKEY_fromdata(ctx, &pkey, d != nullptr ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY,
                         params) == 1;
  EVP_PKEY_CTX_free(ctx);
  ctx = nullptr;
  /* The point must be on the curve, and a scalar must belong to it. */
  if (ok && check) {
    ctx = EVP_PKEY_CTX_new_from_pkey(nullptr, pkey, nullptr);
    ok = ctx != nullptr && EVP_PKEY_public_check(ctx) == 1 &&
         (d == nullptr || EVP_PKEY_pairwise_check(ctx) == 1);
  }
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  BN_clear_free(d);
  if (!ok) {
    EVP_PKEY_free(pkey);
    ERR_clear_error();
    return nullptr;
  }
  return pkey;
}

/* cryptoKeyGenerate(curve) -> [private, public] */
void crypto_key_generate(const Info &info) {
  const curve *c;
  if (!arg_curve(info, 0, &c))
    return;
  EVP_PKEY *pkey = c->okp_type != 0 ? EVP_PKEY_Q_keygen(nullptr, nullptr, c->group)
                                    : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", c->group);
  buf priv, pub;
  bool ok = pkey != nullptr && key_parts(c, pkey, &priv, &pub);
  EVP_PKEY_free(pkey);
  if (!ok) {
    throw_error(info.GetIsolate(), "key generation failed");
    return;
  }
  return_list(info, {&priv, &pub});
  OPENSSL_cleanse(priv.data(), priv.size());
}

/* The whole of `der` as a private key (PKCS#8) or a public one (SPKI). */
EVP_PKEY *der_key(const bytes &der, bool is_private) {
  const unsigned char *p = der.p;
  EVP_PKEY *pkey = nullptr;
  if (!fits_int(der))
    return nullptr;
  if (is_private) {
    PKCS8_PRIV_KEY_INFO *p8 = d2i_PKCS8_PRIV_KEY_INFO(nullptr, &p, (long)der.n);
    if (p8 != nullptr && p == der.p + der.n)
      pkey = EVP_PKCS82PKEY(p8);
    PKCS8_PRIV_KEY_INFO_free(p8);
  } else {
    pkey = d2i_PUBKEY(nullptr, &p, (long)der.n);
    if (pkey != nullptr && p != der.p + der.n) {
      EVP_PKEY_free(pkey);
      pkey = nullptr;
    }
  }
  ERR_clear_error();
  return pkey;
}

/*
 * cryptoKeyImport(curve, format, data, public) -> [private | null, public]
 * format "spki" | "pkcs8" | "raw" (a public point or raw OKP public key) |
 * "private" (`data` the scalar, `public` its point, which may be null for OKP).
 */
void crypto_key_import(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  const curve *c;
  char format[16];
  bytes data, extra;
  if (!arg_curve(info, 0, &c) || !arg_name(info, 1, format, sizeof(format)) ||
      !arg_bytes(info, 2, &data) || !arg_bytes_opt(info, 3, &extra))
    return;
  EVP_PKEY *pkey = nullptr;
  bool want_priv = false;
  if (strcmp(format, "spki") == 0) {
    pkey = der_key(data, false);
  } else if (strcmp(format, "pkcs8") == 0) {
    pkey = der_key(data, true);
    want_priv = true;
  } else if (strcmp(format, "raw") == 0) {
    pkey = key_build(c, {nullptr, 0}, data, true);
  } else if (strcmp(format, "private") == 0) {
    pkey = key_build(c, data, extra, true);
    want_priv = true;
  }
  buf priv, pub;
  bool ok = pkey != nullptr && key_parts(c, pkey, want_priv ? &priv : nullptr, &pub);
  EVP_PKEY_free(pkey);
  if (!ok) {
    throw_error(isolate, "invalid key data");
    return;
  }
  return_list(info, {want_priv ? &priv : nullptr, &pub});
  OPENSSL_cleanse(priv.data(), priv.size());
}

/* cryptoKeyExport(curve, format "spki" | "pkcs8", private | null, public) -> DER */
void crypto_key_export(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  const curve *c;
  char format[16];
  bytes priv, pub;
  if (!arg_curve(info, 0, &c) || !arg_name(info, 1, format, sizeof(format)) ||
      !arg_bytes_opt(info, 2, &priv) || !arg_bytes(info, 3, &pub))
    return;
  bool pkcs8 = strcmp(format, "pkcs8") == 0;
  if ((!pkcs8 && strcmp(format, "spki") != 0) || (pkcs8 && priv.p == nullptr)) {
    throw_error(isolate, "invalid export format");
    return;
  }
  EVP_PKEY *pkey = key_build(c, pkcs8 ? priv : bytes{nullptr, 0}, pub, false);
  unsigned char *der = nullptr;
  int len = -1;
  if (pkey != nullptr && pkcs8) {
    PKCS8_PRIV_KEY_INFO *p8 = EVP_PKEY2PKCS8(pkey);
    if (p8 != nullptr)
      len = i2d_PKCS8_PRIV_KEY_INFO(p8, &der);
    PKCS8_PRIV_KEY_INFO_free(p8);
  } else if (pkey != nullptr) {
    len = i2d_PUBKEY(pkey, &der);
  }
  EVP_PKEY_free(pkey);
  if (len <= 0) {
    throw_error(isolate, "key export failed");
    return;
  }
  return_bytes(info, der, (size_t)len);
  OPENSSL_clear_free(der, (size_t)len);
}

/* ECDSA signatures are DER in OpenSSL and r || s in Web Crypto. */
bool sig_from_der(const curve *c, const uint8_t *der, size_t len, buf *out) {
  const unsigned char *p = der;
  ECDSA_SIG *sig = d2i_ECDSA_SIG(nullptr, &p, (long)len);
  if (sig == nullptr)
    return false;
  out->assign(2 * c->size, 0);
  bool ok = bn_pad(ECDSA_SIG_get0_r(sig), c->size, out->data()) &&
            bn_pad(ECDSA_SIG_get0_s(sig), c->size, out->data() + c->size);
  ECDSA_SIG_free(sig);
  return ok;
}

bool sig_to_der(const curve *c, const bytes &raw, buf *out) {
  if (raw.n != 2 * c->size)
    return false;
  ECDSA_SIG *sig = ECDSA_SIG_new();
  BIGNUM *r = BN_bin2bn(raw.p, (int)c->size, nullptr);
  BIGNUM *s = BN_bin2bn(raw.p + c->size, (int)c->size, nullptr);
  if (sig == nullptr || r == nullptr || s == nullptr || ECDSA_SIG_set0(sig, r, s) != 1) {
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return false;
  }
  unsigned char *der = nullptr;
  int len = i2d_ECDSA_SIG(sig, &der);
  ECDSA_SIG_free(sig);
  if (len <= 0)
    return false;
  out->assign(der, der + len);
  OPENSSL_free(der);
  return true;
}

/* cryptoSign(curve, hash | null, private, public, data) -> signature */
void crypto_sign(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  const curve *c;
  const EVP_MD *md = nullptr;
  bytes priv, pub, data;
  if (!arg_curve(info, 0, &c) || (c->okp_type == 0 && !arg_md(info, 1, &md)) ||
      !arg_bytes(info, 2, &priv) || !arg_bytes_opt(info, 3, &pub) || !arg_bytes(info, 4, &data))
    return;
  EVP_PKEY *pkey = key_build(c, priv, pub, false);
  EVP_MD_CTX *mctx = EVP_MD_CTX_new();
  buf der, out;
  size_t len = 0;
  bool ok = pkey != nullptr && mctx != nullptr && c->okp_type != EVP_PKEY_X25519 &&
            EVP_DigestSignInit(mctx, nullptr, md, nullptr, pkey) == 1 &&
            EVP_DigestSign(mctx, nullptr, &len, data.p, data.n) == 1;
  if (ok) {
    der.resize(len);
    ok = EVP_DigestSign(mctx, der.data(), &len, data.p, data.n) == 1;
    der.resize(len);
  }
  if (ok && c->okp_type == 0)
    ok = sig_from_der(c, der.data(), der.size(), &out);
  else if (ok)
    out = der;
  EVP_MD_CTX_free(mctx);
  EVP_PKEY_free(pkey);
  if (!ok) {
    throw_error(isolate, "signing failed");
    return;
  }
  return_bytes(info, out.data(), out.size());
}

/* cryptoVerify(curve, hash | null, public, signature, data) -> boolean */
void crypto_verify(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  const curve *c;
  const EVP_MD *md = nullptr;
  bytes pub, sig, data;
  if (!arg_curve(info, 0, &c) || (c->okp_type == 0 && !arg_md(info, 1, &md)) ||
      !arg_bytes(info, 2, &pub) || !arg_bytes(info, 3, &sig) || !arg_bytes(info, 4, &data))
    return;
  EVP_PKEY *pkey = key_build(c, {nullptr, 0}, pub, false);
  if (pkey == nullptr || c->okp_type == EVP_PKEY_X25519) {
    EVP_PKEY_free(pkey);
    throw_error(isolate, "invalid key");
    return;
  }
  buf der;
  bool valid = false;
  if (c->okp_type == 0 ? sig_to_der(c, sig, &der) : (der.assign(sig.p, sig.p + sig.n), true)) {
    EVP_MD_CTX *mctx = EVP_MD_CTX_new();
    valid = mctx != nullptr && EVP_DigestVerifyInit(mctx, nullptr, md, nullptr, pkey) == 1 &&
            EVP_DigestVerify(mctx, der.data(), der.size(), data.p, data.n) == 1;
    EVP_MD_CTX_free(mctx);
  }
  EVP_PKEY_free(pkey);
  ERR_clear_error();
  info.GetReturnValue().Set(valid);
}

/* cryptoDerive(curve, private, public, peerPublic) -> shared secret (ECDH, X25519) */
void crypto_derive(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  const curve *c;
  bytes priv, pub, peer;
  if (!arg_curve(info, 0, &c) || !arg_bytes(info, 1, &priv) || !arg_bytes_opt(info, 2, &pub) ||
      !arg_bytes(info, 3, &peer))
    return;
  EVP_PKEY *mine = c->okp_type == EVP_PKEY_ED25519 ? nullptr : key_build(c, priv, pub, false);
  EVP_PKEY *theirs = mine != nullptr ? key_build(c, {nullptr, 0}, peer, false) : nullptr;
  EVP_PKEY_CTX *ctx = theirs != nullptr ? EVP_PKEY_CTX_new_from_pkey(nullptr, mine, nullptr) : nullptr;
  buf out;
  size_t len = 0;
  bool ok = ctx != nullptr && EVP_PKEY_derive_init(ctx) == 1 &&
            EVP_PKEY_derive_set_peer(ctx, theirs) == 1 &&
            EVP_PKEY_derive(ctx, nullptr, &len) == 1;
  if (ok) {
    out.resize(len);
    ok = EVP_PKEY_derive(ctx, out.data(), &len) == 1;
    out.resize(len);
  }
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(theirs);
  EVP_PKEY_free(mine);
  if (!ok) {
    throw_error(isolate, "key agreement failed");
    return;
  }
  return_bytes(info, out.data(), out.size());
  OPENSSL_cleanse(out.data(), out.size());
}

/* ---- RSA: keys as their big-endian components ----
 * [n, e] for a public key, [n, e, d, p, q, dp, dq, qi] for a private one, as
 * in a JWK. Building an OpenSSL key from them is cheap; decoding DER is not
 * (OpenSSL 3's decoders take most of a millisecond), so DER is only decoded
 * on import and encoded on export. */

const char *const kRsaParams[] = {
    OSSL_PKEY_PARAM_RSA_N,         OSSL_PKEY_PARAM_RSA_E,         OSSL_PKEY_PARAM_RSA_D,
    OSSL_PKEY_PARAM_RSA_FACTOR1,   OSSL_PKEY_PARAM_RSA_FACTOR2,   OSSL_PKEY_PARAM_RSA_EXPONENT1,
    OSSL_PKEY_PARAM_RSA_EXPONENT2, OSSL_PKEY_PARAM_RSA_COEFFICIENT1,
};

/* An OpenSSL key from the components array in argument i (2 or 8 of them;
 * with want_private, 8). Null with nothing thrown when they make no key;
 * null with an exception pending when the argument is malformed. `check`:
 * also require n == p * q of a private key (for keys from outside). */
EVP_PKEY *rsa_from_arg(const Info &info, int i, bool want_private, bool check, bool *thrown) {
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  *thrown = false;
  if (!info[i]->IsArray()) {
    throw_type_error(isolate, "expected the key's components");
    *thrown = true;
    return nullptr;
  }
  v8::Local<v8::Array> parts = info[i].As<v8::Array>();
  uint32_t count = parts->Length();
  if ((count != 2 && count != 8) || (want_private && count != 8))
    return nullptr;
  OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
  BIGNUM *bns[8] = {nullptr};
  bool ok = bld != nullptr;
  for (uint32_t k = 0; ok && k < count; k++) {
    v8::Local<v8::Value> v;
    if (!parts->Get(context, k).ToLocal(&v)) {
      *thrown = true;
      ok = false;
      break;
    }
    ok = v->IsArrayBufferView();
    if (ok) {
      v8::Local<v8::ArrayBufferView> view = v.As<v8::ArrayBufferView>();
      size_t n = view->ByteLength();
      const uint8_t *p = n ? (const uint8_t *)view->Buffer()->Data() + view->ByteOffset() : kEmpty;
      bns[k] = n > 0 && n <= 2048 ? BN_bin2bn(p, (int)n, nullptr) : nullptr;
      ok = bns[k] != nullptr && OSSL_PARAM_BLD_push_BN(bld, kRsaParams[k], bns[k]) == 1;
    }
  }
  OSSL_PARAM *params = ok ? OSSL_PARAM_BLD_to_param(bld) : nullptr;
  EVP_PKEY_CTX *ctx = params != nullptr ? EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr) : nullptr;
  EVP_PKEY *pkey = nullptr;
  ok = ctx != nullptr && EVP_PKEY_fromdata_init(ctx) == 1 &&
       EVP_PKEY_fromdata(ctx, &pkey, count == 8 ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY,
                         params) == 1;
  /* A private key's primes must make its modulus. (OpenSSL's own pairwise
   * check also tests them for primality: tens of milliseconds a key.) */
  if (ok && check && count == 8) {
    BN_CTX *bn_ctx = BN_CTX_new();
    BIGNUM *product = BN_new();
    ok = bn_ctx != nullptr && product != nullptr && BN_mul(product, bns[3], bns[4], bn_ctx) == 1 &&
         BN_cmp(product, bns[0]) == 0;
    BN_free(product);
    BN_CTX_free(bn_ctx);
  }
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  for (BIGNUM *bn : bns)
    BN_clear_free(bn);
  if (!ok) {
    EVP_PKEY_free(pkey);
    ERR_clear_error();
    return nullptr;
  }
  return pkey;
}

/* Returns the components of `pkey` (8 with is_private, else 2). */
void return_rsa(const Info &info, EVP_PKEY *pkey, bool is_private) {
  size_t count = is_private ? 8 : 2;
  buf parts[8];
  bool ok = pkey != nullptr && EVP_PKEY_is_a(pkey, "RSA");
  for (size_t i = 0; ok && i < count; i++) {
    BIGNUM *bn = nullptr;
    ok = EVP_PKEY_get_bn_param(pkey, kRsaParams[i], &bn) == 1;
    if (ok) {
      parts[i].resize((size_t)BN_num_bytes(bn));
      BN_bn2bin(bn, parts[i].data());
    }
    BN_clear_free(bn);
  }
  if (!ok) {
    throw_error(info.GetIsolate(), "invalid RSA key");
    return;
  }
  std::vector<const buf *> list;
  for (size_t i = 0; i < count; i++)
    list.push_back(&parts[i]);
  return_list(info, list);
  for (buf &b : parts)
    OPENSSL_cleanse(b.data(), b.size());
}

/* cryptoRsaGenerate(modulusLength, publicExponent) -> components */
void crypto_rsa_generate(const Info &info) {
  uint32_t bits;
  bytes exp;
  if (!arg_uint(info, 0, &bits) || !arg_bytes(info, 1, &exp))
    return;
  if (bits < 512 || bits > 16384 || exp.n == 0 || exp.n > 8) {
    throw_error(info.GetIsolate(), "invalid RSA parameters");
    return;
  }
  BIGNUM *e = BN_bin2bn(exp.p, (int)exp.n, nullptr);
  EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr);
  EVP_PKEY *pkey = nullptr;
  bool ok = e != nullptr && ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 &&
            EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, (int)bits) == 1 &&
            EVP_PKEY_CTX_set1_rsa_keygen_pubexp(ctx, e) == 1 && EVP_PKEY_generate(ctx, &pkey) == 1;
  EVP_PKEY_CTX_free(ctx);
  BN_free(e);
  if (!ok) {
    EVP_PKEY_free(pkey);
    throw_error(info.GetIsolate(), "RSA key generation failed");
    return;
  }
  return_rsa(info, pkey, true);
  EVP_PKEY_free(pkey);
}

/*
 * cryptoRsaImport(format, data) -> components
 * format "spki" | "pkcs8" (`data` DER) or "jwk" (`data` the components, which
 * are checked and returned in their shortest form).
 */
void crypto_rsa_import(const Info &info) {
  char format[16];
  if (!arg_name(info, 0, format, sizeof(format)))
    return;
  EVP_PKEY *pkey;
  bool is_private;
  if (strcmp(format, "jwk") == 0) {
    bool thrown;
    pkey = rsa_from_arg(info, 1, false, true, &thrown);
    if (thrown)
      return;
    is_private = info[1].As<v8::Array>()->Length() == 8;
  } else {
    bytes der;
    if (!arg_bytes(info, 1, &der))
      return;
    is_private = strcmp(format, "pkcs8") == 0;
    pkey = der_key(der, is_private);
  }
  if (pkey == nullptr) {
    throw_error(info.GetIsolate(), "invalid RSA key");
    return;
  }
  return_rsa(info, pkey, is_private);
  EVP_PKEY_free(pkey);
}

bool der_of(EVP_PKEY *pkey, bool is_private, buf *out) {
  unsigned char *der = nullptr;
  int len = -1;
  if (is_private) {
    PKCS8_PRIV_KEY_INFO *p8 = EVP_PKEY2PKCS8(pkey);
    if (p8 != nullptr)
      len = i2d_PKCS8_PRIV_KEY_INFO(p8, &der);
    PKCS8_PRIV_KEY_INFO_free(p8);
  } else {
    len = i2d_PUBKEY(pkey, &der);
  }
  if (len <= 0)
    return false;
  out->assign(der, der + len);
  OPENSSL_clear_free(der, (size_t)len);
  return true;
}

/* cryptoRsaExport(format "spki" | "pkcs8", components) -> DER */
void crypto_rsa_export(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  char format[16];
  if (!arg_name(info, 0, format, sizeof(format)))
    return;
  bool pkcs8 = strcmp(format, "pkcs8") == 0;
  bool thrown;
  EVP_PKEY *pkey = rsa_from_arg(info, 1, pkcs8, false, &thrown);
  if (thrown)
    return;
  buf der;
  bool ok = pkey != nullptr && der_of(pkey, pkcs8, &der);
  EVP_PKEY_free(pkey);
  if (!ok) {
    throw_error(isolate, "key export failed");
    return;
  }
  return_bytes(info, der.data(), der.size());
  OPENSSL_cleanse(der.data(), der.size());
}

/* Padding for a signature: "pkcs1" (RSASSA-PKCS1-v1_5) or "pss". */
bool rsa_sig_setup(EVP_PKEY_CTX *pctx, bool pss, uint32_t salt_len) {
  if (!pss)
    return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1;
  return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
         EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, (int)salt_len) == 1;
}

/* cryptoRsaSign(padding, hash, components, data, saltLength) -> signature */
void crypto_rsa_sign(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  char padding[8];
  const EVP_MD *md;
  bytes data;
  uint32_t salt_len;
  bool thrown;
  if (!arg_name(info, 0, padding, sizeof(padding)) || !arg_md(info, 1, &md) ||
      !arg_bytes(info, 3, &data) || !arg_uint(info, 4, &salt_len))
    return;
  EVP_PKEY *pkey = rsa_from_arg(info, 2, true, false, &thrown);
  if (thrown)
    return;
  EVP_MD_CTX *mctx = EVP_MD_CTX_new();
  EVP_PKEY_CTX *pctx = nullptr;
  buf out;
  size_t len = 0;
  bool ok = pkey != nullptr && mctx != nullptr &&
            EVP_DigestSignInit(mctx, &pctx, md, nullptr, pkey) == 1 &&
            rsa_sig_setup(pctx, strcmp(padding, "pss") == 0, salt_len) &&
            EVP_DigestSign(mctx, nullptr, &len, data.p, data.n) == 1;
  if (ok) {
    out.resize(len);
    ok = EVP_DigestSign(mctx, out.data(), &len, data.p, data.n) == 1;
    out.resize(len);
  }
  EVP_MD_CTX_free(mctx);
  EVP_PKEY_free(pkey);
  if (!ok) {
    throw_error(isolate, "signing failed");
    return;
  }
  return_bytes(info, out.data(), out.size());
}

/* cryptoRsaVerify(padding, hash, components, signature, data, saltLength) -> boolean */
void crypto_rsa_verify(const Info &info) {
  char padding[8];
  const EVP_MD *md;
  bytes sig, data;
  uint32_t salt_len;
  bool thrown;
  if (!arg_name(info, 0, padding, sizeof(padding)) || !arg_md(info, 1, &md) ||
      !arg_bytes(info, 3, &sig) || !arg_bytes(info, 4, &data) || !arg_uint(info, 5, &salt_len))
    return;
  EVP_PKEY *pkey = rsa_from_arg(info, 2, false, false, &thrown);
  if (thrown)
    return;
  EVP_MD_CTX *mctx = EVP_MD_CTX_new();
  EVP_PKEY_CTX *pctx = nullptr;
  bool valid = pkey != nullptr && mctx != nullptr &&
               EVP_DigestVerifyInit(mctx, &pctx, md, nullptr, pkey) == 1 &&
               rsa_sig_setup(pctx, strcmp(padding, "pss") == 0, salt_len) &&
               EVP_DigestVerify(mctx, sig.p, sig.n, data.p, data.n) == 1;
  EVP_MD_CTX_free(mctx);
  EVP_PKEY_free(pkey);
  ERR_clear_error();
  info.GetReturnValue().Set(valid);
}

/* cryptoRsaOaep(encrypt, hash, components, data, label | null) -> bytes */
void crypto_rsa_oaep(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  const EVP_MD *md;
  bytes data, label;
  bool thrown;
  if (!arg_md(info, 1, &md) || !arg_bytes(info, 3, &data) || !arg_bytes_opt(info, 4, &label))
    return;
  bool encrypt = info[0]->BooleanValue(isolate);
  EVP_PKEY *pkey = rsa_from_arg(info, 2, !encrypt, false, &thrown);
  if (thrown)
    return;
  EVP_PKEY_CTX *ctx = pkey != nullptr ? EVP_PKEY_CTX_new_from_pkey(nullptr, pkey, nullptr) : nullptr;
  bool ok = ctx != nullptr &&
            (encrypt ? EVP_PKEY_encrypt_init(ctx) : EVP_PKEY_decrypt_init(ctx)) == 1 &&
            EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_OAEP_PADDING) == 1 &&
            EVP_PKEY_CTX_set_rsa_oaep_md(ctx, md) == 1 &&
            EVP_PKEY_CTX_set_rsa_mgf1_md(ctx, md) == 1;
  if (ok && label.p != nullptr && label.n > 0) {
    /* The context takes ownership of the label. */
    void *copy = OPENSSL_memdup(label.p, label.n);
    ok = copy != nullptr && EVP_PKEY_CTX_set0_rsa_oaep_label(ctx, copy, (int)label.n) == 1;
    if (!ok)
      OPENSSL_free(copy);
  }
  buf out;
  size_t len = 0;
  if (ok)
    ok = (encrypt ? EVP_PKEY_encrypt(ctx, nullptr, &len, data.p, data.n)
                  : EVP_PKEY_decrypt(ctx, nullptr, &len, data.p, data.n)) == 1;
  if (ok) {
    out.resize(len);
    ok = (encrypt ? EVP_PKEY_encrypt(ctx, out.data(), &len, data.p, data.n)
                  : EVP_PKEY_decrypt(ctx, out.data(), &len, data.p, data.n)) == 1;
    out.resize(len);
  }
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(pkey);
  if (!ok) {
    throw_error(isolate, "the operation failed for an operation-specific reason");
    return;
  }
  return_bytes(info, out.data(), out.size());
  OPENSSL_cleanse(out.data(), out.size());
}

/* cryptoTimingSafeEqual(a, b) -> boolean (false for different lengths) */
void crypto_timing_safe_equal(const Info &info) {
  bytes a, b;
  if (!arg_bytes(info, 0, &a) || !arg_bytes(info, 1, &b))
    return;
  info.GetReturnValue().Set(a.n == b.n && CRYPTO_memcmp(a.p, b.p, a.n) == 0);
}

/* OpenSSL 3 sets up a provider's algorithms, encoders and decoders on their
 * first use: several milliseconds each time. Done once per process while the
 * first isolate loads the runtime (on its generous budget), not in the first
 * request that signs or exports a key. */
void crypto_warm_up() {
  EVP_PKEY *ec = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "prime256v1");
  EVP_PKEY *ed = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  buf spki, pkcs8;
  if (ec != nullptr && der_of(ec, false, &spki) && der_of(ec, true, &pkcs8)) {
    EVP_PKEY_free(der_key({spki.data(), spki.size()}, false));
    EVP_PKEY_free(der_key({pkcs8.data(), pkcs8.size()}, true));
  }
  uint8_t out[EVP_MAX_MD_SIZE];
  unsigned int len;
  if (EVP_Digest(kEmpty, 0, out, &len, EVP_sha256(), nullptr) != 1 ||
      HMAC(EVP_sha256(), kEmpty, 0, kEmpty, 0, out, &len) == nullptr)
    ERR_clear_error();
  EVP_PKEY_free(ed);
  EVP_PKEY_free(ec);
  ERR_clear_error();
}

pthread_once_t warm_up_once = PTHREAD_ONCE_INIT;

}  // namespace

bool crypto_natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native) {
  pthread_once(&warm_up_once, crypto_warm_up);
  static const struct {
    const char *name;
    v8::FunctionCallback fn;
  } table[] = {
      {"cryptoDigest", crypto_digest},
      {"cryptoHmac", crypto_hmac},
      {"cryptoPbkdf2", crypto_pbkdf2},
      {"cryptoHkdf", crypto_hkdf},
      {"cryptoAes", crypto_aes},
      {"cryptoKeyGenerate", crypto_key_generate},
      {"cryptoKeyImport", crypto_key_import},
      {"cryptoKeyExport", crypto_key_export},
      {"cryptoSign", crypto_sign},
      {"cryptoVerify", crypto_verify},
      {"cryptoDerive", crypto_derive},
      {"cryptoRsaGenerate", crypto_rsa_generate},
      {"cryptoRsaImport", crypto_rsa_import},
      {"cryptoRsaExport", crypto_rsa_export},
      {"cryptoRsaSign", crypto_rsa_sign},
      {"cryptoRsaVerify", crypto_rsa_verify},
      {"cryptoRsaOaep", crypto_rsa_oaep},
      {"cryptoTimingSafeEqual", crypto_timing_safe_equal},
  };
  for (const auto &entry : table)
    if (!natives_set(context, native, entry.name, entry.fn))
      return false;
  return true;
}

}  // namespace iso
