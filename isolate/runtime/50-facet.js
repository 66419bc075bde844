// The facet binding: a worker's own SQLite database, with the API of
// Durable Objects' SQL storage (ctx.storage.sql) so that code carries over:
//
//   env.DB.exec(sql, ...params)  -> a cursor over the last statement's rows
//   env.DB.transactionSync(fn)   -> fn's result; commits when fn returns,
//                                   rolls back when it throws (nested: savepoints)
//   env.DB.databaseSize          -> bytes
//
// The host (facets/ in C) runs each exec to completion and sends back one
// flat array, [n, n column names, values (row-major), rowsRead, rowsWritten],
// or just [rowsRead, rowsWritten] for a statement without columns, which
// arrive in native.directNumbers() (no array is built for a write); rows
// become objects only when read. A statement run again crosses as the id of its
// prepared statement instead of its text.
//
// Takes from
//   00-util.js: lazyFragment, isArrayBuffer, isSharedArrayBuffer, kPrivate,
//     defineIteratorInterface, defineInterface
//   45-hostcalls.js: hostError, hostCallSync, bindingFactories

const facetArrayBufferIsView = ArrayBuffer.isView;
const facetMinInt64 = -(2n ** 63n);
const facetMaxInt64 = 2n ** 63n - 1n;

// Evaluated when a worker first gets this binding (lazyFragment,
// 00-util.js); the body is not indented.
const facetFragment = lazyFragment(() => {
// The cursor's row-as-array step, for the raw iterator only.
const kFacetNextRaw = Symbol('nextRaw');
// SQL texts a binding remembers (see SqlStorage#ids); past this it forgets
// them all, so SQL built with values inside costs no memory.
const kFacetTextsMax = 256;
// Where a statement without columns leaves [rowsRead, rowsWritten]: the
// host call then answers 2 (hostcalls.cc, callSyncNumbers).
const facetNumbers = native.directNumbers();
// The host call, read off `native` once: that object has too many
// properties for V8 to keep them fast, and optimized code read this one
// through the generic load builtin on every exec. (The native ignores its
// receiver.)
const facetCallNumbers = native.callSyncNumbers;

// Checks one exec() parameter before anything crosses to the host; the
// TypeError names its 1-based position and its typeof ("object" for arrays,
// Dates and plain objects alike).
function facetCheckParam(value, index) {
  switch (typeof value) {
    case 'string':
    case 'number':
    case 'boolean':
    case 'undefined':
      return;
    case 'bigint':
      if (value < facetMinInt64 || value > facetMaxInt64) {
        throw new TypeError(`parameter ${index + 1}: BigInt is outside the 64-bit integer range`);
      }
      return;
    case 'object':
      if (value === null || isArrayBuffer(value)) return;
      if (facetArrayBufferIsView(value) && !isSharedArrayBuffer(value.buffer)) return;
      break;
    default:
      break;
  }
  throw new TypeError(`parameter ${index + 1} has unsupported type ${typeof value}`);
}

// The host's exec of `sql` (an id or a text) with the parameters of an
// exec() call, `call` being that call's arguments (its first one, the text,
// left out): its result, or its error thrown as an Error. The direct host
// call takes the arguments as they are and answers the bare value: no
// [ok, value] pair on the way, which is most of a small call's cost.
function facetExec(name, sql, call) {
  try {
    // Calls of fixed arity build no array: a spread into a native function
    // is slower.
    switch (call.length) {
      case 1: return facetCallNumbers(name, 'exec', sql);
      case 2: return facetCallNumbers(name, 'exec', sql, call[1]);
      case 3: return facetCallNumbers(name, 'exec', sql, call[1], call[2]);
      case 4: return facetCallNumbers(name, 'exec', sql, call[1], call[2], call[3]);
      default: {
        const args = [sql];
        for (let i = 1; i < call.length; i++) args.push(call[i]);
        return facetCallNumbers(name, 'exec', ...args);
      }
    }
  } catch (err) {
    throw err instanceof Error ? err : hostError(err);
  }
}

function facetNoRows(kind) {
  return new Error(`Expected exactly one result from SQL query, but got ${kind} results.`);
}

// Iterates the rows of a cursor as arrays (cursor.raw()); shares the
// cursor's position.
class SqlStorageRawIterator {
  #cursor;

  constructor(key, cursor) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#cursor = cursor;
  }

  next() {
    const row = this.#cursor[kFacetNextRaw]();
    return row === undefined ? { value: undefined, done: true } : { value: row, done: false };
  }

  toArray() {
    const out = [];
    for (let row; (row = this.#cursor[kFacetNextRaw]()) !== undefined;) out.push(row);
    return out;
  }

  [Symbol.iterator]() {
    return this;
  }
}
defineIteratorInterface(SqlStorageRawIterator, 'SqlStorageRawIterator');

class SqlStorageCursor {
  // The host's answer as it came, [n, columns, values, rowsRead,
  // rowsWritten], or null for a statement without columns; rows are made
  // when asked, so that a write's cursor is cheap to make.
  #result = null;
  #width = 0;  // columns
  #rows = 0;
  #pos = 0;
  #plainKeys;  // no column is named "__proto__": rows can be built by assignment
  #rowsRead;
  #rowsWritten;

  // `answer` is facetExec's: an array, or 2 with the counts in facetNumbers.
  constructor(key, answer) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    if (typeof answer === 'number') {
      if (answer !== 2) throw new Error(`the facet host answered ${answer} numbers, not 2`);
      this.#rowsRead = facetNumbers[0];
      this.#rowsWritten = facetNumbers[1];
      return;
    }
    const width = answer[0];
    const n = answer.length;
    this.#result = answer;
    this.#width = width;
    this.#rows = (n - 3 - width) / width;
    this.#rowsRead = answer[n - 2];
    this.#rowsWritten = answer[n - 1];
  }

  // (Only called while rows are left: the result has columns.) Column c is
  // at 1 + c, and row i's values start at 1 + width * (i + 1).
  #rowObject(i) {
    const result = this.#result;
    const width = this.#width;
    const base = 1 + width * (i + 1);
    const row = {};
    if (this.#plainKeys === undefined) {
      this.#plainKeys = true;
      for (let c = 0; c < width; c++) if (result[1 + c] === '__proto__') this.#plainKeys = false;
    }
    if (this.#plainKeys) {
      for (let c = 0; c < width; c++) row[result[1 + c]] = result[base + c];
    } else {
      for (let c = 0; c < width; c++) {
        Object.defineProperty(row, result[1 + c], {
          value: result[base + c], writable: true, enumerable: true, configurable: true,
        });
      }
    }
    return row;
  }

  [kFacetNextRaw]() {
    if (this.#pos >= this.#rows) return undefined;
    const base = 1 + this.#width * (++this.#pos);
    return this.#result.slice(base, base + this.#width);
  }

  next() {
    if (this.#pos >= this.#rows) return { value: undefined, done: true };
    return { value: this.#rowObject(this.#pos++), done: false };
  }

  toArray() {
    const out = [];
    while (this.#pos < this.#rows) out.push(this.#rowObject(this.#pos++));
    return out;
  }

  one() {
    const left = this.#rows - this.#pos;
    if (left === 0) throw facetNoRows('no');
    if (left > 1) throw facetNoRows('multiple');
    return this.#rowObject(this.#pos++);
  }

  raw() {
    return new SqlStorageRawIterator(kPrivate, this);
  }

  get columnNames() {
    const result = this.#result;
    return result === null ? [] : result.slice(1, 1 + this.#width);
  }

  get rowsRead() {
    return this.#rowsRead;
  }

  get rowsWritten() {
    return this.#rowsWritten;
  }

  [Symbol.iterator]() {
    return this;
  }
}
defineInterface(SqlStorageCursor, 'SqlStorageCursor');

// A rollback after fn threw: fn's exception is the one that matters.
function facetRollbackQuietly(name) {
  try {
    hostCallSync(name, 'rollback', []);
  } catch {
    // the host already dropped the transaction (an earlier failure)
  }
}

class SqlStorage {
  #name;
  // SQL text -> how exec sends it: an id the host gave for its prepared
  // statement (a number > 0), 0 once seen (asked for an id the second time:
  // text run once costs no extra call), -1 never an id (several statements).
  // An id crosses as 9 bytes, and the host finds it without hashing the text.
  #ids = new Map();
  #lastText;  // the text exec() ran by its id last, and that id
  #lastId = 0;

  constructor(key, name) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#name = name;
  }

  // (Written against `arguments`, not a rest parameter: a few parameters
  // reach the host without any array made for them.)
  exec(query) {
    if (typeof query !== 'string') {
      throw new TypeError('exec() needs the SQL text as its first argument (a string)');
    }
    const n = arguments.length;
    for (let i = 1; i < n; i++) {
      // Strings and numbers, most parameters, are checked here, without a call.
      // (Each typeof compared where it is made: optimized code then tests
      // the value's type in place instead of calling V8's typeof.)
      const value = arguments[i];
      if (typeof value !== 'string' && typeof value !== 'number') facetCheckParam(value, i - 1);
    }
    const ids = this.#ids;
    // A loop runs one text again and again: the last one's id is kept
    // beside the map, and comparing the same string is one pointer check.
    let id = query === this.#lastText ? this.#lastId : ids.get(query);
    if (id === 0) id = this.#prepare(query);
    if (id > 0) {
      const answer = facetExec(this.#name, id, arguments);
      if (answer !== null) {
        if (query !== this.#lastText) {  // (a loop's next exec stores nothing)
          this.#lastText = query;
          this.#lastId = id;
        }
        return new SqlStorageCursor(kPrivate, answer);
      }
      ids.delete(query);  // the host's cache let the statement go
      this.#lastText = undefined;
    } else if (id === undefined) {
      if (ids.size >= kFacetTextsMax) ids.clear();
      ids.set(query, 0);
    }
    return new SqlStorageCursor(kPrivate, facetExec(this.#name, query, arguments));
  }

  // The host's id for query's statement, or 0 for the text (the map says
  // what to do next time).
  #prepare(query) {
    const id = hostCallSync(this.#name, 'prepare', [query]);
    if (id === false) {
      this.#ids.delete(query);  // does not compile now; a table may come later
      return 0;
    }
    this.#ids.set(query, id === null ? -1 : id);
    return id === null ? 0 : id;
  }

  transactionSync(closure) {
    const name = this.#name;
    if (typeof closure !== 'function') {
      throw new TypeError('transactionSync() needs a function');
    }
    hostCallSync(name, 'begin', []);
    let result;
    try {
      result = closure();
    } catch (err) {
      facetRollbackQuietly(name);
      throw err;
    }
    if (result instanceof Promise) {
      facetRollbackQuietly(name);
      throw new TypeError('transactionSync() callback must be synchronous (it returned a ' +
                          'promise); the transaction was rolled back');
    }
    hostCallSync(name, 'commit', []);
    return result;
  }

  get databaseSize() {
    return hostCallSync(this.#name, 'size', []);
  }
}
defineInterface(SqlStorage, 'SqlStorage');

return { SqlStorage };
});

bindingFactories.facet = (name) => new (facetFragment().SqlStorage)(kPrivate, name);
