// The facet binding: a worker's own SQLite database, with the API of
// Durable Objects' SQL storage (ctx.storage.sql) so that code carries over:
//
//   env.DB.exec(sql, ...params)  -> a cursor over the last statement's rows
//   env.DB.transactionSync(fn)   -> fn's result; commits when fn returns,
//                                   rolls back when it throws (nested: savepoints)
//   env.DB.databaseSize          -> bytes
//
// The host (facets/ in C) runs each exec to completion and sends back
// [columnNames, values (row-major), rowsRead, rowsWritten], or just
// [rowsRead, rowsWritten] for a statement without columns; rows become
// objects only when read.

const facetArrayBufferIsView = ArrayBuffer.isView;
const facetMinInt64 = -(2n ** 63n);
const facetMaxInt64 = 2n ** 63n - 1n;
// The cursor's row-as-array step, for the raw iterator only.
const kFacetNextRaw = Symbol('nextRaw');
// Columns and values of statements without columns (never handed out).
const facetNoColumns = Object.freeze([]);

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
  #columns;
  #values;
  #width;
  #rows;
  #pos = 0;
  #rowsRead;
  #rowsWritten;
  #plainKeys;  // no column is named "__proto__": rows can be built by assignment

  constructor(key, result) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    if (result.length === 2) {
      this.#columns = facetNoColumns;
      this.#values = facetNoColumns;
      this.#width = 0;
      this.#rows = 0;
      this.#rowsRead = result[0];
      this.#rowsWritten = result[1];
      this.#plainKeys = true;
      return;
    }
    const columns = result[0];
    this.#columns = columns;
    this.#values = result[1];
    this.#width = columns.length;
    this.#rows = result[1].length / columns.length;
    this.#rowsRead = result[2];
    this.#rowsWritten = result[3];
    this.#plainKeys = !columns.includes('__proto__');
  }

  #rowObject(i) {
    const columns = this.#columns;
    const values = this.#values;
    const base = i * this.#width;
    const row = {};
    if (this.#plainKeys) {
      for (let c = 0; c < columns.length; c++) row[columns[c]] = values[base + c];
    } else {
      for (let c = 0; c < columns.length; c++) {
        Object.defineProperty(row, columns[c], {
          value: values[base + c], writable: true, enumerable: true, configurable: true,
        });
      }
    }
    return row;
  }

  [kFacetNextRaw]() {
    if (this.#pos >= this.#rows) return undefined;
    const base = this.#pos++ * this.#width;
    return this.#values.slice(base, base + this.#width);
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
    return this.#columns.slice();
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

  constructor(key, name) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#name = name;
  }

  exec(query, ...bindings) {
    if (typeof query !== 'string') {
      throw new TypeError('exec() needs the SQL text as its first argument (a string)');
    }
    for (let i = 0; i < bindings.length; i++) facetCheckParam(bindings[i], i);
    // (Array.prototype.unshift is a slow builtin; a spread is not.)
    return new SqlStorageCursor(kPrivate, hostCallSync(this.#name, 'exec', [query, ...bindings]));
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

bindingFactories.facet = (name, config) => new SqlStorage(kPrivate, name);
