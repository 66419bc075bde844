/*
 * Host calls: native.callSync / native.callAsync, and the conversion of
 * JavaScript values to and from the wire format (isolate.h).
 *
 * Both calls answer [true, value] or [false, error]: the runtime
 * (runtime/45-hostcalls.js) turns the error into an exception, so that no
 * binding has to know how the shim reports failures.
 */
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "internal.h"

namespace iso {
namespace {

using Info = v8::FunctionCallbackInfo<v8::Value>;

/* Containers in one wire value, the argument list included. */
constexpr int kMaxDepth = 64;

/* (Cold: the code around a call that may throw stays short.) */
__attribute__((cold)) void throw_type_error(v8::Isolate *isolate, const std::string &msg) {
  isolate->ThrowException(v8::Exception::TypeError(str(isolate, msg.c_str())));
}

__attribute__((cold)) void throw_range_error(v8::Isolate *isolate, const char *msg) {
  isolate->ThrowException(v8::Exception::RangeError(str(isolate, msg)));
}

constexpr const char *kUnavailable = "host calls are not available here";

__attribute__((cold)) void throw_unavailable(v8::Isolate *isolate) {
  isolate->ThrowException(str(isolate, kUnavailable));
}

/* ---- JavaScript → wire ---- */

/* Eight bytes at a time, the last eight read again where they overlap:
 * most strings passed are short, and a loop over bytes that the compiler
 * vectorised cost more than the copy before it. */
bool ascii(const uint8_t *p, size_t n) {
  uint64_t any = 0, word;
  if (n >= 8) {
    for (size_t i = 0; i + 8 < n; i += 8) {
      memcpy(&word, p + i, 8);
      any |= word;
    }
    memcpy(&word, p + n - 8, 8);
    any |= word;
  } else {
    for (size_t i = 0; i < n; i++)
      any |= p[i];
  }
  return (any & 0x8080808080808080ull) == 0;
}

/* Whether `more` bytes fit after `used` under `cap`, the worker's cap on
 * what a call copies out of V8's heap. */
bool fits(size_t more, size_t used, size_t cap) {
  return more <= cap && used <= cap - more;
}

/* A string that is not ASCII, as UTF-8 at the end of `out` (append_string);
 * out of line, since strings are mostly ASCII. */
__attribute__((noinline)) bool append_utf8(v8::Isolate *isolate, v8::Local<v8::String> s,
                                           iso_wire *out, size_t used, size_t cap,
                                           size_t *len) {
  size_t n = (size_t)s->Utf8Length(isolate);
  if (!fits(n, used, cap))
    return false;
  /* Written in place: no intermediate copy of a big string. */
  uint8_t *p = wire_append(out, n);
  if (n > 0)
    s->WriteUtf8(isolate, (char *)p, (int)n, nullptr,
                 v8::String::NO_NULL_TERMINATION | v8::String::REPLACE_INVALID_UTF8);
  *len = n;
  return true;
}

/* s as UTF-8 at the end of `out`, its n bytes counted after `used` against
 * `cap` (fits): false, with nothing added, when they do not fit. Inlined
 * where it is used: a facet's exec calls it for every string. */
__attribute__((always_inline)) inline bool append_string(v8::Isolate *isolate,
                                                         v8::Local<v8::String> s, iso_wire *out,
                                                         size_t used, size_t cap, size_t *len) {
  if (s->IsOneByte()) {
    /* Latin-1 storage: ASCII (almost every string) is its own UTF-8, and
     * copying it is cheaper than measuring and encoding it as UTF-8. */
    size_t n = (size_t)s->Length(), at = out->len;
    if (!fits(n, used, cap))
      return false;
    uint8_t *p = wire_append(out, n);
    if (n > 0)
      s->WriteOneByte(isolate, p, 0, (int)n, v8::String::NO_NULL_TERMINATION);
    if (ascii(p, n)) {
      *len = n;
      return true;
    }
    out->len = at;
  }
  return append_utf8(isolate, s, out, used, cap, len);
}

/* ---- Sequential one-byte strings, read where they are ----
 *
 * Most strings a call passes (literals, short concatenations, numbers made
 * text) are sequential one-byte strings in V8's heap: a header of map, hash
 * and length, then the characters. A decoded call (sync_values) passes
 * those characters to the host where they are, which spares three calls
 * into V8 and a copy per string: each call ran code of its own, and on a
 * facet's exec that code pushed SQLite's out of the instruction cache
 * (docs/benchmarks.md). The layout is the one V8's public header gives for
 * the start of an external string's resource, which is where a sequential
 * string's characters begin; it is checked once per process against the
 * API (in_place_check), and strings of any other kind, or every string
 * when the check fails, are copied through the API. The pointers stay valid
 * while nothing allocates in V8's heap: they are read after every other
 * argument was copied (read_values), and the host's call_values must not
 * allocate in the isolate (isolate.h). */
namespace in_place {
using Internals = v8::internal::Internals;
constexpr int kLengthOffset = Internals::kStringResourceOffset - v8::internal::kApiInt32Size;
constexpr int kCharsOffset = Internals::kStringResourceOffset;
/* Representation (sequential is 0) and encoding: the low four bits. */
constexpr int kKindMask = 0x0f;
constexpr int kSequentialOneByte = Internals::kStringEncodingMask;
/* 0 unknown, 1 checked and right, -1 not to be used. */
std::atomic<int> layout{0};
}  // namespace in_place

/* The characters of s and their count when s is a sequential one-byte
 * string, else NULL. Only for in_place_usable(). */
inline const uint8_t *in_place_chars(v8::Local<v8::String> s, size_t *n) {
  using namespace in_place;
  auto obj = *reinterpret_cast<const v8::internal::Address *>(*s);
  int type = Internals::GetInstanceType(obj);
  if (type >= Internals::kFirstNonstringType || (type & kKindMask) != kSequentialOneByte)
    return nullptr;
  *n = (size_t)Internals::ReadRawField<int32_t>(obj, kLengthOffset);
  return reinterpret_cast<const uint8_t *>(obj - v8::internal::kHeapObjectTag + kCharsOffset);
}

/* Whether in_place_chars reads what the API reads: a sequential one-byte
 * string must be found with its length and characters, a two-byte and a
 * concatenated one must not be. Allocates: call before reading arguments. */
__attribute__((noinline, cold)) bool in_place_check(v8::Isolate *isolate) {
  static const char probe[] = "edgenode: characters in place";
  static const uint16_t wide[] = {0x65, 0x20ac, 0x64};
  v8::HandleScope scope(isolate);
  v8::Local<v8::String> flat, two_byte, concatenated;
  if (!v8::String::NewFromOneByte(isolate, (const uint8_t *)probe, v8::NewStringType::kNormal,
                                  (int)sizeof probe - 1)
           .ToLocal(&flat) ||
      !v8::String::NewFromTwoByte(isolate, wide, v8::NewStringType::kNormal, 3)
           .ToLocal(&two_byte))
    return false;
  concatenated = v8::String::Concat(isolate, flat, flat);
  size_t n = 0, unused = 0;
  const uint8_t *p = in_place_chars(flat, &n);
  return flat->IsOneByte() && p != nullptr && n == sizeof probe - 1 &&
         memcmp(p, probe, n) == 0 && in_place_chars(two_byte, &unused) == nullptr &&
         in_place_chars(concatenated, &unused) == nullptr;
}

/* A small integer is a tagged value in the handle itself, as V8's public
 * header reads it in its inline functions. */
inline bool is_small_integer(v8::Local<v8::Value> v) {
  return !v8::internal::Internals::HasHeapObjectTag(
      *reinterpret_cast<const v8::internal::Address *>(*v));
}

inline int small_integer_value(v8::Local<v8::Value> v) {
  return v8::internal::Internals::SmiValue(*reinterpret_cast<const v8::internal::Address *>(*v));
}

bool in_place_usable(v8::Isolate *isolate) {
  int known = in_place::layout.load(std::memory_order_relaxed);
  if (__builtin_expect(known == 0, 0)) {
    known = in_place_check(isolate) ? 1 : -1;
    in_place::layout.store(known, std::memory_order_relaxed);
  }
  return known > 0;
}

constexpr const char *kTooLarge = "the value is too large to pass to the host";

struct encoder {
  iso_worker *w;
  v8::Isolate *isolate;
  v8::Local<v8::Context> context;
  v8::Local<v8::Value> object_proto;
  iso_wire *out;
  size_t cap;  /* bytes: the copy lives outside V8's heap */

  bool too_big(size_t more) {
    if (fits(more, out->len, cap))
      return false;
    throw_range_error(isolate, kTooLarge);
    return true;
  }

  /* "a Date", "a function": what a TypeError says could not be sent. */
  bool refuse(v8::Local<v8::Value> v) {
    std::string what = "this value";
    if (v->IsFunction()) {
      what = "a function";
    } else if (v->IsSymbol()) {
      what = "a symbol";
    } else if (v->IsProxy()) {
      what = "a Proxy";
    } else if (v->IsSharedArrayBuffer()) {
      what = "a SharedArrayBuffer";
    } else if (v->IsObject()) {
      v8::String::Utf8Value name(isolate, v.As<v8::Object>()->GetConstructorName());
      if (*name != nullptr && name.length() > 0)
        what = std::string(strchr("AEIOU", (*name)[0]) ? "an " : "a ") + *name;
    }
    throw_type_error(isolate, "cannot pass " + what + " to the host");
    return false;
  }

  /* The header first, its length filled in once the bytes are written. */
  bool string(v8::Local<v8::String> s) {
    size_t at = out->len, n = 0;
    wire_append(out, 5);
    if (!append_string(isolate, s, out, out->len, cap, &n)) {
      out->len = at;
      throw_range_error(isolate, kTooLarge);
      return false;
    }
    wire_put_header(out->data + at, ISO_WIRE_STRING, (uint32_t)n);
    return true;
  }

  bool bytes(const void *data, size_t len) {
    if (len > UINT32_MAX) {
      throw_range_error(isolate, "binary data over 4 GiB cannot pass to the host");
      return false;
    }
    if (too_big(len + 5))
      return false;
    iso_wire_bytes(out, data, len);
    return true;
  }

  /* depth: the containers around this one. */
  bool nested(int depth) {
    if (depth < kMaxDepth)
      return true;
    throw_range_error(isolate, "a value passed to the host is nested too deeply");
    return false;
  }

  bool array(v8::Local<v8::Array> a, int depth) {
    if (!nested(depth))
      return false;
    uint32_t n = a->Length();
    if (too_big(5 + (size_t)n))
      return false;
    iso_wire_array(out, n);
    for (uint32_t i = 0; i < n; i++) {
      v8::Local<v8::Value> item;
      if (!a->Get(context, i).ToLocal(&item) || !value(item, depth + 1))
        return false;
    }
    return true;
  }

  bool object(v8::Local<v8::Object> o, int depth) {
    if (!nested(depth))
      return false;
    v8::Local<v8::Array> keys;
    if (!o->GetOwnPropertyNames(context,
                                static_cast<v8::PropertyFilter>(v8::ONLY_ENUMERABLE |
                                                                v8::SKIP_SYMBOLS),
                                v8::KeyConversionMode::kConvertToString)
             .ToLocal(&keys))
      return false;
    uint32_t n = keys->Length();
    if (too_big(5 + 2 * (size_t)n))
      return false;
    iso_wire_object(out, n);
    for (uint32_t i = 0; i < n; i++) {
      v8::Local<v8::Value> key, item;
      if (!keys->Get(context, i).ToLocal(&key) || !key->IsString() ||
          !string(key.As<v8::String>()) || !o->Get(context, key).ToLocal(&item) ||
          !value(item, depth + 1))
        return false;
    }
    return true;
  }

  bool value(v8::Local<v8::Value> v, int depth) {
    /* Strings first: the check is inline, the others are calls into V8,
     * and strings are what a facet's exec passes most. */
    if (v->IsString())
      return string(v.As<v8::String>());
    if (v->IsUndefined()) {
      iso_wire_undefined(out);
    } else if (v->IsNull()) {
      iso_wire_null(out);
    } else if (v->IsBoolean()) {
      iso_wire_bool(out, v->IsTrue());
    } else if (v->IsNumber()) {
      iso_wire_number(out, v.As<v8::Number>()->Value());
    } else if (v->IsBigInt()) {
      bool lossless = false;
      int64_t n = v.As<v8::BigInt>()->Int64Value(&lossless);
      if (!lossless) {
        throw_type_error(isolate, "a BigInt passed to the host must fit in 64-bit signed integers");
        return false;
      }
      iso_wire_bigint(out, n);
    } else if (v->IsArrayBufferView()) {
      v8::Local<v8::ArrayBufferView> view = v.As<v8::ArrayBufferView>();
      if (view->Buffer()->IsSharedArrayBuffer())
        return refuse(view->Buffer());
      size_t len = view->ByteLength();
      const uint8_t *data = len ? (const uint8_t *)view->Buffer()->Data() + view->ByteOffset()
                                : nullptr;
      return bytes(data, len);
    } else if (v->IsArrayBuffer()) {
      v8::Local<v8::ArrayBuffer> ab = v.As<v8::ArrayBuffer>();
      return bytes(ab->Data(), ab->ByteLength());
    } else if (v->IsArray()) {
      return array(v.As<v8::Array>(), depth);
    } else if (v->IsObject() && !v->IsProxy() && plain(v.As<v8::Object>())) {
      return object(v.As<v8::Object>(), depth);
    } else {
      return refuse(v);
    }
    return true;
  }

  /* An object literal or Object.create(null): nothing with internal state
   * (Date, Map, a class instance) whose own properties would lose it. */
  bool plain(v8::Local<v8::Object> o) {
    if (o->IsFunction() || o->IsDate() || o->IsRegExp() || o->IsMap() || o->IsSet() ||
        o->IsWeakMap() || o->IsWeakSet() || o->IsPromise() || o->IsNativeError() ||
        o->IsBooleanObject() || o->IsNumberObject() || o->IsStringObject() ||
        o->IsSymbolObject() || o->IsBigIntObject() || o->IsModuleNamespaceObject() ||
        o->IsGeneratorObject() || o->IsArgumentsObject() || o->IsMapIterator() ||
        o->IsSetIterator() || o->IsWasmMemoryObject() || o->IsWasmModuleObject())
      return false;
    if (o->InternalFieldCount() > 0)
      return false;
    v8::Local<v8::Value> proto = o->GetPrototype();
    return proto->IsNull() || proto->StrictEquals(object_proto);
  }
};

/* ---- wire → JavaScript ---- */

struct decoder {
  iso_worker *w;
  v8::Isolate *isolate;
  v8::Local<v8::Context> context;
  iso_wire_reader r;

  bool malformed() {
    isolate->ThrowException(
        v8::Exception::Error(str(isolate, "the host sent a malformed value")));
    return false;
  }

  bool string_of(const iso_wire_value &v, v8::Local<v8::Value> *out) {
    v8::Local<v8::String> s;
    if (v.len > (size_t)v8::String::kMaxLength ||
        !v8::String::NewFromUtf8(isolate, v.ptr, v8::NewStringType::kNormal, (int)v.len)
             .ToLocal(&s)) {
      throw_range_error(isolate, "Invalid string length");
      return false;
    }
    *out = s;
    return true;
  }

  bool value(int depth, v8::Local<v8::Value> *out) {
    iso_wire_value v;
    if (iso_wire_next(&r, &v) != 1)
      return malformed();
    switch (v.type) {
    case ISO_WIRE_UNDEFINED:
      *out = v8::Undefined(isolate);
      return true;
    case ISO_WIRE_NULL:
      *out = v8::Null(isolate);
      return true;
    case ISO_WIRE_FALSE:
    case ISO_WIRE_TRUE:
      *out = v8::Boolean::New(isolate, v.type == ISO_WIRE_TRUE);
      return true;
    case ISO_WIRE_NUMBER:
      *out = v8::Number::New(isolate, v.number);
      return true;
    case ISO_WIRE_BIGINT:
      *out = v8::BigInt::New(isolate, v.bigint);
      return true;
    case ISO_WIRE_STRING:
      return string_of(v, out);
    case ISO_WIRE_BYTES: {
      uint8_t *data;
      v8::Local<v8::ArrayBuffer> ab;
      if (!new_buffer(w, v.len, &data).ToLocal(&ab))
        return false;
      if (v.len > 0)
        memcpy(data, v.ptr, v.len);
      *out = ab;
      return true;
    }
    case ISO_WIRE_ARRAY:
      return array(v.count, depth, out);
    case ISO_WIRE_OBJECT:
      return object(v.count, depth, out);
    default:
      return malformed();
    }
  }

  bool array(uint32_t n, int depth, v8::Local<v8::Value> *out) {
    if (depth >= kMaxDepth)
      return malformed();
    v8::EscapableHandleScope scope(isolate);
    /* Small arrays (a facet's exec result) need no allocation of their own. */
    v8::Local<v8::Value> small[8];
    std::vector<v8::Local<v8::Value>> large;
    v8::Local<v8::Value> *items = small;
    if (n > 8) {
      large.resize(n);
      items = large.data();
    }
    for (uint32_t i = 0; i < n; i++)
      if (!value(depth + 1, &items[i]))
        return false;
    *out = scope.Escape(v8::Array::New(isolate, items, n));
    return true;
  }

  bool object(uint32_t n, int depth, v8::Local<v8::Value> *out) {
    if (depth >= kMaxDepth)
      return malformed();
    v8::EscapableHandleScope scope(isolate);
    v8::Local<v8::Object> o = v8::Object::New(isolate);
    for (uint32_t i = 0; i < n; i++) {
      v8::HandleScope pair(isolate);
      iso_wire_value k;
      v8::Local<v8::Value> key, item;
      if (iso_wire_next(&r, &k) != 1 || k.type != ISO_WIRE_STRING)
        return malformed();
      /* A data property, never a setter: "__proto__" stays a plain key. */
      if (!string_of(k, &key) || !value(depth + 1, &item) ||
          o->CreateDataProperty(context, key.As<v8::String>(), item).IsNothing())
        return false;
    }
    *out = scope.Escape(o);
    return true;
  }
};

/* One wire value to JavaScript; empty input is undefined. Throws on
 * malformed input or past the worker's ArrayBuffer cap. */
v8::MaybeLocal<v8::Value> wire_decode(iso_worker *w, v8::Local<v8::Context> context,
                                      const uint8_t *data, size_t len) {
  v8::Isolate *isolate = context->GetIsolate();
  if (len == 0)
    return v8::Undefined(isolate);
  decoder d{w, isolate, context, {}};
  iso_wire_reader_init(&d.r, data, len);
  v8::Local<v8::Value> out;
  if (!d.value(0, &out))
    return {};
  if (d.r.pos != d.r.end) {
    d.malformed();
    return {};
  }
  return out;
}

/* [ok, value] */
v8::Local<v8::Value> outcome(v8::Isolate *isolate, bool ok, v8::Local<v8::Value> value) {
  v8::Local<v8::Value> pair[2] = {v8::Boolean::New(isolate, ok), value};
  return v8::Array::New(isolate, pair, 2);
}

/* [ok, decoded value]; a value that cannot be decoded makes [false, error]. */
v8::Local<v8::Value> outcome_of(iso_worker *w, v8::Local<v8::Context> context, bool ok,
                                const uint8_t *data, size_t len) {
  v8::Isolate *isolate = context->GetIsolate();
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> value;
  if (wire_decode(w, context, data, len).ToLocal(&value))
    return outcome(isolate, ok, value);
  if (tc.HasTerminated()) {
    tc.ReThrow();
    return {};
  }
  return outcome(isolate, false, tc.Exception());
}

v8::Local<v8::Value> unavailable(v8::Isolate *isolate) {
  return outcome(isolate, false, str(isolate, kUnavailable));
}

/* Buffers of synchronous calls, kept per thread from one call to the next:
 * a facet's exec is small and frequent, and allocating its argument and
 * result buffers every time showed in its profile. A call made while
 * another one is in progress on the thread (a host callback that enters
 * JavaScript again) gets buffers of its own. */
struct kept_wires {
  iso_wire args, result;
  bool busy;
  bool release_registered;
};
/* Trivial, so that using it costs no check that it was made: what it holds
 * is freed when the thread ends by kept_release, which a first use sets up
 * (kept_in_use). */
thread_local kept_wires kept;

struct kept_release {
  bool armed = false;  /* (set once: touching it is what registers the destructor) */
  ~kept_release() {
    iso_wire_free(&kept.args);
    iso_wire_free(&kept.result);
  }
};
thread_local kept_release kept_release_at_exit;

__attribute__((noinline, cold)) void kept_register() {
  kept_release_at_exit.armed = true;
  kept.release_registered = true;
}

/* Larger buffers go back after the call: one big value is not kept for the
 * life of the thread. */
constexpr size_t kKeepBytes = 64 * 1024;

__attribute__((noinline)) void kept_trim() {
  for (iso_wire *buffer : {&kept.args, &kept.result})
    if (buffer->cap > kKeepBytes)
      iso_wire_free(buffer);
}

/* Marks the kept buffers busy. */
inline void kept_in_use() {
  if (__builtin_expect(!kept.release_registered, 0))
    kept_register();
  kept.busy = true;
}

/* The argument and result buffers of one call: the thread's kept ones when
 * free, else new ones. Both start empty. */
struct wires {
  iso_wire own_args{}, own_result{};
  iso_wire *args = &own_args, *result = &own_result;
  bool borrowed = false;

  explicit wires(bool reuse) {
    if (!reuse || kept.busy)
      return;
    kept_in_use();
    borrowed = true;
    args = &kept.args;
    result = &kept.result;
    args->len = result->len = 0;
  }
  ~wires() {
    if (borrowed) {
      /* (its own buffers were never used) */
      kept_trim();
      kept.busy = false;
      return;
    }
    iso_wire_free(&own_args);
    iso_wire_free(&own_result);
  }
  wires(const wires &) = delete;
  wires &operator=(const wires &) = delete;
};

/* What both calls share: checks their arguments and encodes them. The
 * names point into the strings here or into the worker's memo of them. */
struct call_args {
  std::string binding, op;
  const char *binding_name = "", *op_name = "";
  wires buf;
  explicit call_args(bool reuse) : buf(reuse) {}
};

/* A short string into a std::string: no heap copy on the way for names
 * that fit its inline buffer, as binding and operation names do. */
void utf8_into(v8::Isolate *isolate, v8::Local<v8::String> s, std::string *out) {
  int n = s->Length();
  if (n <= 32) {
    /* Whatever the string's representation, an ASCII name is narrowed from
     * a copy of its 16-bit units, cheaper than measuring it as UTF-8. */
    uint16_t units[32];
    uint16_t any = 0;
    s->Write(isolate, units, 0, n, v8::String::NO_NULL_TERMINATION);
    for (int i = 0; i < n; i++)
      any |= units[i];
    if (any < 0x80) {
      out->resize((size_t)n);
      for (int i = 0; i < n; i++)
        (*out)[(size_t)i] = (char)units[i];
      return;
    }
  }
  out->resize((size_t)s->Utf8Length(isolate));
  if (!out->empty())
    s->WriteUtf8(isolate, &(*out)[0], (int)out->size(), nullptr,
                 v8::String::NO_NULL_TERMINATION | v8::String::REPLACE_INVALID_UTF8);
}

bool prepare(iso_worker *w, v8::Local<v8::Context> context, const Info &info, call_args *ca) {
  v8::Isolate *isolate = info.GetIsolate();
  if (!info[0]->IsString() || !info[1]->IsString() || !info[2]->IsArray()) {
    throw_type_error(isolate, "expected (binding, op, args)");
    return false;
  }
  utf8_into(isolate, info[0].As<v8::String>(), &ca->binding);
  utf8_into(isolate, info[1].As<v8::String>(), &ca->op);
  ca->binding_name = ca->binding.c_str();
  ca->op_name = ca->op.c_str();
  encoder enc{w, isolate, context, w->object_proto.Get(isolate), ca->buf.args, w->memory_cap};
  return enc.array(info[2].As<v8::Array>(), 0);
}

/* The name in s, copied out only when s is not the string object seen last
 * time in this slot: the runtime passes the same binding and operation
 * strings on every call, and copying them showed in a facet exec's profile. */
__attribute__((noinline)) void remember_name(v8::Isolate *isolate, name_memo *memo,
                                             v8::Local<v8::String> s) {
  utf8_into(isolate, s, &memo->utf8);
  memo->js.Reset(isolate, s);
}

const char *direct_name(iso_worker *w, v8::Isolate *isolate, int slot, v8::Local<v8::String> s) {
  name_memo &memo = w->direct_names[slot];
  if (memo.js.IsEmpty() || memo.js != s)
    remember_name(isolate, &memo, s);
  return memo.utf8.c_str();
}

/* The arguments of (binding, op, ...args) encoded, the names already read. */
bool encode_direct(iso_worker *w, v8::Local<v8::Context> context, const Info &info,
                   call_args *ca) {
  v8::Isolate *isolate = info.GetIsolate();
  encoder enc{w, isolate, context, w->object_proto.Get(isolate), ca->buf.args, w->memory_cap};
  uint32_t n = (uint32_t)info.Length() - 2;
  if (enc.too_big(5 + (size_t)n))
    return false;
  iso_wire_array(ca->buf.args, n);
  for (int i = 2; i < info.Length(); i++)
    if (!enc.value(info[i], 1))
      return false;
  return true;
}

iso_call call_of(iso_worker *w, v8::Local<v8::Context> context, const call_args &ca,
                 uint32_t id) {
  return iso_call{running_token(w, context),
                  id,
                  ca.binding_name,
                  ca.op_name,
                  ca.buf.args->data,
                  ca.buf.args->len};
}

/* The host's call_sync for an encoded call; its result goes to ca.buf.result. */
int run_sync(iso_worker *w, v8::Local<v8::Context> context, call_args &ca) {
  iso_call call = call_of(w, context, ca, 0);
  return w->host_calls.call_sync(w->host.data, &call, ca.buf.result);
}

/* Up to this many numbers of an answer go to native.directNumbers(). */
constexpr uint32_t kDirectNumbers = ISO_NUMBERS_MAX;

/* An answer that is a number, or an array of at most kDirectNumbers
 * numbers, written to the worker's directNumbers instead of becoming a value
 * (a number too, so that a number returned always means "see there"):
 * building a small array was about 1,100 of a facet write's 8,400
 * instructions. Returns how many, or -1 when the answer is anything else. */
int numbers_answer(iso_worker *w, const iso_wire *result) {
  if (w->direct_numbers_data == nullptr)
    return -1;
  iso_wire_reader r;
  iso_wire_value v;
  iso_wire_reader_init(&r, result->data, result->len);
  if (iso_wire_next(&r, &v) != 1)
    return -1;
  double numbers[kDirectNumbers];
  uint32_t count = 1;
  if (v.type == ISO_WIRE_NUMBER) {
    numbers[0] = v.number;
  } else if (v.type == ISO_WIRE_ARRAY && v.count <= kDirectNumbers) {
    count = v.count;
    for (uint32_t i = 0; i < count; i++) {
      iso_wire_value item;
      if (iso_wire_next(&r, &item) != 1 || item.type != ISO_WIRE_NUMBER)
        return -1;
      numbers[i] = item.number;
    }
  } else {
    return -1;
  }
  if (r.pos != r.end)
    return -1;
  memcpy(w->direct_numbers_data, numbers, count * sizeof numbers[0]);
  return (int)count;
}

/* Up to this many arguments go to call_values decoded. */
constexpr int kValuesMax = 8;

/* A host callback may have freed the worker: its JavaScript stops here. */
bool worker_gone(iso_worker *w, v8::Isolate *isolate) {
  if (!w->free_requested)
    return false;
  isolate->TerminateExecution();
  return true;
}

/* The host's answer in `result` as the call's value: a few numbers into
 * directNumbers() when `numbers`, else the value, or the error thrown. */
__attribute__((noinline)) void answer_from_wire(const Info &info, iso_worker *w,
                                                v8::Local<v8::Context> context, int rc,
                                                bool numbers, const iso_wire *result) {
  v8::Isolate *isolate = info.GetIsolate();
  if (context.IsEmpty())
    context = isolate->GetCurrentContext();
  int count = numbers && rc == 0 ? numbers_answer(w, result) : -1;
  if (count >= 0) {
    info.GetReturnValue().Set(count);
    return;
  }
  v8::Local<v8::Value> value;
  if (!wire_decode(w, context, result->data, result->len).ToLocal(&value))
    return; /* the decoder threw */
  if (rc == 0)
    info.GetReturnValue().Set(value);
  else
    isolate->ThrowException(value);
}

/* sync_direct's call in the wire format: for a host without call_values,
 * and for arguments that do not go decoded. */
__attribute__((noinline)) void sync_wire(const Info &info, iso_worker *w,
                                         v8::Local<v8::Context> context, const char *binding,
                                         const char *op, bool numbers) {
  if (context.IsEmpty())
    context = info.GetIsolate()->GetCurrentContext();
  call_args ca(true);
  ca.binding_name = binding;
  ca.op_name = op;
  if (!encode_direct(w, context, info, &ca))
    return;
  int rc = run_sync(w, context, ca);
  if (worker_gone(w, info.GetIsolate()))
    return;
  answer_from_wire(info, w, context, rc, numbers, ca.buf.result);
}

/* One argument of a decoded call that is not read in place (read_values):
 * a string copied to `arena` as UTF-8 (*at says where), a number, null,
 * undefined or a boolean. False for what needs the wire format. */
__attribute__((noinline)) bool read_value_copied(v8::Isolate *isolate, iso_worker *w,
                                                 v8::Local<v8::Value> v, iso_wire *arena,
                                                 iso_wire_value *out, size_t *used, size_t *at) {
  if (v->IsString()) {
    size_t n = 0;
    *at = arena->len;
    /* Counted as the wire format would count it, header and all, so that
     * both ways refuse the same calls. */
    if (!append_string(isolate, v.As<v8::String>(), arena, *used + 5, w->memory_cap, &n))
      return false;
    out->type = ISO_WIRE_STRING;
    out->len = n;
    *used += 5 + n;
  } else if (v->IsNumber()) {
    out->type = ISO_WIRE_NUMBER;
    out->number = v.As<v8::Number>()->Value();
    *used += 9;
  } else if (v->IsNullOrUndefined()) {
    out->type = v->IsNull() ? ISO_WIRE_NULL : ISO_WIRE_UNDEFINED;
    *used += 1;
  } else if (v->IsBoolean()) {
    out->type = v->IsTrue() ? ISO_WIRE_TRUE : ISO_WIRE_FALSE;
    *used += 1;
  } else {
    return false;
  }
  return true;
}

/* Reads the call's arguments from info[2] on as plain values into
 * `values`: small integers and ASCII strings in place (the common case,
 * kept to a few instructions), the others through read_value_copied.
 * Returns false, having read them only partly, when one needs the wire
 * format: a BigInt, bytes, an object, a string over the worker's cap (the
 * wire path encodes it, or says why not). */
bool read_values(const Info &info, iso_worker *w, iso_wire *arena, iso_wire_value *values,
                 int count) {
  v8::Isolate *isolate = info.GetIsolate();
  bool in_place = in_place_usable(isolate);
  constexpr size_t kNotCopied = SIZE_MAX;
  size_t at[kValuesMax];
  size_t used = 5; /* in the wire format: the array's header, then each argument's */
  bool copied = false;
  for (int i = 0; i < count; i++) {
    v8::Local<v8::Value> v = info[i + 2];
    iso_wire_value *out = &values[i];
    at[i] = kNotCopied;
    if (is_small_integer(v)) {
      /* (A statement id, most often.) */
      out->type = ISO_WIRE_NUMBER;
      out->number = small_integer_value(v);
      used += 9;
      continue;
    }
    size_t n = 0;
    const uint8_t *chars =
        in_place && v->IsString() ? in_place_chars(v.As<v8::String>(), &n) : nullptr;
    if (chars != nullptr && ascii(chars, n) && fits(n, used + 5, w->memory_cap)) {
      out->type = ISO_WIRE_STRING;
      out->ptr = (const char *)chars;
      out->len = n;
      used += 5 + n;
      continue;
    }
    if (!read_value_copied(isolate, w, v, arena, out, &used, &at[i]))
      return false;
    copied = true;
  }
  for (int i = 0; copied && i < count; i++) {
    if (values[i].type != ISO_WIRE_STRING)
      continue;
    if (at[i] == kNotCopied) {
      /* Copying an argument may have flattened it, which allocates in V8's
       * heap, and a collection moves strings: where the characters of the
       * others are is read again now, when nothing allocates before the
       * host's call. */
      size_t n = 0;
      const uint8_t *chars = in_place_chars(info[i + 2].As<v8::String>(), &n);
      if (chars == nullptr || n != values[i].len)
        return false;
      values[i].ptr = (const char *)chars;
    } else {
      /* The buffer may have moved while strings were added to it, and has
       * no memory at all when they were all empty: an empty string still
       * points somewhere (SQLite binds a NULL pointer as NULL, not ''). */
      values[i].ptr = values[i].len > 0 ? (const char *)arena->data + at[i] : "";
    }
  }
  return true;
}

/* callSyncNumbers' call through the host's call_values, with the thread's
 * kept buffers: what a facet's exec runs, made as short as it can be.
 * Returns false, having called nothing, when the call needs the wire
 * format instead (read_values), the host declines it, or the buffers are in
 * use by a call further up the stack.
 * (Compiled into the host call itself: each call and return on a facet
 * exec's path cost more than its instructions; docs/benchmarks.md, facets.) */
__attribute__((always_inline)) inline
bool sync_values(const Info &info, iso_worker *w, v8::Local<v8::Context> context,
                 const char *binding, const char *op) {
  int count = info.Length() - 2;
  if (count > kValuesMax || kept.busy)
    return false;
  iso_wire_value values[kValuesMax];
  kept.args.len = 0;
  if (!read_values(info, w, &kept.args, values, count))
    return false;
  /* Copying a string hit the heap limit: the isolate is being terminated,
   * and nothing is called for it. */
  if (__builtin_expect(w->heap_hit, 0))
    return true;
  kept_in_use();
  kept.result.len = 0;
  iso_call call{running_token(w, context), 0, binding, op, nullptr, 0};
  iso_numbers answer{};
  int rc = w->host_calls.call_values(w->host.data, &call, values, (uint32_t)count,
                                     w->direct_numbers_data ? &answer : nullptr, &kept.result);
  if (rc != 1 && !worker_gone(w, info.GetIsolate())) {
    if (rc == 0 && answer.count > 0 && answer.count <= ISO_NUMBERS_MAX &&
        w->direct_numbers_data != nullptr) {
      /* All of them, whatever the count (the rest are zeros): a copy of a
       * size known here is two moves, where one by the count was a call. */
      static_assert(sizeof answer.value == kDirectNumbers * sizeof(double), "directNumbers size");
      memcpy(w->direct_numbers_data, answer.value, sizeof answer.value);
      info.GetReturnValue().Set(answer.count);
    } else {
      /* An answer of numbers in the wire still goes to directNumbers(): a
       * number returned always means that (runtime/README.md). */
      answer_from_wire(info, w, context, rc, rc == 0, &kept.result);
    }
  }
  if (__builtin_expect(kept.args.cap > kKeepBytes || kept.result.cap > kKeepBytes, 0))
    kept_trim();
  kept.busy = false;
  return rc != 1;
}

/* callSyncDirect(binding, op, ...args) → the value; the host's error value
 * is thrown as it is (the runtime makes an Error of it). For frequent calls:
 * no argument array to read back and no [ok, value] pair to build. With
 * `numbers` (and directNumbers() asked for), an answer of numbers
 * (numbers_answer) arrives in the worker's directNumbers() instead, and the
 * call returns how many there are; such calls go to the host's call_values
 * first when it has one, with nothing encoded. (Compiled into each of the
 * two host calls: see sync_values.) */
__attribute__((always_inline)) inline
void sync_direct(const Info &info, bool numbers) {
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context;  /* asked of V8 only where it is needed */
  iso_worker *w = worker_running(isolate);
  if (w == nullptr) {
    context = isolate->GetCurrentContext();
    w = worker_of(context);
  }
  if (w == nullptr || w->host_calls.call_sync == nullptr) {
    throw_unavailable(isolate);
    return;
  }
  if (info.Length() < 2 || !info[0]->IsString() || !info[1]->IsString()) {
    throw_type_error(isolate, "expected (binding, op, ...args)");
    return;
  }
  const char *binding = direct_name(w, isolate, 0, info[0].As<v8::String>());
  const char *op = direct_name(w, isolate, 1, info[1].As<v8::String>());
  if (numbers && w->host_calls.call_values != nullptr &&
      sync_values(info, w, context, binding, op))
    return;
  sync_wire(info, w, context, binding, op, numbers);
}

}  // namespace

/* callSync(binding, op, args) → [true, value] | [false, error] */
void hostcall_sync(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  iso_worker *w = worker_of(context);
  if (w == nullptr || w->host_calls.call_sync == nullptr) {
    info.GetReturnValue().Set(unavailable(isolate));
    return;
  }
  call_args ca(true);
  if (!prepare(w, context, info, &ca))
    return;
  iso_wire *result = ca.buf.result;
  int rc = run_sync(w, context, ca);
  if (!worker_gone(w, isolate)) {
    v8::Local<v8::Value> out = outcome_of(w, context, rc == 0, result->data, result->len);
    if (!out.IsEmpty())
      info.GetReturnValue().Set(out);
  }
}

void hostcall_sync_direct(const Info &info) {
  sync_direct(info, false);
}

/* callSyncNumbers(binding, op, ...args): callSyncDirect for an operation
 * that mostly answers a few numbers (a facet write's row counts). */
__attribute__((hot))
void hostcall_sync_numbers(const Info &info) {
  sync_direct(info, true);
}

/* directNumbers() → the worker's Float64Array of callSyncNumbers' numeric
 * answers; the same one on every call. */
void hostcall_direct_numbers(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  iso_worker *w = worker_of(isolate->GetCurrentContext());
  if (w == nullptr) {
    throw_unavailable(isolate);
    return;
  }
  if (w->direct_numbers.IsEmpty()) {
    uint8_t *data;
    v8::Local<v8::ArrayBuffer> ab;
    if (!new_buffer(w, kDirectNumbers * sizeof(double), &data).ToLocal(&ab))
      return;
    memset(data, 0, kDirectNumbers * sizeof(double));
    w->direct_numbers.Reset(isolate, v8::Float64Array::New(ab, 0, kDirectNumbers));
    w->direct_numbers_store = ab->GetBackingStore();
    w->direct_numbers_data = static_cast<double *>(w->direct_numbers_store->Data());
  }
  info.GetReturnValue().Set(w->direct_numbers.Get(isolate));
}

/* callAsync(binding, op, args) → a promise of [true, value] | [false, error] */
void hostcall_async(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  iso_worker *w = worker_of(context);
  v8::Local<v8::Promise::Resolver> resolver;
  if (!v8::Promise::Resolver::New(context).ToLocal(&resolver))
    return;
  info.GetReturnValue().Set(resolver->GetPromise());
  if (w == nullptr || w->host_calls.call_async == nullptr) {
    /* Resolve() fails only under a termination, which speaks for itself. */
    resolver->Resolve(context, unavailable(isolate)).FromMaybe(false);
    return;
  }
  /* The host may keep the arguments until it completes: buffers of its own. */
  call_args ca(false);
  if (!prepare(w, context, info, &ca)) {
    info.GetReturnValue().SetUndefined();
    return;
  }
  /* Registered before the host sees it: the host may complete it at once. */
  uint32_t id;
  do
    id = ++w->last_call_id;
  while (id == 0 || w->async_calls.count(id) != 0);
  iso_call call = call_of(w, context, ca, id);
  async_call &entry = w->async_calls[id];
  entry.token = call.token;
  entry.resolver.Reset(isolate, resolver);

  iso_wire result;
  iso_wire_init(&result);
  int rc = w->host_calls.call_async(w->host.data, &call, &result);
  if (!worker_gone(w, isolate) && rc != 0) {
    auto it = w->async_calls.find(id);
    if (it != w->async_calls.end()) {
      w->async_calls.erase(it);
      v8::Local<v8::Value> out = outcome_of(w, context, false, result.data, result.len);
      /* Empty or Nothing only under a termination: the promise stays pending. */
      if (!out.IsEmpty())
        resolver->Resolve(context, out).FromMaybe(false);
    }
  }
  iso_wire_free(&result);
}

bool hostcall_settle(iso_worker *w, v8::Local<v8::Context> context, uint32_t call_id, bool ok,
                     const uint8_t *value, size_t value_len) {
  v8::Isolate *isolate = context->GetIsolate();
  auto it = w->async_calls.find(call_id);
  if (it == w->async_calls.end())
    return true;
  v8::Local<v8::Promise::Resolver> resolver = it->second.resolver.Get(isolate);
  w->async_calls.erase(it);
  v8::Local<v8::Value> out = outcome_of(w, context, ok, value, value_len);
  return !out.IsEmpty() && resolver->Resolve(context, out).IsJust();
}

}  // namespace iso
