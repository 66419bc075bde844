// URL Standard: URLSearchParams and its iterator. One made by a URL's
// searchParams mirrors that URL's query both ways.
//
// Takes from
//   30-url-encoding.js: urlEncoding (toUSV, codeAt, formParse, formSerialize, requireArgs,
//     webidlShape)
//   34-url.js: urlBridge (kInternal, urlRecord, bindSearchParams)

const URLSearchParams = (() => {
  const ReflectApply = Reflect.apply;
  const { toUSV, codeAt, formParse, formSerialize, requireArgs, webidlShape } = urlEncoding;
  const { kInternal, urlRecord, bindSearchParams } = urlBridge;

  // WebIDL sequence conversion: drains the iterator that `method` returns.
  function collect(obj, method) {
    const it = ReflectApply(method, obj, []);
    if ((typeof it !== 'object' || it === null) && typeof it !== 'function') {
      throw new TypeError('Result of the Symbol.iterator method is not an object');
    }
    const next = it.next;
    const out = [];
    for (;;) {
      const step = ReflectApply(next, it, []);
      if ((typeof step !== 'object' || step === null) && typeof step !== 'function') {
        throw new TypeError('Iterator result is not an object');
      }
      if (step.done) return out;
      out.push(step.value);
    }
  }

  const ITER_KEYS = 0, ITER_VALUES = 1, ITER_ENTRIES = 2;
  let iteratorCreate;

  class URLSearchParams {
    #list;        // flat [name, value, name, value, ...]
    #url = null;  // the URL whose query this object mirrors, or null

    constructor(init = '') {
      if (init === kInternal) {
        this.#list = [];
        return;
      }
      if ((typeof init === 'object' && init !== null) || typeof init === 'function') {
        const iter = init[Symbol.iterator];
        if (iter !== undefined && iter !== null) {
          if (typeof iter !== 'function') {
            throw new TypeError("Failed to construct 'URLSearchParams': The provided value is not iterable.");
          }
          const list = [];
          for (const pair of collect(init, iter)) {
            if ((typeof pair !== 'object' || pair === null) && typeof pair !== 'function') {
              throw new TypeError("Failed to construct 'URLSearchParams': The provided value cannot be converted to a sequence.");
            }
            const method = pair[Symbol.iterator];
            if (typeof method !== 'function') {
              throw new TypeError("Failed to construct 'URLSearchParams': The provided value cannot be converted to a sequence.");
            }
            const items = collect(pair, method);
            if (items.length !== 2) {
              throw new TypeError("Failed to construct 'URLSearchParams': Sequence initializer must only contain pair elements");
            }
            list.push(toUSV(items[0]), toUSV(items[1]));
          }
          this.#list = list;
        } else {
          const list = [];
          const index = new Map();
          for (const key of Reflect.ownKeys(init)) {
            const desc = Reflect.getOwnPropertyDescriptor(init, key);
            if (desc === undefined || !desc.enumerable) continue;
            const name = toUSV(key);
            const value = toUSV(init[key]);
            // A record keeps one entry per converted key (two lone
            // surrogates can convert to the same name).
            const at = index.get(name);
            if (at !== undefined) {
              list[at + 1] = value;
            } else {
              index.set(name, list.length);
              list.push(name, value);
            }
          }
          this.#list = list;
        }
      } else {
        let s = toUSV(init);
        if (codeAt(s, 0) === 0x3f) s = s.slice(1);
        this.#list = formParse(s);
      }
    }

    static {
      bindSearchParams((url, list) => {
        const p = new URLSearchParams(kInternal);
        p.#list = list;
        p.#url = url;
        return p;
      }, (p, list) => { p.#list = list; });
      iteratorCreate = (p, kind) => new URLSearchParamsIterator(() => p.#list, kind);
    }

    // The update steps: mirror the list into the URL's query.
    #update() {
      const url = this.#url;
      if (url === null) return;
      const r = urlRecord(url);
      const s = formSerialize(this.#list);
      r.query = s === '' ? null : s;
      r.href = null;
    }

    get size() {
      return this.#list.length >> 1;
    }

    append(name, value) {
      requireArgs(arguments.length, 2, "Failed to execute 'append' on 'URLSearchParams'");
      this.#list.push(toUSV(name), toUSV(value));
      this.#update();
    }

    delete(name, value = undefined) {
      requireArgs(arguments.length, 1, "Failed to execute 'delete' on 'URLSearchParams'");
      const n = toUSV(name);
      const v = value === undefined ? undefined : toUSV(value);
      const list = this.#list;
      const out = [];
      for (let i = 0; i < list.length; i += 2) {
        if (list[i] === n && (v === undefined || list[i + 1] === v)) continue;
        out.push(list[i], list[i + 1]);
      }
      this.#list = out;
      this.#update();
    }

    get(name) {
      requireArgs(arguments.length, 1, "Failed to execute 'get' on 'URLSearchParams'");
      const n = toUSV(name);
      const list = this.#list;
      for (let i = 0; i < list.length; i += 2) if (list[i] === n) return list[i + 1];
      return null;
    }

    getAll(name) {
      requireArgs(arguments.length, 1, "Failed to execute 'getAll' on 'URLSearchParams'");
      const n = toUSV(name);
      const list = this.#list;
      const out = [];
      for (let i = 0; i < list.length; i += 2) if (list[i] === n) out.push(list[i + 1]);
      return out;
    }

    has(name, value = undefined) {
      requireArgs(arguments.length, 1, "Failed to execute 'has' on 'URLSearchParams'");
      const n = toUSV(name);
      const v = value === undefined ? undefined : toUSV(value);
      const list = this.#list;
      for (let i = 0; i < list.length; i += 2) {
        if (list[i] === n && (v === undefined || list[i + 1] === v)) return true;
      }
      return false;
    }

    set(name, value) {
      requireArgs(arguments.length, 2, "Failed to execute 'set' on 'URLSearchParams'");
      const n = toUSV(name);
      const v = toUSV(value);
      const list = this.#list;
      const out = [];
      let found = false;
      for (let i = 0; i < list.length; i += 2) {
        if (list[i] !== n) out.push(list[i], list[i + 1]);
        else if (!found) {
          found = true;
          out.push(n, v);
        }
      }
      if (!found) out.push(n, v);
      this.#list = out;
      this.#update();
    }

    sort() {
      const list = this.#list;
      const pairs = [];
      for (let i = 0; i < list.length; i += 2) pairs.push([list[i], list[i + 1]]);
      // Array.prototype.sort is stable; names compare by UTF-16 code units.
      pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      const out = [];
      for (const [n, v] of pairs) out.push(n, v);
      this.#list = out;
      this.#update();
    }

    forEach(callback, thisArg = undefined) {
      requireArgs(arguments.length, 1, "Failed to execute 'forEach' on 'URLSearchParams'");
      if (typeof callback !== 'function') {
        throw new TypeError("Failed to execute 'forEach' on 'URLSearchParams': The callback provided as parameter 1 is not a function.");
      }
      // Live iteration: the list may change under the callback.
      for (let i = 0; i < this.#list.length; i += 2) {
        const list = this.#list;
        ReflectApply(callback, thisArg, [list[i + 1], list[i], this]);
      }
    }

    keys() {
      return iteratorCreate(this, ITER_KEYS);
    }

    values() {
      return iteratorCreate(this, ITER_VALUES);
    }

    entries() {
      return iteratorCreate(this, ITER_ENTRIES);
    }

    toString() {
      return formSerialize(this.#list);
    }
  }

  const IteratorPrototype = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]()));

  class URLSearchParamsIterator {
    #source;
    #kind;
    #index = 0;

    constructor(source, kind) {
      this.#source = source;
      this.#kind = kind;
    }

    next() {
      const list = this.#source();
      const i = this.#index;
      if (i >= list.length) return { value: undefined, done: true };
      this.#index = i + 2;
      const kind = this.#kind;
      const value = kind === ITER_KEYS ? list[i] : kind === ITER_VALUES ? list[i + 1] : [list[i], list[i + 1]];
      return { value, done: false };
    }
  }
  Object.setPrototypeOf(URLSearchParamsIterator.prototype, IteratorPrototype);
  // The iterator prototype has no constructor of its own in WebIDL; the
  // class must not be reachable from tenant code.
  delete URLSearchParamsIterator.prototype.constructor;

  webidlShape(URLSearchParams, 'URLSearchParams');
  Reflect.defineProperty(URLSearchParams.prototype, Symbol.iterator, {
    value: URLSearchParams.prototype.entries, writable: true, configurable: true,
  });
  Reflect.defineProperty(URLSearchParamsIterator.prototype, 'next', { enumerable: true });
  Reflect.defineProperty(URLSearchParamsIterator.prototype, Symbol.toStringTag, {
    value: 'URLSearchParams Iterator', configurable: true,
  });

  Reflect.defineProperty(globalThis, 'URLSearchParams', {
    value: URLSearchParams, writable: true, configurable: true, enumerable: false,
  });
  return URLSearchParams;
})();
