// Host calls and bindings: how the objects the runtime builds into `env`
// (facets, the loader, ...) reach the host.
//
// native.callSync / native.callAsync answer [ok, value]; the helpers here turn
// a failure into an exception, so that a binding only deals in values.
// Arguments and results cross as the wire format (isolate.h): undefined,
// null, booleans, numbers, BigInts in int64 range, strings, bytes
// (ArrayBuffer or a view; results come back as ArrayBuffer), arrays and plain
// objects.
//
// Takes from
//   00-util.js: isObjectLike
//   05-domexception.js: DOMException

// The error a host reported: a string is an Error's message; an object
// {name, message} becomes the error of that name (TypeError, RangeError,
// Error, else a DOMException with that name).
function hostError(value) {
  if (typeof value === 'string') return new Error(value);
  if (!isObjectLike(value)) return new Error('The host call failed');
  const name = typeof value.name === 'string' ? value.name : 'Error';
  const message = value.message === undefined ? '' : `${value.message}`;
  switch (name) {
    case 'Error': return new Error(message);
    case 'TypeError': return new TypeError(message);
    case 'RangeError': return new RangeError(message);
    default: return new DOMException(message, name);
  }
}

// Calls `op` of `binding` on the host and returns its result or throws.
function hostCallSync(binding, op, args) {
  const outcome = native.callSync(binding, op, args);
  if (outcome[0]) return outcome[1];
  throw hostError(outcome[1]);
}

// The same as a promise; arguments that cannot be sent reject it too.
async function hostCallAsync(binding, op, args) {
  const outcome = await native.callAsync(binding, op, args);
  if (outcome[0]) return outcome[1];
  throw hostError(outcome[1]);
}

// type -> (name, config) => the object env[name] holds. Later files register
// theirs: bindingFactories.facet = (name, config) => ...
const bindingFactories = Object.create(null);

// Builds env[name] for each binding {name: {type, ...}} the worker was
// deployed with. An unknown type fails the load.
function installBindings(env, bindings) {
  if (bindings === undefined || bindings === null) return;
  for (const name of Object.keys(bindings)) {
    const config = bindings[name];
    const type = isObjectLike(config) ? config.type : undefined;
    const factory = typeof type === 'string' ? bindingFactories[type] : undefined;
    if (typeof factory !== 'function') {
      const what = typeof type === 'string' ? `unknown type "${type}"` : 'no type';
      throw new TypeError(`Binding "${name}" has ${what}`);
    }
    // Defined, not assigned: a binding named "__proto__" stays a property.
    Object.defineProperty(env, name, {
      value: factory(name, config), writable: true, enumerable: true, configurable: true,
    });
  }
}

// Host calls as they are: env.NAME.call(op, ...args) returns the result or
// throws; env.NAME.callAsync(op, ...args) returns a promise of it;
// env.NAME.callNumbers(op, ...args) makes the call through
// native.callSyncNumbers and says which way the answer came: {numbers} or
// {value}. For hosts without a richer binding object, and for tests.
bindingFactories.hostcall = (name) => Object.freeze({
  call(op, ...args) {
    return hostCallSync(name, `${op}`, args);
  },
  callNumbers(op, ...args) {
    const numbers = native.directNumbers();
    let answer;
    try {
      answer = native.callSyncNumbers(name, `${op}`, ...args);
    } catch (err) {
      throw err instanceof Error ? err : hostError(err);
    }
    if (typeof answer === 'number') return { numbers: Array.from(numbers.subarray(0, answer)) };
    return { value: answer };
  },
  callAsync(op, ...args) {
    return hostCallAsync(name, `${op}`, args);
  },
});
