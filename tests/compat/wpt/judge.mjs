// Judges what tests/compat/wpt/url-worker.js observed against the WPT URL
// vectors, assertion for assertion as the WPT harness files do. Each check
// has the WPT test's name as its key.
import { readFileSync } from 'node:fs';
import path from 'node:path';

export const FILES = {
  urltestdata: 'urltestdata.json',
  setters: 'setters_tests.json',
  toascii: 'toascii.json',
};

function uniqueKeys() {
  const seen = new Map();
  return (name) => {
    const n = (seen.get(name) ?? 0) + 1;
    seen.set(name, n);
    return n === 1 ? name : `${name} [${n}]`;
  };
}

// The vectors of one file, as the worker takes them, with the check names.
export function loadVectors(dir, kind) {
  const data = JSON.parse(readFileSync(path.join(dir, FILES[kind]), 'utf8'));
  const key = uniqueKeys();
  if (kind === 'urltestdata') {
    return data.filter((v) => typeof v !== 'string').map((v) => ({
      vector: v,
      key: key(`Parsing: <${v.input}> ${v.base !== null && v.base !== undefined ? `against <${v.base}>` : 'without base'}`),
    }));
  }
  if (kind === 'setters') {
    const out = [];
    for (const setter of Object.keys(data)) {
      if (setter === 'comment') continue;
      for (const t of data[setter]) {
        out.push({
          vector: { ...t, setter },
          key: key(`Setting <${t.href}>.${setter} = '${t.new_value}'`),
        });
      }
    }
    return out;
  }
  return data.filter((v) => typeof v !== 'string').map((v) => ({ vector: v, key: key(v.input) }));
}

function eq(problems, what, got, want) {
  if (got !== want) problems.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

function threwTypeError(problems, res, what) {
  if (!res.error) problems.push(`${what}: no TypeError thrown`);
  else if (!res.error.isTypeError) problems.push(`${what}: threw ${res.error.name}, not TypeError`);
}

// -> [{key, problems: [..]}]: one check per vector (three per toascii vector).
export function judge(kind, items, results) {
  const checks = [];
  items.forEach(({ vector: v, key }, i) => {
    const res = results[i] ?? {};
    if (kind === 'urltestdata') {
      const p = [];
      if (v.failure) {
        threwTypeError(p, res, 'new URL()');
        if ('canParse' in res || 'canParseError' in res) eq(p, 'URL.canParse()', res.canParse, false);
      } else if (res.error) {
        p.push(`threw ${res.error.name}: ${res.error.message}`);
      } else {
        const u = res.url;
        for (const a of ['href', 'protocol', 'username', 'password', 'host', 'hostname', 'port',
          'pathname', 'search']) eq(p, a, u[a], v[a]);
        if ('origin' in v) eq(p, 'origin', u.origin, v.origin);
        if ('searchParams' in v) {
          if (!u.hasSearchParams) p.push('no searchParams');
          else eq(p, 'searchParams', u.searchParams, v.searchParams);
        }
        eq(p, 'hash', u.hash, v.hash);
        if ('canParse' in res || 'canParseError' in res) eq(p, 'URL.canParse()', res.canParse, true);
      }
      checks.push({ key, problems: p });
    } else if (kind === 'setters') {
      const p = [];
      if (res.error) {
        p.push(`threw ${res.error.name}: ${res.error.message}`);
      } else {
        for (const a of Object.keys(v.expected)) eq(p, a, res.url[a], v.expected[a]);
      }
      checks.push({ key, problems: p });
    } else {
      const p1 = [];
      if (v.output !== null) {
        if (res.error) {
          p1.push(`threw ${res.error.name}: ${res.error.message}`);
        } else {
          eq(p1, 'host', res.url.host, v.output);
          eq(p1, 'hostname', res.url.hostname, v.output);
          eq(p1, 'pathname', res.url.pathname, '/x');
          eq(p1, 'href', res.url.href, `https://${v.output}/x`);
        }
      } else {
        threwTypeError(p1, res, 'new URL()');
      }
      checks.push({ key: `${key} (using URL)`, problems: p1 });
      for (const attr of ['host', 'hostname']) {
        const p = [];
        if (res[`${attr}Error`]) p.push(`setting ${attr} threw ${res[`${attr}Error`].name}`);
        else eq(p, attr, res[attr], v.output !== null ? v.output : 'x');
        checks.push({ key: `${key} (using URL.${attr})`, problems: p });
      }
    }
  });
  return checks;
}
