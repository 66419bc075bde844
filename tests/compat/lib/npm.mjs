// npm packages the tests compare with or run (workerd, a wasm library):
// installed from the registry into a cache directory once, pinned.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BIN_DIR } from '../../e2e/lib/node.mjs';

const INSTALL_TIMEOUT_MS = 150000;

export function cacheRoot() {
  if (process.env.EDGENODE_COMPAT_CACHE) return process.env.EDGENODE_COMPAT_CACHE;
  // The build directory when there is one (BIN_DIR is <build>/bin), else $TMPDIR.
  const build = path.dirname(BIN_DIR);
  return existsSync(build) ? path.join(build, 'compat-cache') : path.join(tmpdir(), 'edgenode-compat-cache');
}

// Installs `spec` (name@version) into `prefix` unless `wanted(prefix)`, a
// file the package holds, is there already. Resolves {} or {skip: reason};
// never throws.
export async function npmInstall(spec, prefix, wanted) {
  if (existsSync(wanted(prefix))) return {};
  const root = path.dirname(prefix);
  // Installed beside the final place and renamed into it, so that two test
  // files installing at once never see a half-installed tree.
  try {
    mkdirSync(root, { recursive: true });
  } catch (err) {
    return { skip: `cannot create ${root}: ${err.message}` };
  }
  const staging = mkdtempSync(path.join(root, 'install-'));
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const res = await new Promise((resolve) => {
    // Few retries: an unreachable registry should skip the test soon, not
    // after npm's minutes of backoff.
    const proc = spawn(npm, ['install', '--prefix', staging, '--no-audit', '--no-fund', '--no-save',
      '--loglevel=error', '--fetch-retries=1', '--fetch-timeout=60000', spec],
    { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (d) => { out += d; });
    proc.stderr.on('data', (d) => { out += d; });
    const timer = setTimeout(() => proc.kill('SIGKILL'), INSTALL_TIMEOUT_MS);
    proc.on('error', (err) => { clearTimeout(timer); resolve({ code: -1, out: err.message }); });
    proc.on('close', (code) => { clearTimeout(timer); resolve({ code, out }); });
  });
  if (res.code !== 0 || !existsSync(wanted(staging))) {
    rmSync(staging, { recursive: true, force: true });
    const why = res.out.trim().split('\n').slice(-3).join(' | ');
    return { skip: `npm install ${spec} failed (registry unreachable?): ${why}` };
  }
  try {
    renameSync(staging, prefix);
  } catch {
    rmSync(staging, { recursive: true, force: true }); // someone else won the race
  }
  return {};
}
