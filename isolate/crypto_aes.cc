/*
 * Web Crypto's AES on OpenSSL 3: cryptoAes, for AES-GCM, AES-CBC, AES-CTR
 * and AES-KW (key wrap), with raw keys.
 */
#include <limits.h>
#include <string.h>

#include <openssl/evp.h>

#include <vector>

#include "internal.h"

namespace iso {
namespace crypto {

namespace {

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


}  // namespace

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

}  // namespace crypto
}  // namespace iso
