// The differential test cases: tests/compat/cases/<name>.js, each a worker
// module whose requests are given in a block comment at its top:
//
//   /* compat
//   [{"path": "/"},
//    {"method": "POST", "path": "/echo", "headers": {"content-type": "text/plain"}, "body": "hi"}]
//   */
//
// A request has: method (GET), path (/), headers ({} or [[name, value], ...]),
// body (a string) or bodyBase64, and optionally "chunks": [strings] to send
// the body in pieces with chunked transfer encoding.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const HEADER_RE = /^\s*\/\*\s*compat\s*\n([\s\S]*?)\*\//;

export function loadCases(dir) {
  const out = [];
  for (const file of readdirSync(dir).sort()) {
    if (!file.endsWith('.js')) continue;
    const name = file.slice(0, -3);
    if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(name)) {
      throw new Error(`${file}: a case's name must be a valid worker name ([a-z0-9-], 63 at most)`);
    }
    const source = readFileSync(path.join(dir, file), 'utf8');
    const m = HEADER_RE.exec(source);
    if (!m) throw new Error(`${file}: no /* compat [...] */ block with its requests at the top`);
    let requests;
    try {
      requests = JSON.parse(m[1]);
    } catch (err) {
      throw new Error(`${file}: the compat block is not JSON: ${err.message}`);
    }
    if (!Array.isArray(requests) || requests.length === 0) {
      throw new Error(`${file}: the compat block must be a non-empty array of requests`);
    }
    out.push({ name, file, source, requests: requests.map(normalizeRequest) });
  }
  return out;
}

function normalizeRequest(r) {
  const headers = Array.isArray(r.headers) ? r.headers : Object.entries(r.headers ?? {});
  let body;
  if (r.bodyBase64 !== undefined) body = Buffer.from(r.bodyBase64, 'base64');
  else if (r.body !== undefined) body = Buffer.from(r.body, 'utf8');
  return {
    method: r.method ?? 'GET',
    path: r.path ?? '/',
    headers,
    body,
    chunks: r.chunks,
    label: `${r.method ?? 'GET'} ${r.path ?? '/'}`,
  };
}
