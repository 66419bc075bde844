// edgenode's control API from JavaScript: ESM, no dependencies (Node 18+,
// Deno, Bun, browsers with the token in reach of their code only).
//
//   import { Edgenode } from './edgenode.mjs';
//   const node = new Edgenode({ url: 'http://127.0.0.1:8081', token });
//   const { result, logs } = await node.run({ code: 'export function run(x) { return x * 2 }', input: 21 });
//   await node.deploy('hello', { code: 'export default { fetch() { return new Response("hi") } }' });
//   for await (const line of node.tail('hello')) console.log(line);
//
// Every failure is thrown as an EdgenodeError (or one of its subclasses),
// with the HTTP status and the node's JSON answer: callers branch on the
// class, never on message text.

export class EdgenodeError extends Error {
  constructor(message, { status = 0, body = null, cause } = {}) {
    super(message, cause ? { cause } : undefined);
    this.name = new.target.name;
    this.status = status;
    this.body = body;
    this.kind = body && typeof body === 'object' ? body.kind ?? null : null;
  }
}
/** The node could not be reached, or answered something that is not its API. */
export class ConnectionError extends EdgenodeError {}
/** 401/403: no token, or the wrong one. */
export class AuthError extends EdgenodeError {}
/** 404: no such worker, secret or route. */
export class NotFoundError extends EdgenodeError {}
/** 400/409/413/422: the request itself is wrong (a bad spec, a bad rule). */
export class BadRequestError extends EdgenodeError {}
/** /v1/run: the code did not compile, link, or threw (`module`, `line`, `column` say where). */
export class CodeError extends EdgenodeError {
  constructor(message, opts) {
    super(message, opts);
    const b = opts?.body ?? {};
    this.module = b.module ?? null;
    this.line = b.line ?? null;
    this.column = b.column ?? null;
  }
}
/** 503/504 with a limit's kind: the code hit its CPU, memory or wall-time limit. */
export class LimitError extends EdgenodeError {}
/** 503 otherwise: the node (or the fleet behind it) cannot take this now; retry later. */
export class UnavailableError extends EdgenodeError {
  constructor(message, opts) {
    super(message, opts);
    this.retryAfter = opts?.retryAfter ?? null;
  }
}

const LIMIT_KINDS = new Set(['cpu', 'memory', 'wall']);
const CODE_KINDS = new Set(['syntax', 'link', 'exception', 'no_handler', 'bad_return']);

function errorFor(status, body, headers) {
  const message = body && typeof body === 'object' && typeof body.error === 'string'
    ? body.error : `HTTP ${status}`;
  const opts = { status, body };
  const kind = body && typeof body === 'object' ? body.kind : undefined;
  if (LIMIT_KINDS.has(kind)) return new LimitError(message, opts);
  if (CODE_KINDS.has(kind)) return new CodeError(message, opts);
  if (status === 401 || status === 403) return new AuthError(message, opts);
  if (status === 404) return new NotFoundError(message, opts);
  if (status === 503) {
    const ra = headers?.get?.('retry-after');
    return new UnavailableError(message, { ...opts, retryAfter: ra ? Number(ra) : null });
  }
  if (status >= 400 && status < 500) return new BadRequestError(message, opts);
  return new EdgenodeError(message, opts);
}

// The modules of a spec from the caller's shorthand: `code` is one module,
// `modules` an object of name -> source (or {wasm: base64} etc., passed as is).
function modulesOf(opts) {
  if (opts.modules && opts.code) throw new TypeError('give either code or modules, not both');
  if (opts.modules) return { modules: opts.modules, main_module: opts.main ?? Object.keys(opts.modules)[0] };
  if (typeof opts.code === 'string') {
    const name = opts.main ?? 'index.js';
    return { modules: { [name]: opts.code }, main_module: name };
  }
  throw new TypeError('code (a string) or modules (an object) is required');
}

function pick(src, keys) {
  const out = {};
  for (const k of keys) if (src[k] !== undefined) out[k] = src[k];
  return out;
}

// In Node, requests go through node:http with a keep-alive agent: Node's
// fetch() (undici) added about 4 ms to each small call here (p50 9.3 ms
// against 5.0 ms, POST /v1/run, tests/bench/clients.sh). Elsewhere, fetch().
const nodeHttp = typeof process !== 'undefined' && process.versions?.node
  ? await import('node:http').catch(() => null) : null;
const nodeHttps = nodeHttp ? await import('node:https').catch(() => null) : null;

// A fetch()-shaped call over node:http: resolves to {status, ok, headers:
// {get}, text(), body (async iterable of bytes)}.
function httpFetch(agents, url, { method, headers, body, signal }) {
  const u = new URL(url);
  const mod = u.protocol === 'https:' ? nodeHttps : nodeHttp;
  return new Promise((resolve, reject) => {
    const req = mod.request(u, {
      method, headers: body === undefined ? headers : { ...headers, 'content-length': Buffer.byteLength(body) },
      agent: agents[u.protocol] ??= new mod.Agent({ keepAlive: true }), signal,
    }, (res) => {
      resolve({
        status: res.statusCode,
        ok: res.statusCode >= 200 && res.statusCode < 300,
        headers: { get: (name) => res.headers[name.toLowerCase()] ?? null },
        body: res,
        text: async () => {
          const parts = [];
          for await (const chunk of res) parts.push(chunk);
          return Buffer.concat(parts).toString('utf8');
        },
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

export class Edgenode {
  /**
   * @param {object} o
   * @param {string} [o.url]    the control API, default $EDGENODE_URL or http://127.0.0.1:8081
   * @param {string} [o.token]  the control token, default $EDGENODE_TOKEN
   * @param {number} [o.timeoutMs] per call, default 60000
   * @param {Function} [o.fetch] a fetch implementation, default globalThis.fetch
   */
  constructor({ url, token, timeoutMs = 60000, fetch: fetchImpl } = {}) {
    const env = typeof process !== 'undefined' ? process.env : {};
    this.url = (url ?? env.EDGENODE_URL ?? 'http://127.0.0.1:8081').replace(/\/+$/, '');
    this.token = token ?? env.EDGENODE_TOKEN ?? null;
    this.timeoutMs = timeoutMs;
    if (fetchImpl === undefined && nodeHttp) {
      const agents = {};
      this.fetch = (url, init) => httpFetch(agents, url, init);
    } else {
      this.fetch = fetchImpl ?? globalThis.fetch;
    }
    if (typeof this.fetch !== 'function') throw new TypeError('no fetch() available: pass one as options.fetch');
  }

  async #send(method, path, { json, text, signal, stream = false } = {}) {
    const headers = {};
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    let body;
    if (json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(json);
    } else if (text !== undefined) {
      headers['content-type'] = 'application/javascript';
      body = text;
    }
    const timeout = stream ? null : AbortSignal.timeout(this.timeoutMs);
    const signals = [signal, timeout].filter(Boolean);
    const combined = signals.length > 1 ? AbortSignal.any?.(signals) ?? signals[0] : signals[0];
    let res;
    try {
      res = await this.fetch(`${this.url}${path}`, { method, headers, body, signal: combined });
    } catch (err) {
      if (err?.name === 'AbortError' && signal?.aborted) throw err;
      throw new ConnectionError(`cannot reach ${this.url}: ${err?.cause?.message ?? err?.message ?? err}`, { cause: err });
    }
    if (stream && res.ok) return res;
    const raw = await res.text();
    let parsed = null;
    if (raw.length > 0) {
      try {
        parsed = JSON.parse(raw);
      } catch {
        throw new ConnectionError(`${method} ${path}: the answer is not JSON (HTTP ${res.status})`, { status: res.status, body: raw });
      }
    }
    if (!res.ok) throw errorFor(res.status, parsed, res.headers);
    return parsed;
  }

  /**
   * Runs code once in a fresh sandbox (POST /v1/run).
   * opts: code | modules (+ main), and any of input, request, env, egress,
   * as, facet, limits, tail_id, as docs/control-api.md describes them. Answers the
   * node's JSON: {result} or {status, headers, body}, plus logs, exception,
   * cpu_ms, wall_ms and cold where the node reports them. A failure of the
   * code itself throws CodeError or LimitError.
   */
  async run(opts) {
    const spec = { ...modulesOf(opts), ...pick(opts, ['input', 'request', 'env', 'egress', 'as', 'facet', 'limits', 'tail_id']) };
    return this.#send('POST', '/v1/run', { json: spec, signal: opts.signal });
  }

  /** Deploys (or redeploys) a worker: code | modules (+ main), bindings, egress, limits. */
  async deploy(name, opts) {
    const spec = { ...modulesOf(opts), ...pick(opts, ['bindings', 'egress', 'limits']) };
    return this.#send('PUT', `/v1/workers/${encodeURIComponent(name)}`, { json: spec });
  }

  /** Deletes a worker; { purge: true } drops its facet too. */
  async delete(name, { purge = false } = {}) {
    return this.#send('DELETE', `/v1/workers/${encodeURIComponent(name)}${purge ? '?purge=true' : ''}`);
  }

  /** Every deployed worker. */
  async workers() {
    return this.#send('GET', '/v1/workers');
  }

  /** One worker's registry row. */
  async worker(name) {
    return this.#send('GET', `/v1/workers/${encodeURIComponent(name)}`);
  }

  /** Stores a secret; workers: the names it is granted to. */
  async putSecret(name, value, { workers } = {}) {
    return this.#send('PUT', `/v1/secrets/${encodeURIComponent(name)}`, { json: workers ? { value, workers } : { value } });
  }

  /** The node: version, processes, sandbox layers (GET /v1/node). */
  async nodeInfo() {
    return this.#send('GET', '/v1/node');
  }

  /**
   * Live log lines of a worker (GET /v1/workers/{name}/tail), as parsed
   * objects, until the signal aborts or the node ends the stream.
   * filters: { status, sample, signal }.
   */
  async *tail(name, { status, sample, signal } = {}) {
    const q = new URLSearchParams();
    if (status) q.set('status', status);
    if (sample !== undefined) q.set('sample', String(sample));
    const qs = q.toString() ? `?${q}` : '';
    const res = await this.#send('GET', `/v1/workers/${encodeURIComponent(name)}/tail${qs}`, { signal, stream: true });
    const decoder = new TextDecoder();
    let pending = '';
    try {
      for await (const chunk of res.body) {
        pending += decoder.decode(chunk, { stream: true });
        let nl;
        while ((nl = pending.indexOf('\n')) >= 0) {
          const line = pending.slice(0, nl).trim();
          pending = pending.slice(nl + 1);
          if (line.length > 0) yield JSON.parse(line);
        }
      }
    } catch (err) {
      if (signal?.aborted) return;
      throw err;
    }
  }
}
