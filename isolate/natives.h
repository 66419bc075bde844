/*
 * Natives beyond the core contract of runtime/README.md, each group in its
 * own source file: Web Crypto primitives (crypto*.cc, OpenSSL 3 EVP), zlib
 * streams (compress.cc) and small helpers (natives.cc). natives_add() adds
 * them all to a worker's `native` object once its context has been
 * deserialized from the startup snapshot (context_start() in create.cc).
 * They are not in the snapshot, whose external references only list the
 * core table of native.cc: never call natives_add() from native_new(), or
 * making the snapshot aborts the process.
 */
#ifndef EDGENODE_ISOLATE_NATIVES_H
#define EDGENODE_ISOLATE_NATIVES_H

#include <v8.h>

namespace iso {

/* Adds every function below to `native`. False with an exception pending
 * when V8 could not make them. */
bool natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native);

/* Adds the crypto* functions to `native`. False with an exception pending
 * when V8 could not make them. */
bool crypto_natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native);

/* Adds the zlib* functions to `native`. Same contract. */
bool compress_natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native);

/* Adds the python* functions (python.cc). Same contract. */
bool python_natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native);

/* Shared by both: sets `name` on `target` to a function calling `fn`. */
bool natives_set(v8::Local<v8::Context> context, v8::Local<v8::Object> target, const char *name,
                 v8::FunctionCallback fn);

}  // namespace iso

#endif
