/*
 * Web Crypto's RSA on OpenSSL 3: RSASSA-PKCS1-v1_5, RSA-PSS and RSA-OAEP.
 * Keys cross as their big-endian components: generated, imported (SPKI,
 * PKCS#8, JWK components), exported, and used to sign, verify, encrypt and
 * decrypt.
 */
#include <limits.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/x509.h>
#include <openssl/rsa.h>

#include <vector>

#include "internal.h"

namespace iso {
namespace crypto {

namespace {

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

}  // namespace

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

namespace {

/* Padding for a signature: "pkcs1" (RSASSA-PKCS1-v1_5) or "pss". */
bool rsa_sig_setup(EVP_PKEY_CTX *pctx, bool pss, uint32_t salt_len) {
  if (!pss)
    return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1;
  return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
         EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, (int)salt_len) == 1;
}

}  // namespace

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

}  // namespace crypto
}  // namespace iso
