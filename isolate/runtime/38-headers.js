// Headers (Fetch standard, with the Workers runtime's choices: values are any
// string, iteration works on a snapshot, getAll('set-cookie') exists).
//
// A header list is a flat array [name0, value0, name1, value1, ...] with
// lowercased names, in insertion order: the same shape native.respond takes,
// so a response's headers go out without conversion.
//
// Takes from
//   00-util.js: isObjectLike, kPrivate, requireArgs, defineInterface, registerInspect,
//     defineIteratorInterface, defineGlobal

const headerNameRe = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const headerValueBadRe = /[\0\r\n]/;
const httpWhitespaceTrimRe = /^[\t\n\r ]+|[\t\n\r ]+$/g;

const GUARD_NONE = 0;
const GUARD_IMMUTABLE = 1;

// Scripts use a handful of header names over and over: remember the
// validated, lowercased form of recent ones.
const headerNameCache = new Map();

function normalizeHeaderName(name) {
  const s = typeof name === 'string' ? name : `${name}`;
  let lower = headerNameCache.get(s);
  if (lower !== undefined) return lower;
  if (!headerNameRe.test(s)) throw new TypeError('Invalid header name.');
  lower = s.toLowerCase();
  if (headerNameCache.size >= 256) headerNameCache.clear();
  headerNameCache.set(s, lower);
  return lower;
}

function isHttpWhitespace(c) {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

function normalizeHeaderValue(value) {
  let s = typeof value === 'string' ? value : `${value}`;
  const n = s.length;
  if (n > 0 && (isHttpWhitespace(s.charCodeAt(0)) || isHttpWhitespace(s.charCodeAt(n - 1)))) {
    s = s.replace(httpWhitespaceTrimRe, '');
  }
  if (s.length > 64) {
    if (headerValueBadRe.test(s)) throw new TypeError('Invalid header value.');
    return s;
  }
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0 || c === 0x0a || c === 0x0d) throw new TypeError('Invalid header value.');
  }
  return s;
}

function headerListGet(list, lname) {
  let out = null;
  for (let i = 0; i < list.length; i += 2) {
    if (list[i] !== lname) continue;
    out = out === null ? list[i + 1] : `${out}, ${list[i + 1]}`;
  }
  return out;
}

function headerListHas(list, lname) {
  for (let i = 0; i < list.length; i += 2) if (list[i] === lname) return true;
  return false;
}

function headerListAppend(list, name, value) {
  list.push(normalizeHeaderName(name), normalizeHeaderValue(value));
}

// Appends the entries of a HeadersInit to `list`.
function headerListFill(list, init) {
  if (!isObjectLike(init)) {
    throw new TypeError("Failed to construct 'Headers': The provided value is not of type '(record<ByteString, ByteString> or sequence<sequence<ByteString>>)'.");
  }
  if (isHeaders(init)) {
    const src = headersListOf(init);
    for (let i = 0; i < src.length; i++) list.push(src[i]);
    return;
  }
  const iter = init[Symbol.iterator];
  if (iter !== undefined && iter !== null) {
    if (typeof iter !== 'function') throw new TypeError('Headers init: @@iterator is not callable.');
    for (const pair of { [Symbol.iterator]: () => iter.call(init) }) {
      if (!isObjectLike(pair)) {
        throw new TypeError("Failed to construct 'Headers': The provided value cannot be converted to a sequence.");
      }
      const entry = Array.isArray(pair) ? pair : Array.from(pair);
      if (entry.length !== 2) {
        throw new TypeError('To initialize a Headers object from a sequence, each inner sequence must have exactly two elements.');
      }
      headerListAppend(list, entry[0], entry[1]);
    }
    return;
  }
  // A record: own enumerable string keys (symbol keys cannot be names and
  // are left out).
  const keys = Object.keys(init);
  for (let i = 0; i < keys.length; i++) headerListAppend(list, keys[i], init[keys[i]]);
}

// Normalizes a list that came from the wire, in place: names lowercased,
// and values without the trailing whitespace the HTTP parser keeps (a field
// value never ends in whitespace; the leading whitespace is gone already).
function headerListLowercase(list) {
  for (let i = 0; i < list.length; i += 2) {
    list[i] = list[i].toLowerCase();
    const v = list[i + 1];
    const n = v.length;
    if (n > 0 && (v.charCodeAt(n - 1) === 0x20 || v.charCodeAt(n - 1) === 0x09)) {
      list[i + 1] = v.replace(httpWhitespaceTrimRe, '');
    }
  }
  return list;
}

// The list as it goes on the wire: the values of a repeated name joined into
// one field at the place of its first occurrence, as the Workers runtime
// sends them, except Set-Cookie, whose lines cannot be joined. Most lists
// have no repeated name and are returned as they are.
function headerListForWire(list) {
  const n = list.length;
  let repeated = false;
  for (let i = 2; i < n && !repeated; i += 2) {
    const name = list[i];
    if (name === 'set-cookie') continue;
    for (let j = 0; j < i; j += 2) {
      if (list[j] === name) {
        repeated = true;
        break;
      }
    }
  }
  if (!repeated) return list;
  const out = [];
  const at = new Map();
  for (let i = 0; i < n; i += 2) {
    const name = list[i];
    const k = name === 'set-cookie' ? undefined : at.get(name);
    if (k === undefined) {
      if (name !== 'set-cookie') at.set(name, out.length);
      out.push(name, list[i + 1]);
    } else {
      out[k + 1] = `${out[k + 1]}, ${list[i + 1]}`;
    }
  }
  return out;
}

let isHeaders;        // (v) -> boolean
let headersListOf;    // (headers) -> its live flat list
let headersFromList;  // (list, guard) -> Headers owning `list`
let headersSorted;    // (headers) -> flat sorted-and-combined pairs

class Headers {
  #list;
  #guard = GUARD_NONE;
  #sorted = null; // cached sort-and-combine result, flat; dropped on change

  constructor(init = undefined) {
    this.#list = [];
    if (init === kPrivate || init === undefined) return;
    headerListFill(this.#list, init);
  }

  #checkGuard() {
    if (this.#guard !== GUARD_NONE) throw new TypeError("Can't modify immutable headers.");
  }

  append(name, value) {
    requireArgs(arguments.length, 2, 'append', 'Headers');
    const n = normalizeHeaderName(name);
    const v = normalizeHeaderValue(value);
    this.#checkGuard();
    this.#list.push(n, v);
    this.#sorted = null;
  }

  delete(name) {
    requireArgs(arguments.length, 1, 'delete', 'Headers');
    const n = normalizeHeaderName(name);
    this.#checkGuard();
    const list = this.#list;
    let w = 0;
    for (let r = 0; r < list.length; r += 2) {
      if (list[r] === n) continue;
      list[w++] = list[r];
      list[w++] = list[r + 1];
    }
    if (w !== list.length) {
      list.length = w;
      this.#sorted = null;
    }
  }

  get(name) {
    requireArgs(arguments.length, 1, 'get', 'Headers');
    return headerListGet(this.#list, normalizeHeaderName(name));
  }

  getSetCookie() {
    const list = this.#list;
    const out = [];
    for (let i = 0; i < list.length; i += 2) if (list[i] === 'set-cookie') out.push(list[i + 1]);
    return out;
  }

  getAll(name) {
    requireArgs(arguments.length, 1, 'getAll', 'Headers');
    if (normalizeHeaderName(name) !== 'set-cookie') {
      throw new TypeError('getAll() can only be used with the header name "Set-Cookie".');
    }
    return this.getSetCookie();
  }

  has(name) {
    requireArgs(arguments.length, 1, 'has', 'Headers');
    return headerListHas(this.#list, normalizeHeaderName(name));
  }

  set(name, value) {
    requireArgs(arguments.length, 2, 'set', 'Headers');
    const n = normalizeHeaderName(name);
    const v = normalizeHeaderValue(value);
    this.#checkGuard();
    const list = this.#list;
    let found = false;
    let w = 0;
    for (let r = 0; r < list.length; r += 2) {
      if (list[r] === n) {
        if (found) continue;
        found = true;
        list[w++] = n;
        list[w++] = v;
        continue;
      }
      list[w++] = list[r];
      list[w++] = list[r + 1];
    }
    list.length = w;
    if (!found) list.push(n, v);
    this.#sorted = null;
  }

  forEach(callback, thisArg = undefined) {
    requireArgs(arguments.length, 1, 'forEach', 'Headers');
    if (typeof callback !== 'function') {
      throw new TypeError("Failed to execute 'forEach' on 'Headers': The callback provided as parameter 1 is not a function.");
    }
    const pairs = this.#sortAndCombine();
    for (let i = 0; i < pairs.length; i += 2) callback.call(thisArg, pairs[i + 1], pairs[i], this);
  }

  entries() {
    return new HeadersIterator(kPrivate, this.#sortAndCombine(), 2);
  }

  keys() {
    return new HeadersIterator(kPrivate, this.#sortAndCombine(), 0);
  }

  values() {
    return new HeadersIterator(kPrivate, this.#sortAndCombine(), 1);
  }

  // Names sorted, values of one name joined with ", ", except Set-Cookie
  // whose values stay separate. Iterators share the cached result: it is
  // replaced, never changed, when the list changes.
  #sortAndCombine() {
    if (this.#sorted !== null) return this.#sorted;
    const list = this.#list;
    const idx = [];
    for (let i = 0; i < list.length; i += 2) idx.push(i);
    idx.sort((a, b) => (list[a] < list[b] ? -1 : list[a] > list[b] ? 1 : a - b));
    const out = [];
    for (let k = 0; k < idx.length;) {
      const name = list[idx[k]];
      if (name === 'set-cookie') {
        out.push(name, list[idx[k] + 1]);
        k++;
        continue;
      }
      let value = list[idx[k] + 1];
      for (k++; k < idx.length && list[idx[k]] === name; k++) value += `, ${list[idx[k] + 1]}`;
      out.push(name, value);
    }
    this.#sorted = out;
    return out;
  }

  static {
    isHeaders = (v) => #list in v;
    headersListOf = (h) => h.#list;
    headersSorted = (h) => h.#sortAndCombine();
    headersFromList = (list, guard) => {
      const h = new Headers(kPrivate);
      h.#list = list;
      h.#guard = guard;
      return h;
    };
  }
}
Object.defineProperty(Headers.prototype, Symbol.iterator, {
  value: Headers.prototype.entries, writable: true, configurable: true,
});
defineInterface(Headers, 'Headers');
registerInspect(Headers, (h) => {
  const shown = {};
  const pairs = headersSorted(h);
  for (let i = 0; i < pairs.length; i += 2) {
    const name = pairs[i];
    if (shown[name] !== undefined) shown[name] = [].concat(shown[name], pairs[i + 1]);
    else shown[name] = pairs[i + 1];
  }
  return shown;
});

class HeadersIterator {
  #pairs;
  #kind; // 0 keys, 1 values, 2 entries
  #index = 0;

  constructor(key, pairs, kind) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#pairs = pairs;
    this.#kind = kind;
  }

  next() {
    const pairs = this.#pairs;
    const i = this.#index;
    if (i >= pairs.length) return { value: undefined, done: true };
    this.#index = i + 2;
    const kind = this.#kind;
    const value = kind === 0 ? pairs[i] : kind === 1 ? pairs[i + 1] : [pairs[i], pairs[i + 1]];
    return { value, done: false };
  }
}
defineIteratorInterface(HeadersIterator, 'Headers Iterator');

defineGlobal('Headers', Headers);
