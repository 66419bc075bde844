// console: util.format-style formatting and a compact, safe inspector.
//
// The inspector never calls getters or tenant methods on the values it shows
// (it reads property descriptors), stops at a depth limit, marks cycles and
// renders everything on one line: the output becomes one JSON log record.
//
// Takes from
//   00-util.js: constructorNameOf, hexByte, inspectHooks, typedArrayKind, isAnyArrayBuffer,
//     isSharedArrayBuffer, isObjectLike, kPrivate, defineGlobal
//   08-clock.js: performanceNow

const inspectDefaultDepth = 2;
const inspectMaxArrayItems = 100;
// Past this length the index positions are not all walked, nor are own
// keys listed beside the items (Reflect.ownKeys would name every index: a
// million-item array cost seconds to log).
const inspectMaxArrayScan = 10000;
const inspectMaxBytes = 50;
const inspectMaxStringLength = 10000;
const identifierKeyRe = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const classSourceRe = /^class\b/;

const errorToString = Error.prototype.toString;
const functionToString = Function.prototype.toString;
const mapSize = Object.getOwnPropertyDescriptor(Map.prototype, 'size').get;
const setSize = Object.getOwnPropertyDescriptor(Set.prototype, 'size').get;
const mapEntries = Map.prototype.entries;
const setValues = Set.prototype.values;
const dateGetTime = Date.prototype.getTime;
const dateToISOString = Date.prototype.toISOString;
const regExpToString = RegExp.prototype.toString;
const regExpSource = Object.getOwnPropertyDescriptor(RegExp.prototype, 'source').get;
const weakMapHas = WeakMap.prototype.has;
const weakSetHas = WeakSet.prototype.has;
const numberValueOf = Number.prototype.valueOf;
const stringValueOf = String.prototype.valueOf;
const booleanValueOf = Boolean.prototype.valueOf;
const symbolValueOf = Symbol.prototype.valueOf;
const bigIntValueOf = BigInt.prototype.valueOf;
const symbolToString = Symbol.prototype.toString;
const dataViewByteLength = Object.getOwnPropertyDescriptor(DataView.prototype, 'byteLength').get;

// Names whose toString counts as built-in for %s (as util.format does).
const builtinConstructorNames = new Set([
  'Object', 'Array', 'Error', 'EvalError', 'RangeError', 'ReferenceError', 'SyntaxError',
  'TypeError', 'URIError', 'AggregateError', 'Date', 'RegExp', 'Map', 'Set', 'WeakMap',
  'WeakSet', 'Promise', 'ArrayBuffer', 'SharedArrayBuffer', 'DataView', 'Int8Array',
  'Uint8Array', 'Uint8ClampedArray', 'Int16Array', 'Uint16Array', 'Int32Array',
  'Uint32Array', 'Float32Array', 'Float64Array', 'BigInt64Array', 'BigUint64Array',
  'Function', 'Boolean', 'Number', 'String', 'Symbol', 'BigInt',
]);

// `v instanceof C` first: a failing brand check throws, and a throw costs
// a stack capture; most objects logged are none of these.
function isBuiltin(C, fn, v, arg) {
  return v instanceof C && brandCheck(fn, v, arg);
}

function brandCheck(fn, v, arg) {
  try {
    fn.call(v, arg);
    return true;
  } catch {
    return false;
  }
}

function quoteString(s) {
  let quote = "'";
  if (s.includes("'")) {
    if (!s.includes('"')) quote = '"';
    else if (!s.includes('`') && !s.includes('${')) quote = '`';
  }
  let out = '';
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let esc = null;
    if (c < 0x20 || c === 0x7f) {
      if (c === 10) esc = '\\n';
      else if (c === 9) esc = '\\t';
      else if (c === 13) esc = '\\r';
      else if (c === 8) esc = '\\b';
      else if (c === 12) esc = '\\f';
      else if (c === 11) esc = '\\v';
      else esc = '\\x' + (c < 16 ? '0' : '') + c.toString(16).toUpperCase();
    } else if (c === 92) {
      esc = '\\\\';
    } else if (c === quote.charCodeAt(0)) {
      esc = '\\' + quote;
    } else if (c >= 0xd800 && c <= 0xdfff) {
      const pair = c <= 0xdbff && i + 1 < s.length &&
        s.charCodeAt(i + 1) >= 0xdc00 && s.charCodeAt(i + 1) <= 0xdfff;
      if (pair) {
        i++;
        continue;
      }
      esc = '\\u' + c.toString(16).toUpperCase();
    }
    if (esc !== null) {
      out += s.slice(from, i) + esc;
      from = i + 1;
    }
  }
  return quote + out + s.slice(from) + quote;
}

function formatNumber(n) {
  return Object.is(n, -0) ? '-0' : `${n}`;
}

function formatPrimitive(v, top) {
  switch (typeof v) {
    case 'string':
      if (top) return v;
      if (v.length > inspectMaxStringLength) {
        const more = v.length - inspectMaxStringLength;
        return quoteString(v.slice(0, inspectMaxStringLength)) +
          `... ${more} more character${more > 1 ? 's' : ''}`;
      }
      return quoteString(v);
    case 'number':
      return formatNumber(v);
    case 'bigint':
      return `${v}n`;
    case 'symbol':
      return symbolToString.call(v);
    default:
      return `${v}`; // undefined, boolean
  }
}

function formatKey(key) {
  if (typeof key === 'symbol') return `[${symbolToString.call(key)}]`;
  return identifierKeyRe.test(key) ? key : quoteString(key);
}

class InspectContext {
  constructor(depth) {
    this.depth = depth;
    this.seen = [];
    this.circular = null; // Map object -> reference number, when cycles exist
  }
}

function inspectValue(value, depth = inspectDefaultDepth) {
  try {
    return formatValue(new InspectContext(depth), value, 0);
  } catch (err) {
    // A Proxy trap, a revoked Proxy or stack exhaustion: say so, do not throw.
    return '[object that could not be inspected]';
  }
}

function formatValue(ctx, v, level) {
  if ((typeof v !== 'object' || v === null) && typeof v !== 'function') {
    return formatPrimitive(v, false);
  }
  if (ctx.seen.includes(v)) {
    if (ctx.circular === null) ctx.circular = new Map();
    let ref = ctx.circular.get(v);
    if (ref === undefined) {
      ref = ctx.circular.size + 1;
      ctx.circular.set(v, ref);
    }
    return `[Circular *${ref}]`;
  }
  ctx.seen.push(v);
  let out;
  try {
    out = formatObject(ctx, v, level);
  } finally {
    ctx.seen.pop();
  }
  if (ctx.circular !== null) {
    const ref = ctx.circular.get(v);
    if (ref !== undefined) out = `<ref *${ref}> ${out}`;
  }
  return out;
}

function ownEntries(ctx, v, level, skip) {
  const parts = [];
  const keys = Reflect.ownKeys(v);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    if (skip !== null && typeof key === 'string' && skip(key)) continue;
    const desc = Reflect.getOwnPropertyDescriptor(v, key);
    if (desc === undefined || !desc.enumerable) continue;
    parts.push(`${formatKey(key)}: ${formatProperty(ctx, desc, level)}`);
  }
  return parts;
}

function formatProperty(ctx, desc, level) {
  if ('value' in desc) return formatValue(ctx, desc.value, level + 1);
  if (desc.get !== undefined) return desc.set !== undefined ? '[Getter/Setter]' : '[Getter]';
  return desc.set !== undefined ? '[Setter]' : 'undefined';
}

function braces(prefix, parts, open = '{', close = '}') {
  const head = prefix === '' ? '' : prefix + ' ';
  if (parts.length === 0) return `${head}${open}${close}`;
  return `${head}${open} ${parts.join(', ')} ${close}`;
}

const isArrayIndexRe = /^(?:0|[1-9][0-9]*)$/;

function isIndexKey(key) {
  return isArrayIndexRe.test(key) && Number(key) < 4294967295;
}

function stringTagOf(v) {
  let proto = v;
  for (let depth = 0; proto !== null && depth < 1000; depth++) {
    const desc = Object.getOwnPropertyDescriptor(proto, Symbol.toStringTag);
    if (desc !== undefined) return typeof desc.value === 'string' ? desc.value : '';
    proto = Object.getPrototypeOf(proto);
  }
  return '';
}

function classPrefix(v, fallback, size) {
  const proto = Object.getPrototypeOf(v);
  let name = constructorNameOf(v);
  if (proto === null) name = `[${fallback}: null prototype]`;
  else if (name === '') name = fallback;
  const tag = stringTagOf(v);
  if (size !== undefined) name += `(${size})`;
  if (tag !== '' && tag !== constructorNameOf(v)) name += ` [${tag}]`;
  return name;
}

function formatFunctionHead(fn) {
  let source = '';
  try {
    source = functionToString.call(fn);
  } catch {
    // Not a real function (a callable Proxy): treat as an ordinary one.
  }
  const nameDesc = Object.getOwnPropertyDescriptor(fn, 'name');
  const name = nameDesc !== undefined && typeof nameDesc.value === 'string' ? nameDesc.value : '';
  if (classSourceRe.test(source)) {
    let head = name === '' ? '[class (anonymous)' : `[class ${name}`;
    const parent = Object.getPrototypeOf(fn);
    if (parent !== Function.prototype && parent !== null) {
      const pn = Object.getOwnPropertyDescriptor(parent, 'name');
      if (pn !== undefined && typeof pn.value === 'string' && pn.value !== '') {
        head += ` extends ${pn.value}`;
      }
    }
    return head + ']';
  }
  let kind = stringTagOf(fn);
  if (kind !== 'AsyncFunction' && kind !== 'GeneratorFunction' &&
      kind !== 'AsyncGeneratorFunction') {
    kind = 'Function';
  }
  return name === '' ? `[${kind} (anonymous)]` : `[${kind}: ${name}]`;
}

function formatErrorHead(err) {
  let stack;
  const desc = Object.getOwnPropertyDescriptor(err, 'stack');
  if (desc !== undefined && 'value' in desc) stack = desc.value;
  else if (desc !== undefined) {
    // V8 keeps `stack` as an accessor pair on some errors; it is its own.
    try {
      stack = err.stack;
    } catch {
      stack = undefined;
    }
  }
  if (typeof stack === 'string' && stack !== '') return stack;
  let text;
  try {
    text = errorToString.call(err);
  } catch {
    text = 'Error';
  }
  return `[${text}]`;
}

function formatBytes(u8) {
  const n = Math.min(u8.length, inspectMaxBytes);
  const parts = [];
  for (let i = 0; i < n; i++) parts.push(hexByte[u8[i]]);
  let out = `<${parts.join(' ')}`;
  if (u8.length > n) out += ` ... ${u8.length - n} more byte${u8.length - n > 1 ? 's' : ''}`;
  return out + '>';
}

function formatObject(ctx, v, level) {
  // Runtime classes keep their state private; their hook tells what to show.
  for (let proto = Object.getPrototypeOf(v); proto !== null; proto = Object.getPrototypeOf(proto)) {
    const hook = inspectHooks.get(proto);
    if (hook !== undefined) {
      const name = constructorNameOf(v);
      if (level > ctx.depth) return `[${name}]`;
      let shown;
      try {
        shown = hook(v);
      } catch {
        break; // not really one of ours (a subclass built oddly): show it plainly
      }
      return formatHookResult(ctx, name, shown, level);
    }
  }

  if (typeof v === 'function') {
    const head = formatFunctionHead(v);
    if (level > ctx.depth) return head;
    const parts = ownEntries(ctx, v, level, null);
    return parts.length === 0 ? head : braces(head, parts);
  }

  if (Array.isArray(v)) {
    if (level > ctx.depth) return '[Array]';
    return formatArray(ctx, v, level);
  }

  const kind = ArrayBuffer.isView(v) ? typedArrayKind.call(v) : undefined;
  if (kind !== undefined) {
    const prefix = classPrefix(v, kind, v.length);
    if (level > ctx.depth) return `[${kind}]`;
    const n = Math.min(v.length, inspectMaxArrayItems);
    const parts = [];
    for (let i = 0; i < n; i++) parts.push(formatPrimitive(v[i], false));
    if (v.length > n) parts.push(`... ${v.length - n} more item${v.length - n > 1 ? 's' : ''}`);
    const extra = v.length > inspectMaxArrayScan ? [] : ownEntries(ctx, v, level, isIndexKey);
    return braces(prefix, parts.concat(extra), '[', ']');
  }

  if (level > ctx.depth) {
    const name = constructorNameOf(v);
    return `[${name === '' ? 'Object: null prototype' : name}]`;
  }

  if (isBuiltin(Map, mapSize, v)) {
    const parts = [];
    let i = 0;
    for (const [key, value] of mapEntries.call(v)) {
      if (i++ >= inspectMaxArrayItems) {
        parts.push('...');
        break;
      }
      parts.push(`${formatValue(ctx, key, level + 1)} => ${formatValue(ctx, value, level + 1)}`);
    }
    return braces(classPrefix(v, 'Map', mapSize.call(v)), parts.concat(ownEntries(ctx, v, level, null)));
  }
  if (isBuiltin(Set, setSize, v)) {
    const parts = [];
    let i = 0;
    for (const value of setValues.call(v)) {
      if (i++ >= inspectMaxArrayItems) {
        parts.push('...');
        break;
      }
      parts.push(formatValue(ctx, value, level + 1));
    }
    return braces(classPrefix(v, 'Set', setSize.call(v)), parts.concat(ownEntries(ctx, v, level, null)));
  }
  if (v instanceof Error) {
    const head = formatErrorHead(v);
    const parts = ownEntries(ctx, v, level, (k) => k === 'stack' || k === 'message');
    const cause = Object.getOwnPropertyDescriptor(v, 'cause');
    if (cause !== undefined && !cause.enumerable) {
      parts.push(`[cause]: ${formatProperty(ctx, cause, level)}`);
    }
    return parts.length === 0 ? head : braces(head, parts);
  }
  if (isBuiltin(Date, dateGetTime, v)) {
    const t = dateGetTime.call(v);
    const head = Number.isNaN(t) ? 'Invalid Date' : dateToISOString.call(v);
    const parts = ownEntries(ctx, v, level, null);
    return parts.length === 0 ? head : braces(head, parts);
  }
  if (isBuiltin(RegExp, regExpSource, v)) {
    const head = regExpToString.call(v);
    const parts = ownEntries(ctx, v, level, (k) => k === 'lastIndex');
    return parts.length === 0 ? head : braces(head, parts);
  }
  if (isAnyArrayBuffer(v)) {
    const shared = isSharedArrayBuffer(v);
    const bytes = new Uint8Array(v);
    const prefix = classPrefix(v, shared ? 'SharedArrayBuffer' : 'ArrayBuffer');
    return braces(prefix, [`[Uint8Contents]: ${formatBytes(bytes)}`, `byteLength: ${bytes.length}`]
      .concat(ownEntries(ctx, v, level, null)));
  }
  if (isBuiltin(DataView, dataViewByteLength, v)) {
    return braces(classPrefix(v, 'DataView'), [
      `byteLength: ${v.byteLength}`, `byteOffset: ${v.byteOffset}`,
      `buffer: ${formatValue(ctx, v.buffer, level + 1)}`,
    ].concat(ownEntries(ctx, v, level, null)));
  }
  if (isBuiltin(WeakMap, weakMapHas, v, {})) return braces(classPrefix(v, 'WeakMap'), ['<items unknown>']);
  if (isBuiltin(WeakSet, weakSetHas, v, {})) return braces(classPrefix(v, 'WeakSet'), ['<items unknown>']);
  const boxed = formatBoxed(v);
  if (boxed !== null) {
    const parts = ownEntries(ctx, v, level, boxed.startsWith('[String') ? isIndexKey : null);
    return parts.length === 0 ? boxed : braces(boxed, parts);
  }
  if (v instanceof Promise) {
    return braces(classPrefix(v, 'Promise'), ownEntries(ctx, v, level, null));
  }
  return braces(plainPrefix(v), ownEntries(ctx, v, level, null));
}

function plainPrefix(v) {
  const proto = Object.getPrototypeOf(v);
  if (proto === null) {
    const tag = stringTagOf(v);
    return tag === '' ? '[Object: null prototype]' : `[Object: null prototype] [${tag}]`;
  }
  const name = constructorNameOf(v);
  const tag = stringTagOf(v);
  if (name === 'Object') return tag === '' ? '' : `Object [${tag}]`;
  if (name === '') return tag === '' ? '' : `Object [${tag}]`;
  return tag !== '' && tag !== name ? `${name} [${tag}]` : name;
}

function formatBoxed(v) {
  if (isBuiltin(Number, numberValueOf, v)) return `[Number: ${formatNumber(numberValueOf.call(v))}]`;
  if (isBuiltin(String, stringValueOf, v)) return `[String: ${quoteString(stringValueOf.call(v))}]`;
  if (isBuiltin(Boolean, booleanValueOf, v)) return `[Boolean: ${booleanValueOf.call(v)}]`;
  if (isBuiltin(Symbol, symbolValueOf, v)) return `[Symbol: ${symbolToString.call(symbolValueOf.call(v))}]`;
  if (isBuiltin(BigInt, bigIntValueOf, v)) return `[BigInt: ${bigIntValueOf.call(v)}n]`;
  return null;
}

function formatArray(ctx, arr, level) {
  const parts = [];
  const len = arr.length;
  let shown = 0;
  let holes = 0;
  let i = 0;
  for (; i < len && shown < inspectMaxArrayItems && i < inspectMaxArrayScan; i++) {
    const desc = Reflect.getOwnPropertyDescriptor(arr, i);
    if (desc === undefined) {
      holes++;
      continue;
    }
    if (holes > 0) {
      parts.push(`<${holes} empty item${holes > 1 ? 's' : ''}>`);
      shown++;
      holes = 0;
    }
    parts.push(formatProperty(ctx, desc, level));
    shown++;
  }
  if (holes > 0) parts.push(`<${holes} empty item${holes > 1 ? 's' : ''}>`);
  if (i < len) parts.push(`... ${len - i} more item${len - i > 1 ? 's' : ''}`);
  const extra = len > inspectMaxArrayScan ? [] : ownEntries(ctx, arr, level, (k) => k === 'length' || isIndexKey(k));
  const name = constructorNameOf(arr);
  const prefix = name === 'Array' ? '' : name === '' ? '[Array: null prototype]' : `${name}(${len})`;
  return braces(prefix, parts.concat(extra), '[', ']');
}

function formatHookResult(ctx, name, shown, level) {
  if (shown === null || typeof shown !== 'object') {
    return `${name} ${formatValue(ctx, shown, level + 1)}`;
  }
  const parts = [];
  for (const key of Object.keys(shown)) {
    parts.push(`${formatKey(key)}: ${formatValue(ctx, shown[key], level + 1)}`);
  }
  return braces(name, parts);
}

function hasBuiltinToString(v) {
  let proto = v;
  for (let depth = 0; proto !== null && depth < 1000; depth++) {
    const desc = Object.getOwnPropertyDescriptor(proto, 'toString');
    if (desc !== undefined) {
      if (proto === v) return false; // its own toString
      const ctor = Object.getOwnPropertyDescriptor(proto, 'constructor');
      return ctor !== undefined && typeof ctor.value === 'function' &&
        builtinConstructorNames.has(ctor.value.name) && ctor.value.prototype === proto;
    }
    proto = Object.getPrototypeOf(proto);
  }
  return true;
}

function formatAsString(arg) {
  switch (typeof arg) {
    case 'number':
      return formatNumber(arg);
    case 'bigint':
      return `${arg}n`;
    case 'symbol':
      return symbolToString.call(arg);
    case 'object':
      if (arg === null) return 'null';
      try {
        if (hasBuiltinToString(arg)) return inspectValue(arg, 0);
      } catch {
        return inspectValue(arg, 0);
      }
      return `${arg}`;
    default:
      return `${arg}`;
  }
}

function formatJSON(arg) {
  try {
    const s = JSON.stringify(arg);
    return s === undefined ? 'undefined' : s;
  } catch (err) {
    if (err instanceof TypeError && /circular/i.test(err.message)) return '[Circular]';
    throw err;
  }
}

// util.format: printf-like directives in a leading string, then the rest of
// the arguments inspected and joined with spaces.
function formatLogArgs(args) {
  const n = args.length;
  if (n === 0) return '';
  const first = args[0];
  let out = '';
  let next = 0;
  if (typeof first === 'string') {
    next = 1;
    if (n === 1) return first;
    let from = 0;
    for (let i = 0; i < first.length - 1; i++) {
      if (first.charCodeAt(i) !== 37) continue; // '%'
      const d = first[i + 1];
      if (d === '%') {
        out += first.slice(from, i) + '%';
        from = i + 2;
        i++;
        continue;
      }
      if (next >= n) continue;
      let piece;
      switch (d) {
        case 's': piece = formatAsString(args[next]); break;
        case 'd': {
          const a = args[next];
          if (typeof a === 'bigint') piece = `${a}n`;
          else if (typeof a === 'symbol') piece = 'NaN';
          else piece = formatNumber(Number(a));
          break;
        }
        case 'i': {
          const a = args[next];
          if (typeof a === 'bigint') piece = `${a}n`;
          else if (typeof a === 'symbol') piece = 'NaN';
          else piece = formatNumber(parseInt(a));
          break;
        }
        case 'f': {
          const a = args[next];
          piece = typeof a === 'symbol' ? 'NaN' : formatNumber(parseFloat(a));
          break;
        }
        case 'j': piece = formatJSON(args[next]); break;
        case 'o': piece = inspectValue(args[next], 4); break;
        case 'O': piece = inspectValue(args[next]); break;
        case 'c': piece = ''; break;
        default: continue;
      }
      out += first.slice(from, i) + piece;
      from = i + 2;
      i++;
      next++;
    }
    out += first.slice(from);
  }
  for (; next < n; next++) {
    const a = args[next];
    if (out !== '' || next > 0) out += ' ';
    out += typeof a === 'string' ? a : inspectValue(a);
  }
  return out;
}

let consoleIndent = '';
const consoleCounts = new Map();
const consoleTimers = new Map();

function consoleWrite(level, message) {
  if (consoleIndent !== '') message = consoleIndent + message.split('\n').join('\n' + consoleIndent);
  try {
    native.log(level, message);
  } catch {
    // Logging must never break the caller.
  }
}

function consoleTableCell(v) {
  return typeof v === 'string' ? quoteString(v) : inspectValue(v, 0);
}

// console.table: a box table like Node's, falling back to log for primitives.
function renderTable(data, columns) {
  const rowKeys = [];
  const rows = [];
  const cols = [];
  let hasValues = false;
  const entries = isBuiltin(Map, mapSize, data) ? [...mapEntries.call(data)]
    : isBuiltin(Set, setSize, data) ? [...setValues.call(data)].map((v, i) => [i, v])
    : Object.keys(data).map((k) => [k, data[k]]);
  for (const [key, row] of entries) {
    rowKeys.push(typeof key === 'string' ? key : inspectValue(key, 0));
    const cells = new Map();
    if (isObjectLike(row) && typeof row !== 'function') {
      for (const k of Object.keys(row)) {
        if (columns !== undefined && !columns.includes(k)) continue;
        if (!cols.includes(k)) cols.push(k);
        cells.set(k, consoleTableCell(row[k]));
      }
    } else {
      hasValues = true;
      cells.set(kPrivate, consoleTableCell(row));
    }
    rows.push(cells);
  }
  if (columns !== undefined) for (const c of columns) if (!cols.includes(c)) cols.push(c);
  const header = ['(index)', ...cols.map(String)];
  if (hasValues) header.push('Values');
  const table = rows.map((cells, i) => {
    const line = [rowKeys[i]];
    for (const c of cols) line.push(cells.has(c) ? cells.get(c) : '');
    if (hasValues) line.push(cells.has(kPrivate) ? cells.get(kPrivate) : '');
    return line;
  });
  const widths = header.map((h, c) => Math.max(h.length, ...table.map((line) => line[c].length)) + 2);
  const pad = (s, w) => {
    const left = Math.floor((w - s.length) / 2);
    return ' '.repeat(left) + s + ' '.repeat(w - s.length - left);
  };
  const rule = (l, m, r) => l + widths.map((w) => '─'.repeat(w)).join(m) + r;
  const lines = [rule('┌', '┬', '┐'), '│' + header.map((h, c) => pad(h, widths[c])).join('│') + '│',
    rule('├', '┼', '┤')];
  for (const line of table) lines.push('│' + line.map((s, c) => pad(s, widths[c])).join('│') + '│');
  lines.push(rule('└', '┴', '┘'));
  return lines.join('\n');
}

const console = {
  log(...args) {
    consoleWrite(1, formatLogArgs(args));
  },
  info(...args) {
    consoleWrite(1, formatLogArgs(args));
  },
  debug(...args) {
    consoleWrite(0, formatLogArgs(args));
  },
  warn(...args) {
    consoleWrite(2, formatLogArgs(args));
  },
  error(...args) {
    consoleWrite(3, formatLogArgs(args));
  },
  trace(...args) {
    const err = { name: 'Trace', message: formatLogArgs(args) };
    Error.captureStackTrace(err, console.trace);
    consoleWrite(1, `${err.stack}`);
  },
  assert(condition, ...args) {
    if (condition) return;
    if (args.length > 0 && typeof args[0] === 'string') args[0] = `Assertion failed: ${args[0]}`;
    else args.unshift('Assertion failed');
    consoleWrite(2, formatLogArgs(args));
  },
  dir(obj, options) {
    let depth = inspectDefaultDepth;
    if (isObjectLike(options) && options.depth !== undefined) {
      depth = options.depth === null ? Infinity : Number(options.depth);
    }
    consoleWrite(1, typeof obj === 'string' ? quoteString(obj) : inspectValue(obj, depth));
  },
  dirxml(...args) {
    consoleWrite(1, formatLogArgs(args));
  },
  table(data, columns) {
    if (!isObjectLike(data) || typeof data === 'function') {
      consoleWrite(1, formatLogArgs([data]));
      return;
    }
    let text;
    try {
      text = renderTable(data, Array.isArray(columns) ? columns.map(String) : undefined);
    } catch {
      text = inspectValue(data);
    }
    consoleWrite(1, text);
  },
  group(...args) {
    if (args.length > 0) consoleWrite(1, formatLogArgs(args));
    consoleIndent += '  ';
  },
  groupCollapsed(...args) {
    if (args.length > 0) consoleWrite(1, formatLogArgs(args));
    consoleIndent += '  ';
  },
  groupEnd() {
    consoleIndent = consoleIndent.slice(0, -2);
  },
  count(label = 'default') {
    label = `${label}`;
    const n = (consoleCounts.get(label) || 0) + 1;
    consoleCounts.set(label, n);
    consoleWrite(1, `${label}: ${n}`);
  },
  countReset(label = 'default') {
    label = `${label}`;
    if (consoleCounts.has(label)) consoleCounts.set(label, 0);
    else consoleWrite(2, `Count for '${label}' does not exist`);
  },
  time(label = 'default') {
    label = `${label}`;
    if (consoleTimers.has(label)) {
      consoleWrite(2, `Label '${label}' already exists for console.time()`);
      return;
    }
    consoleTimers.set(label, performanceNow());
  },
  timeLog(label = 'default', ...args) {
    label = `${label}`;
    const start = consoleTimers.get(label);
    if (start === undefined) {
      consoleWrite(2, `No such label '${label}' for console.timeLog()`);
      return;
    }
    const extra = args.length > 0 ? ' ' + formatLogArgs(args) : '';
    consoleWrite(1, `${label}: ${formatDuration(performanceNow() - start)}${extra}`);
  },
  timeEnd(label = 'default') {
    label = `${label}`;
    const start = consoleTimers.get(label);
    if (start === undefined) {
      consoleWrite(2, `No such label '${label}' for console.timeEnd()`);
      return;
    }
    consoleTimers.delete(label);
    consoleWrite(1, `${label}: ${formatDuration(performanceNow() - start)}`);
  },
  timeStamp() {},
  profile() {},
  profileEnd() {},
  clear() {},
};

function formatDuration(ms) {
  return `${Number(ms.toFixed(3))}ms`;
}

Object.defineProperty(console, Symbol.toStringTag, {
  value: 'console', writable: false, enumerable: false, configurable: true,
});
defineGlobal('console', console);
