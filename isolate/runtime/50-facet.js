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
// exec() is kept small enough for V8 to compile it into a caller's loop
// (docs/benchmarks.md, facets): only the loop's case, the text run last
// with up to three plain parameters, is in it; everything else is in
// SqlStorage#execMore.
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
// What SqlStorage#lastText holds when no text ran by its id last.
const kFacetNoText = Symbol('no text');
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

// What a host call threw, as JavaScript sees it.
function facetError(err) {
  return err instanceof Error ? err : hostError(err);
}

// Whether exec() passes a parameter to the host without a check of its own:
// what the host's direct path takes as it is.
function facetPlain(value) {
  return typeof value === 'string' || typeof value === 'number' || value == null ||
    typeof value === 'boolean';
}

// The host's exec of `sql` (an id or a text) with n - 1 parameters, at most
// three: its result, or its error thrown as an Error. The direct host call
// takes the arguments as they are and answers the bare value: no [ok, value]
// pair on the way, which is most of a small call's cost.
function facetCall(name, sql, n, p1, p2, p3) {
  try {
    // Calls of fixed arity: a spread into a native function is slower.
    return n === 2 ? facetCallNumbers(name, 'exec', sql, p1)
      : n === 1 ? facetCallNumbers(name, 'exec', sql)
        : n === 3 ? facetCallNumbers(name, 'exec', sql, p1, p2)
          : facetCallNumbers(name, 'exec', sql, p1, p2, p3);
  } catch (err) {
    throw facetError(err);
  }
}

// The same with `params` (checked), any number of them.
function facetExec(name, sql, params) {
  if (params.length <= 3) {
    return facetCall(name, sql, params.length + 1, params[0], params[1], params[2]);
  }
  try {
    return facetCallNumbers(name, 'exec', sql, ...params);
  } catch (err) {
    throw facetError(err);
  }
}

// exec()'s own call (n at most 4): facetCall's answer, or undefined, with
// nothing run, when a parameter is not one the host takes as it is.
function facetRun(name, id, n, p1, p2, p3) {
  if (!facetPlain(p1) || !facetPlain(p2) || !facetPlain(p3)) return undefined;
  return facetCall(name, id, n, p1, p2, p3);
}

// The cursor over a host's answer: 2 with the counts in facetNumbers, or
// the array of a result with columns. (One place makes cursors: exec() stays
// small enough to be compiled into its caller.)
function facetCursor(answer) {
  let result = null, rowsRead, rowsWritten;
  if (typeof answer === 'number') {
    if (answer !== 2) throw new Error(`the facet host answered ${answer} numbers, not 2`);
    rowsRead = facetNumbers[0];
    rowsWritten = facetNumbers[1];
  } else {
    result = answer;
    rowsRead = answer[answer.length - 2];
    rowsWritten = answer[answer.length - 1];
  }
  return new SqlStorageCursor(kPrivate, result, rowsRead, rowsWritten);
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
  // The host's answer as it came, [width, columns, values, rowsRead,
  // rowsWritten], or null for a statement without columns; rows are made
  // when asked, so that a write's cursor is cheap to make (five fields).
  #result;
  #pos = 0;
  #plainKeys;  // no column is named "__proto__": rows can be built by assignment
  #rowsRead;
  #rowsWritten;

  constructor(key, result, rowsRead, rowsWritten) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#result = result;
    this.#rowsRead = rowsRead;
    this.#rowsWritten = rowsWritten;
  }

  // Rows in the result (a result has at least one column).
  #rows() {
    const result = this.#result;
    return result === null ? 0 : (result.length - 3 - result[0]) / result[0];
  }

  // (Only called while rows are left: the result has columns.) Column c is
  // at 1 + c, and row i's values start at 1 + width * (i + 1).
  #rowObject(i) {
    const result = this.#result;
    const width = result[0];
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
    if (this.#pos >= this.#rows()) return undefined;
    const width = this.#result[0];
    const base = 1 + width * (++this.#pos);
    return this.#result.slice(base, base + width);
  }

  next() {
    if (this.#pos >= this.#rows()) return { value: undefined, done: true };
    return { value: this.#rowObject(this.#pos++), done: false };
  }

  toArray() {
    const out = [];
    const rows = this.#rows();
    while (this.#pos < rows) out.push(this.#rowObject(this.#pos++));
    return out;
  }

  one() {
    const left = this.#rows() - this.#pos;
    if (left === 0) throw facetNoRows('no');
    if (left > 1) throw facetNoRows('multiple');
    return this.#rowObject(this.#pos++);
  }

  raw() {
    return new SqlStorageRawIterator(kPrivate, this);
  }

  get columnNames() {
    const result = this.#result;
    return result === null ? [] : result.slice(1, 1 + result[0]);
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
  // The text exec() ran by its id last, and that id; kFacetNoText (which no
  // argument can be) when there is none.
  #lastText = kFacetNoText;
  #lastId = 0;

  constructor(key, name) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#name = name;
  }

  // The loop's case only (see the top of this file): `arguments` is read by
  // its length and elements and never passed on, so that V8 makes no object
  // of it; the rest go to #execMore, with their parameters copied out.
  exec(query) {
    const n = arguments.length;
    // (The same string as last time is one pointer comparison.)
    if (query === this.#lastText && n <= 4) {
      const answer = facetRun(this.#name, this.#lastId, n, arguments[1], arguments[2],
                              arguments[3]);
      if (answer !== undefined && answer !== null) return facetCursor(answer);
      // null: the host's cache let the statement go, and the text runs again.
      if (answer === null) this.#forget(query);
    }
    const params = [];
    for (let i = 1; i < n; i++) params.push(arguments[i]);
    return this.#execMore(query, params);
  }

  // The statement of `query` left the host's cache: its text is sent next.
  #forget(query) {
    this.#ids.delete(query);
    this.#lastText = kFacetNoText;
  }

  // exec() of anything but the loop's case.
  #execMore(query, params) {
    if (typeof query !== 'string') {
      throw new TypeError('exec() needs the SQL text as its first argument (a string)');
    }
    for (let i = 0; i < params.length; i++) facetCheckParam(params[i], i);
    const ids = this.#ids;
    let id = query === this.#lastText ? this.#lastId : ids.get(query);
    if (id === 0) id = this.#prepare(query);
    if (id > 0) {
      const answer = facetExec(this.#name, id, params);
      if (answer !== null) {
        this.#lastText = query;
        this.#lastId = id;
        return facetCursor(answer);
      }
      this.#forget(query);
    } else if (id === undefined) {
      if (ids.size >= kFacetTextsMax) ids.clear();
      ids.set(query, 0);
    }
    return facetCursor(facetExec(this.#name, query, params));
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
