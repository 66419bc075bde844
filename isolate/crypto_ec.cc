/*
 * Web Crypto's elliptic curves on OpenSSL 3: EC keys (P-256, P-384, P-521)
 * for ECDSA and ECDH, and OKP keys (Ed25519, X25519). Keys cross as the
 * private scalar and the public point: generated, imported (SPKI, PKCS#8,
 * raw, or the parts), exported, and used to sign, verify and derive.
 */
#include <limits.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/x509.h>

#include <vector>

#include "internal.h"

namespace iso {
namespace crypto {

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace crypto
}  // namespace iso
