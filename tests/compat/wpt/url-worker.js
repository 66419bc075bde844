// Runs web-platform-tests URL vectors inside the runtime under test and
// reports what it observed; tests/e2e/wpt_url.test.mjs judges the results.
// POST a JSON body {kind: "urltestdata" | "setters" | "toascii", vectors: [...]}.

const ATTRS = ['href', 'origin', 'protocol', 'username', 'password', 'host', 'hostname',
  'port', 'pathname', 'search', 'hash'];

function describeError(err) {
  return {
    name: err && err.name,
    isTypeError: err instanceof TypeError,
    message: err && String(err.message),
  };
}

function snapshot(url) {
  const out = {};
  for (const a of ATTRS) out[a] = url[a];
  out.hasSearchParams = 'searchParams' in url;
  out.searchParams = out.hasSearchParams ? url.searchParams.toString() : null;
  return out;
}

// url-constructor.any.js, url-origin.any.js and url-statics-canparse
function runParse(v) {
  const base = v.base === null || v.base === undefined ? undefined : v.base;
  const res = {};
  try {
    res.url = snapshot(base === undefined ? new URL(v.input) : new URL(v.input, base));
  } catch (err) {
    res.error = describeError(err);
  }
  if (typeof URL.canParse === 'function') {
    try {
      res.canParse = base === undefined ? URL.canParse(v.input) : URL.canParse(v.input, base);
    } catch (err) {
      res.canParseError = describeError(err);
    }
  }
  return res;
}

// url-setters.any.js
function runSetter(v) {
  const res = {};
  try {
    const url = new URL(v.href);
    url[v.setter] = v.new_value;
    res.url = snapshot(url);
  } catch (err) {
    res.error = describeError(err);
  }
  return res;
}

// toascii.window.js, the URL variants (the <a> and <area> ones need a DOM)
function runToAscii(v) {
  const res = {};
  try {
    res.url = snapshot(new URL(`https://${v.input}/x`));
  } catch (err) {
    res.error = describeError(err);
  }
  for (const attr of ['host', 'hostname']) {
    try {
      const url = new URL('https://x/x');
      url[attr] = v.input;
      res[attr] = url[attr];
    } catch (err) {
      res[`${attr}Error`] = describeError(err);
    }
  }
  return res;
}

const runners = { urltestdata: runParse, setters: runSetter, toascii: runToAscii };

export default {
  async fetch(request) {
    if (request.method !== 'POST') return new Response('POST vectors here\n', { status: 405 });
    const { kind, vectors } = await request.json();
    const run = runners[kind];
    if (run === undefined) return new Response(`unknown kind ${kind}\n`, { status: 400 });
    return Response.json(vectors.map(run));
  },
};
