// Where the compatibility tests leave their results for
// tests/compat/gen-compat-doc.mjs: <build>/compat-results/<name>.json, or
// $EDGENODE_COMPAT_RESULTS/<name>.json.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { BIN_DIR } from '../../e2e/lib/node.mjs';

export function resultsDir() {
  if (process.env.EDGENODE_COMPAT_RESULTS) return process.env.EDGENODE_COMPAT_RESULTS;
  return path.join(path.dirname(BIN_DIR), 'compat-results');
}

export function writeResults(name, data) {
  const dir = resultsDir();
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, `${name}.json`), `${JSON.stringify(data, null, 2)}\n`);
}

export function readResults(name, dir = resultsDir()) {
  const f = path.join(dir, `${name}.json`);
  return existsSync(f) ? JSON.parse(readFileSync(f, 'utf8')) : null;
}
