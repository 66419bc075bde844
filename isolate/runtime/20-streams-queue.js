// WHATWG Streams, first part: what every kind of stream is built on (the
// queue of chunks with their sizes, promises with their resolvers, the
// strategy an underlying source or sink gives) and the two queuing
// strategies, ByteLengthQueuingStrategy and CountQueuingStrategy.
//
// The streams are one fragment made on first use (25-streams.js), written
// in parts, 20- to 24-streams-*.js: each part is one function, called once
// by that fragment when it is made, that takes the exports of the parts
// before it and returns its own. Their bodies are not indented.
//
// Takes from
//   00-util.js: toDictionary, requireArgs, defineInterface

// A promise nobody may be waiting on: its rejection is not reported as
// unhandled. Outside the parts: compression and fetch() use it too.
function markHandled(promise) {
  promise.then(undefined, () => {});
  return promise;
}

function makeStreamsQueue() {

// A promise with its resolving functions, and whether it has settled.
function newDeferred() {
  const d = { promise: null, resolve: null, reject: null, settled: false };
  d.promise = new Promise((res, rej) => {
    d.resolve = (v) => {
      d.settled = true;
      res(v);
    };
    d.reject = (e) => {
      d.settled = true;
      rej(e);
    };
  });
  return d;
}

// Calls method `name` of a tenant-supplied object (an underlying source,
// sink or transformer) and returns a promise of its result.
function promiseCall(obj, fn, args) {
  if (fn === undefined) return Promise.resolve();
  try {
    return Promise.resolve(fn.apply(obj, args));
  } catch (err) {
    return Promise.reject(err);
  }
}

function optionalMethod(obj, name, what) {
  if (obj === null) return undefined;
  const fn = obj[name];
  if (fn === undefined || fn === null) return undefined;
  if (typeof fn !== 'function') throw new TypeError(`${what}.${name} must be a function.`);
  return fn;
}

function strategyFrom(strategy, defaultHWM) {
  const s = toDictionary(strategy, 'The queuing strategy');
  let hwm = defaultHWM;
  let size = null;
  if (s !== null) {
    if (s.highWaterMark !== undefined) {
      hwm = Number(s.highWaterMark);
      if (Number.isNaN(hwm) || hwm < 0) throw new RangeError('The highWaterMark must be a non-negative number.');
    }
    if (s.size !== undefined) {
      if (typeof s.size !== 'function') throw new TypeError('The queuing strategy size must be a function.');
      const fn = s.size;
      size = (chunk) => fn(chunk);
    }
  }
  return { hwm, size };
}

// A queue of [chunk, size] with O(1) dequeue.
class ValueQueue {
  constructor() {
    this.items = [];
    this.sizes = [];
    this.head = 0;
    this.total = 0;
  }

  get length() {
    return this.items.length - this.head;
  }

  push(chunk, size) {
    if (typeof size !== 'number' || Number.isNaN(size) || size < 0 || size === Infinity) {
      throw new RangeError('The return value of a queuing strategy size function must be a finite, non-negative number.');
    }
    this.items.push(chunk);
    this.sizes.push(size);
    this.total += size;
  }

  shift() {
    const chunk = this.items[this.head];
    this.total -= this.sizes[this.head];
    if (this.total < 0) this.total = 0;
    this.items[this.head] = undefined;
    this.head++;
    if (this.head === this.items.length) {
      this.items = [];
      this.sizes = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.sizes = this.sizes.slice(this.head);
      this.head = 0;
    }
    return chunk;
  }

  peek() {
    return this.items[this.head];
  }

  reset() {
    this.items = [];
    this.sizes = [];
    this.head = 0;
    this.total = 0;
  }
}


// Queuing strategies -------------------------------------------------------------

const byteLengthSize = { size(chunk) { return chunk.byteLength; } }.size;
const countSize = { size() { return 1; } }.size;

class ByteLengthQueuingStrategy {
  #hwm;

  constructor(init) {
    requireArgs(arguments.length, 1, 'constructor', 'ByteLengthQueuingStrategy');
    const o = toDictionary(init, 'The init argument');
    if (o === null || o.highWaterMark === undefined) {
      throw new TypeError("Failed to construct 'ByteLengthQueuingStrategy': required member highWaterMark is undefined.");
    }
    this.#hwm = Number(o.highWaterMark);
  }

  get highWaterMark() {
    return this.#hwm;
  }

  get size() {
    return byteLengthSize;
  }
}
defineInterface(ByteLengthQueuingStrategy, 'ByteLengthQueuingStrategy');

class CountQueuingStrategy {
  #hwm;

  constructor(init) {
    requireArgs(arguments.length, 1, 'constructor', 'CountQueuingStrategy');
    const o = toDictionary(init, 'The init argument');
    if (o === null || o.highWaterMark === undefined) {
      throw new TypeError("Failed to construct 'CountQueuingStrategy': required member highWaterMark is undefined.");
    }
    this.#hwm = Number(o.highWaterMark);
  }

  get highWaterMark() {
    return this.#hwm;
  }

  get size() {
    return countSize;
  }
}
defineInterface(CountQueuingStrategy, 'CountQueuingStrategy');

return {
  ValueQueue, newDeferred, promiseCall, optionalMethod, strategyFrom, byteLengthSize,
  ByteLengthQueuingStrategy, CountQueuingStrategy,
};
}
