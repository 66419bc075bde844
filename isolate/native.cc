/*
 * The `native` object: what the runtime (the files in runtime/) may ask of the host.
 * See runtime/README.md for the contract. Every function finds its worker in
 * its context's embedder data. The natives a response leaves by (respond and
 * the streamed respondStart...) are in respond.cc; the table below lists
 * them with the rest.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <unicode/uchar.h>
#include <unicode/uidna.h>
#include <unicode/utf8.h>

#include "internal.h"

namespace iso {
namespace {

using Info = v8::FunctionCallbackInfo<v8::Value>;

constexpr size_t kMaxLogBytes = 16384;
/* structuredClone's bound where there is no worker (the snapshot's contexts). */
constexpr size_t kDefaultMemoryCap = 128u << 20;

/* The worker is found through the function's context, not the function: the
 * functions are made once, in the startup snapshot, for every worker. */
inline iso_worker *worker(const Info &info) {
  return worker_of(info.GetIsolate()->GetCurrentContext());
}

void throw_type_error(v8::Isolate *isolate, const char *msg) {
  isolate->ThrowException(v8::Exception::TypeError(str(isolate, msg)));
}

void throw_range_error(v8::Isolate *isolate, const char *msg) {
  isolate->ThrowException(v8::Exception::RangeError(str(isolate, msg)));
}

/* log(level, message) */
void native_log(const Info &info) {
  iso_worker *w = worker(info);
  v8::Isolate *isolate = info.GetIsolate();
  if (w == nullptr || w->host.log == nullptr || info.Length() < 2 || !info[1]->IsString())
    return;
  int level = info[0]->IsInt32() ? info[0].As<v8::Int32>()->Value() : ISO_LOG_INFO;
  if (level < ISO_LOG_DEBUG || level > ISO_LOG_ERROR)
    level = ISO_LOG_INFO;
  /* One log line is not the place for megabytes: keep its head. */
  char buf[kMaxLogBytes];
  int len = info[1].As<v8::String>()->WriteUtf8(
      isolate, buf, sizeof(buf), nullptr,
      v8::String::NO_NULL_TERMINATION | v8::String::REPLACE_INVALID_UTF8);
  uint64_t token = running_token(w, isolate->GetCurrentContext());
  w->host.log(w->host.data, token, (iso_log_level)level, buf, (size_t)len);
}

/* timerStart(timerId, delayMs) */
void native_timer_start(const Info &info) {
  iso_worker *w = worker(info);
  v8::Isolate *isolate = info.GetIsolate();
  if (!info[0]->IsUint32()) {
    throw_type_error(isolate, "expected a timer id");
    return;
  }
  uint32_t id = info[0].As<v8::Uint32>()->Value();
  double delay = info[1]->IsNumber() ? info[1].As<v8::Number>()->Value() : 0;
  if (!(delay >= 0))
    delay = 0;
  if (w == nullptr || w->host.timer_start == nullptr ||
      w->host.timer_start(w->host.data, running_token(w, isolate->GetCurrentContext()), id,
                          delay) != 0)
    isolate->ThrowException(v8::Exception::Error(str(isolate, "the host refused to start a timer")));
}

/* timerCancel(timerId) */
void native_timer_cancel(const Info &info) {
  iso_worker *w = worker(info);
  if (w != nullptr && info[0]->IsUint32() && w->host.timer_cancel != nullptr)
    w->host.timer_cancel(w->host.data, info[0].As<v8::Uint32>()->Value());
}

/* randomFill(u8) */
void native_random_fill(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  /* Bytes drawn while the snapshot is made would be every worker's. */
  if (worker(info) == nullptr) {
    isolate->ThrowException(
        v8::Exception::Error(str(isolate, "no random bytes while the runtime's snapshot is made")));
    return;
  }
  uint8_t *data;
  size_t len;
  if (!view_bytes(info[0], &data, &len) || info[0]->IsArrayBuffer()) {
    throw_type_error(isolate, "expected a typed array");
    return;
  }
  if (len > 65536) {
    throw_range_error(isolate, "at most 65536 random bytes at once");
    return;
  }
  if (random_bytes(data, len) != 0)
    isolate->ThrowException(v8::Exception::Error(str(isolate, "no randomness available")));
}

/* utf8Encode(string) */
void native_utf8_encode(const Info &info) {
  iso_worker *w = worker(info);
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::String> s;
  if (!info[0]->ToString(isolate->GetCurrentContext()).ToLocal(&s))
    return;
  size_t len = (size_t)s->Utf8Length(isolate);
  uint8_t *data;
  v8::Local<v8::Uint8Array> out;
  if (!new_bytes(w, len, &data).ToLocal(&out))
    return;
  if (len > 0)
    s->WriteUtf8(isolate, (char *)data, (int)len, nullptr,
                 v8::String::NO_NULL_TERMINATION | v8::String::REPLACE_INVALID_UTF8);
  info.GetReturnValue().Set(out);
}

/* Strict UTF-8 (no overlongs, surrogates or values past U+10FFFF). */
bool utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0)
        lo = 0xA0;
      if (c == 0xED)
        hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0)
        lo = 0x90;
      if (c == 0xF4)
        hi = 0x8F;
    } else {
      return false;
    }
    if (n - i - 1 < need || s[i + 1] < lo || s[i + 1] > hi)
      return false;
    for (size_t k = 2; k <= need; k++)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF)
        return false;
    i += need + 1;
  }
  return true;
}

/* utf8Decode(u8, fatal, ignoreBOM) */
void native_utf8_decode(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  uint8_t *data;
  size_t len;
  if (!view_bytes(info[0], &data, &len)) {
    throw_type_error(isolate, "expected an ArrayBuffer or a view");
    return;
  }
  bool fatal = info[1]->BooleanValue(isolate);
  bool ignore_bom = info[2]->BooleanValue(isolate);
  if (!ignore_bom && len >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF) {
    data += 3;
    len -= 3;
  }
  if (fatal && !utf8_valid(data, len)) {
    throw_type_error(isolate, "The encoded data was not valid for encoding utf-8");
    return;
  }
  v8::Local<v8::String> s;
  if (len > (size_t)INT_MAX ||
      !v8::String::NewFromUtf8(isolate, (const char *)data, v8::NewStringType::kNormal, (int)len)
           .ToLocal(&s)) {
    throw_range_error(isolate, "Invalid string length");
    return;
  }
  info.GetReturnValue().Set(s);
}

class clone_delegate final : public v8::ValueSerializer::Delegate {
 public:
  clone_delegate(v8::Isolate *isolate, size_t cap) : isolate_(isolate), cap_(cap) {}
  void ThrowDataCloneError(v8::Local<v8::String> message) override {
    v8::Local<v8::Value> e = v8::Exception::Error(message);
    v8::Local<v8::Context> context = isolate_->GetCurrentContext();
    if (e.As<v8::Object>()->Set(context, str(isolate_, "name"), str(isolate_, "DataCloneError"))
            .IsNothing())
      return;
    isolate_->ThrowException(e);
  }
  /* The serialised copy lives outside V8's heap: bound it like ArrayBuffers. */
  void *ReallocateBufferMemory(void *old, size_t size, size_t *actual) override {
    if (size > cap_)
      return nullptr;
    void *p = realloc(old, size);
    if (p != nullptr)
      *actual = size;
    return p;
  }
  void FreeBufferMemory(void *buffer) override { free(buffer); }

 private:
  v8::Isolate *isolate_;
  size_t cap_;
};

/* structuredClone(value) */
void native_structured_clone(const Info &info) {
  iso_worker *w = worker(info);
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  clone_delegate delegate(isolate, w != nullptr ? w->memory_cap : kDefaultMemoryCap);
  std::pair<uint8_t *, size_t> bytes;
  {
    v8::ValueSerializer ser(isolate, &delegate);
    ser.WriteHeader();
    if (!ser.WriteValue(context, info[0]).FromMaybe(false))
      return;
    bytes = ser.Release();
  }
  v8::ValueDeserializer des(isolate, bytes.first, bytes.second);
  v8::Local<v8::Value> out;
  if (des.ReadHeader(context).FromMaybe(false) && des.ReadValue(context).ToLocal(&out))
    info.GetReturnValue().Set(out);
  delegate.FreeBufferMemory(bytes.first);
}

/* UTS #46 as the URL Standard's "domain to ASCII" (beStrict false) uses it:
 * CheckJoiners, nontransitional processing, and neither UseSTD3ASCIIRules,
 * CheckHyphens nor VerifyDnsLength. CheckBidi is done here rather than by
 * ICU 72, which applies RFC 5893 to every label of a domain with any
 * right-to-left label: the current standard (and its tests: "1.\u064A" is
 * valid) applies it to the labels that hold right-to-left characters. */
const UIDNA *uts46;

void uts46_open() {
  UErrorCode status = U_ZERO_ERROR;
  uts46 = uidna_openUTS46(UIDNA_CHECK_CONTEXTJ | UIDNA_NONTRANSITIONAL_TO_ASCII |
                              UIDNA_NONTRANSITIONAL_TO_UNICODE,
                          &status);
  if (U_FAILURE(status))
    uts46 = nullptr;
}

/* The errors the URL Standard's options turn off. */
constexpr uint32_t kIdnaIgnored = UIDNA_ERROR_EMPTY_LABEL | UIDNA_ERROR_LABEL_TOO_LONG |
                                  UIDNA_ERROR_DOMAIN_NAME_TOO_LONG | UIDNA_ERROR_LEADING_HYPHEN |
                                  UIDNA_ERROR_TRAILING_HYPHEN | UIDNA_ERROR_HYPHEN_3_4;

/* RFC 5893 section 2 for one label (UTF-8), when it holds R, AL or AN. */
bool bidi_label_ok(const uint8_t *s, int32_t n) {
  std::vector<UCharDirection> dirs;
  bool rtl = false;
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(s, i, n, c);
    if (c < 0)
      return false;
    UCharDirection d = u_charDirection(c);
    rtl = rtl || d == U_RIGHT_TO_LEFT || d == U_RIGHT_TO_LEFT_ARABIC || d == U_ARABIC_NUMBER;
    dirs.push_back(d);
  }
  if (!rtl)
    return true;
  size_t last = dirs.size() - 1;
  while (last > 0 && dirs[last] == U_DIR_NON_SPACING_MARK)
    last--;
  UCharDirection first = dirs[0], end = dirs[last];
  if (first == U_RIGHT_TO_LEFT || first == U_RIGHT_TO_LEFT_ARABIC) {
    bool en = false, an = false;
    for (UCharDirection d : dirs) {
      switch (d) {
      case U_EUROPEAN_NUMBER: en = true; break;
      case U_ARABIC_NUMBER: an = true; break;
      case U_RIGHT_TO_LEFT: case U_RIGHT_TO_LEFT_ARABIC: case U_EUROPEAN_NUMBER_SEPARATOR:
      case U_COMMON_NUMBER_SEPARATOR: case U_EUROPEAN_NUMBER_TERMINATOR: case U_OTHER_NEUTRAL:
      case U_BOUNDARY_NEUTRAL: case U_DIR_NON_SPACING_MARK:
        break;
      default:
        return false;
      }
    }
    return !(en && an) && (end == U_RIGHT_TO_LEFT || end == U_RIGHT_TO_LEFT_ARABIC ||
                           end == U_EUROPEAN_NUMBER || end == U_ARABIC_NUMBER);
  }
  if (first == U_LEFT_TO_RIGHT) {
    for (UCharDirection d : dirs) {
      switch (d) {
      case U_LEFT_TO_RIGHT: case U_EUROPEAN_NUMBER: case U_EUROPEAN_NUMBER_SEPARATOR:
      case U_COMMON_NUMBER_SEPARATOR: case U_EUROPEAN_NUMBER_TERMINATOR: case U_OTHER_NEUTRAL:
      case U_BOUNDARY_NEUTRAL: case U_DIR_NON_SPACING_MARK:
        break;
      default:
        return false;
      }
    }
    return end == U_LEFT_TO_RIGHT || end == U_EUROPEAN_NUMBER;
  }
  return false;
}

/* UTS #46 with the options above; false on any error that counts. */
bool idna_convert(bool to_ascii, const char *in, int32_t len, std::vector<char> *out,
                  int32_t *out_len) {
  out->resize((size_t)len * 2 + 64);
  for (int attempt = 0; attempt < 2; attempt++) {
    UErrorCode status = U_ZERO_ERROR;
    UIDNAInfo info = UIDNA_INFO_INITIALIZER;
    int32_t n = to_ascii ? uidna_nameToASCII_UTF8(uts46, in, len, out->data(),
                                                  (int32_t)out->size(), &info, &status)
                         : uidna_nameToUnicodeUTF8(uts46, in, len, out->data(),
                                                   (int32_t)out->size(), &info, &status);
    if (status == U_BUFFER_OVERFLOW_ERROR && attempt == 0) {
      out->resize((size_t)n + 1);
      continue;
    }
    if (U_FAILURE(status) || (info.errors & ~kIdnaIgnored) != 0)
      return false;
    *out_len = n;
    return true;
  }
  return false;
}

/* CheckBidi over the Unicode form of an ASCII domain with "xn--" labels. */
bool idna_bidi_ok(const std::vector<char> &ascii, int32_t len) {
  std::vector<char> uni;
  int32_t n;
  if (!idna_convert(false, ascii.data(), len, &uni, &n))
    return false;
  const uint8_t *s = (const uint8_t *)uni.data();
  int32_t start = 0;
  for (int32_t i = 0; i <= n; i++) {
    if (i < n && s[i] != '.')
      continue;
    if (i > start && !bidi_label_ok(s + start, i - start))
      return false;
    start = i + 1;
  }
  return true;
}

/* domainToASCII(domain) → the ASCII form, or '' when it is not a valid domain */
void native_domain_to_ascii(const Info &info) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  v8::Isolate *isolate = info.GetIsolate();
  info.GetReturnValue().SetEmptyString();
  if (!info[0]->IsString() || pthread_once(&once, uts46_open) != 0 || uts46 == nullptr)
    return;
  v8::Local<v8::String> s = info[0].As<v8::String>();
  size_t len = (size_t)s->Utf8Length(isolate);
  if (len > INT32_MAX / 4)
    return;
  /* Lone surrogates become U+FFFD, which UTS #46 disallows: an error, as it should be. */
  std::vector<char> in(len + 1);
  s->WriteUtf8(isolate, in.data(), (int)len, nullptr,
               v8::String::NO_NULL_TERMINATION | v8::String::REPLACE_INVALID_UTF8);
  std::vector<char> out;
  int32_t n;
  if (!idna_convert(true, in.data(), (int32_t)len, &out, &n))
    return;
  /* Only a punycoded label can hold a right-to-left character. */
  if (memmem(out.data(), (size_t)n, "xn--", 4) != nullptr && !idna_bidi_ok(out, n))
    return;
  v8::Local<v8::String> ascii;
  if (v8::String::NewFromOneByte(isolate, (const uint8_t *)out.data(), v8::NewStringType::kNormal,
                                 n)
          .ToLocal(&ascii))
    info.GetReturnValue().Set(ascii);
}

/* fail(token, kind, error) */
void native_fail(const Info &info) {
  iso_worker *w = worker(info);
  if (w == nullptr)
    return;
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  uint64_t token;
  if (!to_token(isolate, info[0], &token))
    return;
  v8::String::Utf8Value kind(isolate, info[1]);
  iso_error err = {};
  if (*kind != nullptr && strcmp(*kind, "exception") == 0) {
    error_from_exception(w, context, ISO_ERR_EXCEPTION, info[2], v8::Local<v8::Message>(), &err);
  } else if (*kind != nullptr && strcmp(*kind, "bad_return") == 0) {
    v8::String::Utf8Value type(isolate, info[2]);
    char *msg = xasprintf("fetch() returned %s, not a Response", *type ? *type : "something");
    error_set(&err, ISO_ERR_BAD_RETURN, msg);
    free(msg);
  } else {
    error_set(&err, ISO_ERR_INTERNAL, "the runtime failed a request for an unknown reason");
  }
  request_respond(w, token, nullptr, &err);
  iso_error_clear(&err);
}

/* done(token) */
void native_done(const Info &info) {
  iso_worker *w = worker(info);
  uint64_t token;
  if (w != nullptr && to_token(info.GetIsolate(), info[0], &token))
    request_done(w, token);
}

/* The core natives. Every function here must be listed, since the snapshot
 * holds them (a missing external reference aborts the process). */
const struct {
  const char *name;
  v8::FunctionCallback fn;
} native_table[] = {
    {"log", native_log},
    {"timerStart", native_timer_start},
    {"timerCancel", native_timer_cancel},
    {"randomFill", native_random_fill},
    {"utf8Encode", native_utf8_encode},
    {"utf8Decode", native_utf8_decode},
    {"structuredClone", native_structured_clone},
    {"respond", respond_whole},
    {"respondStart", respond_start},
    {"respondWrite", respond_write},
    {"respondEnd", respond_end},
    {"respondAbort", respond_abort},
    {"fail", native_fail},
    {"done", native_done},
    {"callSync", hostcall_sync},
    {"callSyncDirect", hostcall_sync_direct},
    {"callSyncNumbers", hostcall_sync_numbers},
    {"directNumbers", hostcall_direct_numbers},
    {"callAsync", hostcall_async},
    {"domainToASCII", native_domain_to_ascii},
};

}  // namespace

const intptr_t *native_references() {
  static intptr_t refs[ARRAY_SIZE(native_table) + 1];
  for (size_t i = 0; i < ARRAY_SIZE(native_table); i++)
    refs[i] = (intptr_t)native_table[i].fn;
  refs[ARRAY_SIZE(native_table)] = 0;
  return refs;
}

/* Only the core table: the extras of natives.h are added per context, after
 * deserialization (their callbacks are not external references). */
v8::Local<v8::Object> native_new(v8::Local<v8::Context> context) {
  v8::Isolate *isolate = context->GetIsolate();
  v8::Local<v8::Object> native = v8::Object::New(isolate);
  for (const auto &entry : native_table) {
    v8::Local<v8::FunctionTemplate> t = v8::FunctionTemplate::New(
        isolate, entry.fn, v8::Local<v8::Value>(), v8::Local<v8::Signature>(), 0, v8::ConstructorBehavior::kThrow);
    v8::Local<v8::Function> fn;
    v8::Local<v8::String> name = str(isolate, entry.name);
    if (!t->GetFunction(context).ToLocal(&fn) ||
        native->Set(context, name, fn).IsNothing())
      return v8::Local<v8::Object>();
    fn->SetName(name);
  }
  return native;
}

}  // namespace iso
