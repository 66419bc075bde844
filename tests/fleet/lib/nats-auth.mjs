// What a NATS deployment's operator makes with openssl and nsc, made here
// with openssl and node:crypto: a CA and a server certificate for TLS, and
// NKEYs and JWTs for NATS' operator mode (an operator, a system account, an
// account with JetStream, and users' .creds files).
import { spawnSync } from 'node:child_process';
import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';

function openssl(args, cwd) {
  const r = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}

// A self-signed CA in dir/<name>.pem (key <name>.key).
export function makeCa(dir, name) {
  openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', `${name}.key`, '-out', `${name}.pem`, '-days', '2', '-subj', `/CN=${name}`], dir);
  return { cert: path.join(dir, `${name}.pem`), key: path.join(dir, `${name}.key`) };
}

// A certificate for 127.0.0.1 signed by the CA: dir/<name>.pem and .key.
export function makeServerCert(dir, name, ca) {
  const ext = path.join(dir, `${name}.ext`);
  writeFileSync(ext, 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', '/CN=127.0.0.1'], dir);
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', ca.cert, '-CAkey', ca.key, '-CAcreateserial',
    '-out', `${name}.pem`, '-days', '2', '-extfile', ext], dir);
  return { cert: path.join(dir, `${name}.pem`), key: path.join(dir, `${name}.key`) };
}

// ---- NKEYs: an ed25519 key, its public key and seed in NATS' base32 form ----

const B32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
function base32(buf) {
  let bits = 0;
  let value = 0;
  let out = '';
  for (const b of buf) {
    value = ((value << 8) | b) & 0xffff;
    bits += 8;
    while (bits >= 5) {
      out += B32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += B32[(value << (5 - bits)) & 31];
  return out;
}

// CRC-16/XMODEM, appended little-endian, as nkeys does.
function withCrc(buf) {
  let crc = 0;
  for (const b of buf) {
    crc ^= b << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return Buffer.concat([buf, Buffer.from([crc & 0xff, crc >> 8])]);
}

const PREFIX = { operator: 14 << 3, account: 0, user: 20 << 3 };
const PREFIX_SEED = 18 << 3;

export function nkey(kind) {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const raw = publicKey.export({ format: 'der', type: 'spki' }).subarray(-32);
  const seedRaw = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(-32);
  const p = PREFIX[kind];
  return {
    pub: base32(withCrc(Buffer.concat([Buffer.from([p]), raw]))),
    seed: base32(withCrc(Buffer.concat([Buffer.from([PREFIX_SEED | (p >> 5), (p & 31) << 3]), seedRaw]))),
    privateKey,
  };
}

// A JWT of `claims` about `subject`, signed by `issuer` (JWT v2 claims).
function jwt(subject, name, nats, issuer) {
  const claims = { iat: Math.floor(Date.now() / 1000), iss: issuer.pub, name, sub: subject.pub, nats };
  claims.jti = base32(createHash('sha256').update(JSON.stringify(claims)).digest());
  const enc = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const input = `${enc({ typ: 'JWT', alg: 'ed25519-nkey' })}.${enc(claims)}`;
  return `${input}.${sign(null, Buffer.from(input), issuer.privateKey).toString('base64url')}`;
}

const UNLIMITED = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };

// An operator with a system account and one account with JetStream: the
// servers' configuration text, and .creds files for users of the account.
export function makeOperator(dir) {
  const operator = nkey('operator');
  const system = nkey('account');
  const account = nkey('account');
  const sysJwt = jwt(system, 'SYS', { limits: UNLIMITED, type: 'account', version: 2 }, operator);
  const accJwt = jwt(account, 'fleet', {
    limits: { ...UNLIMITED, mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 },
    default_permissions: { pub: {}, sub: {} }, type: 'account', version: 2,
  }, operator);
  const opJwt = jwt(operator, 'edge', { type: 'operator', version: 2, system_account: system.pub }, operator);
  const opFile = path.join(dir, 'operator.jwt');
  writeFileSync(opFile, opJwt);
  const config = [
    `operator: "${opFile}"`,
    `system_account: ${system.pub}`,
    'resolver: MEMORY',
    'resolver_preload: {',
    `  ${system.pub}: "${sysJwt}"`,
    `  ${account.pub}: "${accJwt}"`,
    '}',
    '',
  ].join('\n');
  return {
    config,
    // A user of the account (or, with `issuer`, of another account the
    // servers do not know): its .creds file, mode 0600.
    creds(name, issuer = account) {
      const user = nkey('user');
      const userJwt = jwt(user, name, { pub: {}, sub: {}, subs: -1, data: -1, payload: -1, type: 'user', version: 2 }, issuer);
      const file = path.join(dir, `${name}.creds`);
      writeFileSync(file, [
        '-----BEGIN NATS USER JWT-----', userJwt, '------END NATS USER JWT------', '',
        '************************* IMPORTANT *************************',
        'NKEY Seed printed below can be used to sign and prove identity.',
        'NKEYs are sensitive and should be treated as secrets.', '',
        '-----BEGIN USER NKEY SEED-----', user.seed, '------END USER NKEY SEED------', '',
        '*************************************************************', '',
      ].join('\n'), { mode: 0o600 });
      return file;
    },
  };
}
