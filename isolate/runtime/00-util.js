// Internal helpers shared by every fragment after this one.
//
// Everything here is a name in the one function scope the fragments share, so
// it is invisible to tenant code. Names are specific on purpose: every
// fragment declares its top-level names in that same scope.
//
// Takes nothing from the files before it.

// Passed to constructors that tenants must not call (AbortSignal, Crypto, ...)
// and to internal fast paths of public constructors. Unreachable from outside.
const kPrivate = Symbol('private');

// The request on whose behalf JavaScript runs right now (set by dispatch and
// fireTimer): timers it starts are cancelled once that request is done.
let activeRequest = null;

const IteratorPrototype = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]()));
const TypedArrayPrototype = Object.getPrototypeOf(Uint8Array.prototype);
// Brand check for typed arrays: the getter answers the kind, or undefined.
const typedArrayKind = Object.getOwnPropertyDescriptor(TypedArrayPrototype, Symbol.toStringTag).get;
const arrayBufferByteLength = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, 'byteLength').get;
const SharedArrayBufferCtor = typeof SharedArrayBuffer === 'function' ? SharedArrayBuffer : null;
const sharedArrayBufferByteLength = SharedArrayBufferCtor === null ? null :
  Object.getOwnPropertyDescriptor(SharedArrayBufferCtor.prototype, 'byteLength').get;
const emptyBytes = new Uint8Array(0);

// Globals are non-enumerable, writable and configurable, as interface
// objects are in browsers; a few instances are enumerable.
function defineGlobal(name, value, enumerable = false) {
  Object.defineProperty(globalThis, name, {
    value, writable: true, enumerable, configurable: true,
  });
}

// A fragment that most workers never use (isolate/runtime/README.md lists
// them) is one function, evaluated the first time something of it is
// needed: until then a worker's
// context holds an uncompiled function instead of its classes, which makes
// every isolate smaller and faster to create. `load` returns what the
// fragment exports; lazyFragment(load)() returns the same object every time.
// A fragment's top level runs after tenant code may have replaced globals:
// anything the host must be able to trust is taken outside it, at load.
function lazyFragment(load) {
  let exported = null;
  return () => {
    if (exported === null) exported = load();
    return exported;
  };
}

// Properties of `target` backed by a lazy fragment: accessors, as workerd's
// lazily instantiated globals are, that become ordinary data properties
// (writable, configurable, not enumerable) when first read or assigned.
function defineLazyProperties(target, fragment, names) {
  const defineData = (name, value) => Object.defineProperty(target, name, {
    value, writable: true, enumerable: false, configurable: true,
  });
  for (const name of names) {
    const { get, set } = Object.getOwnPropertyDescriptor({
      get [name]() {
        const value = fragment()[name];
        // A frozen object (as hardened JavaScript makes the global one) keeps
        // the accessor, which still answers; a deleted property stays deleted.
        const own = Object.getOwnPropertyDescriptor(target, name);
        if (own !== undefined && own.configurable) defineData(name, value);
        return value;
      },
      set [name](value) {
        defineData(name, value);
      },
    }, name);
    Object.defineProperty(target, name, { get, set, enumerable: false, configurable: true });
  }
}

function defineLazyGlobals(fragment, names) {
  defineLazyProperties(globalThis, fragment, names);
}

// WebIDL shape of an interface: Symbol.toStringTag on the prototype, and
// enumerable attributes and operations (prototype and static).
function defineInterface(Class, tag) {
  const proto = Class.prototype;
  for (const key of Object.getOwnPropertyNames(proto)) {
    if (key === 'constructor') continue;
    const desc = Object.getOwnPropertyDescriptor(proto, key);
    desc.enumerable = true;
    Object.defineProperty(proto, key, desc);
  }
  for (const key of Object.getOwnPropertyNames(Class)) {
    if (key === 'length' || key === 'name' || key === 'prototype') continue;
    const desc = Object.getOwnPropertyDescriptor(Class, key);
    if (typeof desc.value !== 'function') continue;
    desc.enumerable = true;
    Object.defineProperty(Class, key, desc);
  }
  Object.defineProperty(proto, Symbol.toStringTag, { value: tag, configurable: true });
}

// Makes `Class` an iterator prototype inheriting from %IteratorPrototype%.
function defineIteratorInterface(Class, tag) {
  Object.setPrototypeOf(Class.prototype, IteratorPrototype);
  const desc = Object.getOwnPropertyDescriptor(Class.prototype, 'next');
  desc.enumerable = true;
  Object.defineProperty(Class.prototype, 'next', desc);
  Object.defineProperty(Class.prototype, Symbol.toStringTag, { value: tag, configurable: true });
}

function isObjectLike(v) {
  return (typeof v === 'object' && v !== null) || typeof v === 'function';
}

// Brand checks that throw are slow (the error captures a stack): a cheap
// filter first, the exact check only for likely candidates.
const objectToStringTag = Object.prototype.toString;

function isArrayBuffer(v) {
  if (typeof v !== 'object' || v === null) return false;
  if (!(v instanceof ArrayBuffer) && objectToStringTag.call(v) !== '[object ArrayBuffer]') return false;
  try {
    arrayBufferByteLength.call(v);
    return true;
  } catch {
    return false;
  }
}

function isSharedArrayBuffer(v) {
  if (sharedArrayBufferByteLength === null || typeof v !== 'object' || v === null) return false;
  if (!(v instanceof SharedArrayBufferCtor) &&
      objectToStringTag.call(v) !== '[object SharedArrayBuffer]') {
    return false;
  }
  try {
    sharedArrayBufferByteLength.call(v);
    return true;
  } catch {
    return false;
  }
}

function isAnyArrayBuffer(v) {
  return isArrayBuffer(v) || isSharedArrayBuffer(v);
}

// A Uint8Array over the bytes of an ArrayBuffer or view, without copying;
// null when `v` is not a BufferSource.
function bufferSourceBytes(v) {
  if (ArrayBuffer.isView(v)) {
    if (typedArrayKind.call(v) === 'Uint8Array') return v;
    return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  }
  if (isAnyArrayBuffer(v)) return new Uint8Array(v);
  return null;
}

// A fresh copy of a BufferSource's bytes (the Fetch standard copies bodies).
function copyBufferSource(v) {
  const view = bufferSourceBytes(v);
  return view === null ? null : view.slice();
}

// An ArrayBuffer holding exactly the bytes of `u8`, copied.
function toArrayBuffer(u8) {
  return u8.slice().buffer;
}

function concatBytes(chunks, total) {
  if (chunks.length === 1) return chunks[0];
  if (total === undefined) {
    total = 0;
    for (let i = 0; i < chunks.length; i++) total += chunks[i].length;
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (let i = 0; i < chunks.length; i++) {
    out.set(chunks[i], at);
    at += chunks[i].length;
  }
  return out;
}

const loneSurrogateRe = /[\uD800-\uDFFF]/;

// WebIDL USVString: ToString, then lone surrogates become U+FFFD.
function toUSVString(v) {
  const s = typeof v === 'string' ? v : `${v}`;
  if (!loneSurrogateRe.test(s)) return s;
  let out = '';
  let from = 0;
  const n = s.length;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdfff) continue;
    if (c <= 0xdbff && i + 1 < n) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
    }
    out += s.slice(from, i) + '\ufffd';
    from = i + 1;
  }
  return out + s.slice(from);
}

// WebIDL DOMString.
function toDOMString(v) {
  return typeof v === 'string' ? v : `${v}`;
}

// WebIDL integer conversions (without [EnforceRange] / [Clamp]).
function toIntegerModulo(v, bits, signed) {
  let x = Number(v);
  if (!Number.isFinite(x) || x === 0) return 0;
  x = Math.trunc(x);
  const range = 2 ** bits;
  x = ((x % range) + range) % range;
  if (signed && x >= range / 2) x -= range;
  return x;
}

function toUnsignedShort(v) {
  if (typeof v === 'number' && (v & 0xffff) === v) return v;
  return toIntegerModulo(v, 16, false);
}

function toLongLong(v) {
  let x = Number(v);
  if (!Number.isFinite(x)) return 0;
  x = Math.trunc(x);
  return x === 0 ? 0 : x; // no -0
}

// [EnforceRange] unsigned long long.
function toEnforcedUnsignedLongLong(v, what) {
  const x = Number(v);
  if (!Number.isFinite(x)) throw new TypeError(`${what} is not a finite number.`);
  const t = Math.trunc(x);
  if (t < 0 || t > Number.MAX_SAFE_INTEGER) {
    throw new TypeError(`${what} is outside the accepted range of 0 to ${Number.MAX_SAFE_INTEGER}.`);
  }
  return t === 0 ? 0 : t;
}

function requireArgs(given, needed, method, iface) {
  if (given >= needed) return;
  throw new TypeError(`Failed to execute '${method}' on '${iface}': ${needed} argument` +
    `${needed === 1 ? '' : 's'} required, but only ${given} present.`);
}

// WebIDL dictionary argument: undefined and null mean "empty"; other
// non-objects are a TypeError.
function toDictionary(v, what) {
  if (v === undefined || v === null) return null;
  if (!isObjectLike(v)) throw new TypeError(`${what} must be an object.`);
  return v;
}

// The name of the class of `v` without running tenant code (no getters).
function constructorNameOf(v) {
  let proto = v;
  for (let depth = 0; proto !== null && depth < 1000; depth++) {
    const desc = Object.getOwnPropertyDescriptor(proto, 'constructor');
    if (desc !== undefined && typeof desc.value === 'function' && desc.value.name !== '') {
      return desc.value.name;
    }
    proto = Object.getPrototypeOf(proto);
  }
  return '';
}

// How to name what a fetch handler returned instead of a Response.
function describeValueType(v) {
  if (v === undefined) return 'undefined';
  if (v === null) return 'null';
  const t = typeof v;
  if (t === 'function') return 'function';
  if (t !== 'object') return t;
  let name = '';
  try {
    name = constructorNameOf(v);
  } catch {
    // A Proxy may throw from its traps; fall back to the generic name.
  }
  return name === '' || name === 'Object' ? 'object Object' : name;
}

// Lowercase hex of each byte value, for UUIDs and boundaries.
const hexByte = [];
for (let i = 0; i < 256; i++) hexByte.push((i < 16 ? '0' : '') + i.toString(16));

// Random bytes come from the host. A small pool avoids one native call per
// randomUUID(); it is filled on first use, never while the runtime loads.
let randomPool = null;
let randomPoolAt = 0;

function randomBytes(n) {
  if (randomPool === null || randomPoolAt + n > randomPool.length) {
    if (randomPool === null) randomPool = new Uint8Array(4096);
    native.randomFill(randomPool);
    randomPoolAt = 0;
  }
  const out = randomPool.subarray(randomPoolAt, randomPoolAt + n);
  randomPoolAt += n;
  return out;
}

// Hooks that give console.log a useful view of runtime classes, whose state
// is private: prototype -> function(obj) returning a plain object to show.
const inspectHooks = new Map();

function registerInspect(Class, fn) {
  inspectHooks.set(Class.prototype, fn);
}

const utf8Encode = (s) => native.utf8Encode(s);
const utf8Decode = (u8) => native.utf8Decode(u8, false, false);
