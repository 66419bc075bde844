/*
 * Web Crypto primitives for runtime/19-subtle.js, on OpenSSL 3's EVP API
 * (the libcrypto libnode already loads). Every function is synchronous and
 * stateless: keys cross as bytes (symmetric keys raw; EC and OKP keys as the
 * private scalar and the public point; RSA keys as PKCS#8 / SPKI DER), and
 * an OpenSSL key object lives only for the call. Failures throw a plain
 * Error; the runtime decides which DOMException the caller sees.
 *
 * One file per algorithm family: crypto_digest.cc (digests, HMAC, PBKDF2,
 * HKDF), crypto_aes.cc, crypto_ec.cc (EC and OKP curves: ECDSA, ECDH,
 * Ed25519, X25519) and crypto_rsa.cc. This one owns what they share (the
 * argument and result helpers, DER key encodings), the table that adds
 * them all to a worker's `native` object, the OpenSSL warm-up, and
 * cryptoTimingSafeEqual.
 */
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/x509.h>

#include <vector>

#include "internal.h"
#include "natives.h"

namespace iso {
namespace crypto {

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

namespace {

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

}  // namespace

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

namespace {

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
}  // namespace crypto

bool crypto_natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native) {
  pthread_once(&crypto::warm_up_once, crypto::crypto_warm_up);
  static const struct {
    const char *name;
    v8::FunctionCallback fn;
  } table[] = {
      {"cryptoDigest", crypto::crypto_digest},
      {"cryptoHmac", crypto::crypto_hmac},
      {"cryptoPbkdf2", crypto::crypto_pbkdf2},
      {"cryptoHkdf", crypto::crypto_hkdf},
      {"cryptoAes", crypto::crypto_aes},
      {"cryptoKeyGenerate", crypto::crypto_key_generate},
      {"cryptoKeyImport", crypto::crypto_key_import},
      {"cryptoKeyExport", crypto::crypto_key_export},
      {"cryptoSign", crypto::crypto_sign},
      {"cryptoVerify", crypto::crypto_verify},
      {"cryptoDerive", crypto::crypto_derive},
      {"cryptoRsaGenerate", crypto::crypto_rsa_generate},
      {"cryptoRsaImport", crypto::crypto_rsa_import},
      {"cryptoRsaExport", crypto::crypto_rsa_export},
      {"cryptoRsaSign", crypto::crypto_rsa_sign},
      {"cryptoRsaVerify", crypto::crypto_rsa_verify},
      {"cryptoRsaOaep", crypto::crypto_rsa_oaep},
      {"cryptoTimingSafeEqual", crypto::crypto_timing_safe_equal},
  };
  for (const auto &entry : table)
    if (!natives_set(context, native, entry.name, entry.fn))
      return false;
  return true;
}

}  // namespace iso
