// Writes isolate/runtime/14-single-byte.js: the WHATWG Encoding Standard's
// legacy single-byte encodings (labels and the code points of bytes
// 0x80..0xFF) for TextDecoder. The tables are read from this Node.js's
// TextDecoder (ICU, which implements the standard's indexes); iso-8859-16,
// which ICU lacks, and x-user-defined come from the standard directly.
//   node tests/compat/tools/gen-single-byte.mjs
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.resolve(here, '../../../isolate/runtime/14-single-byte.js');

// Labels per the Encoding Standard (windows-1252 is in 15-encoding.js).
const encodings = {
  ibm866: ['866', 'cp866', 'csibm866', 'ibm866'],
  'iso-8859-2': ['csisolatin2', 'iso-8859-2', 'iso-ir-101', 'iso8859-2', 'iso88592', 'iso_8859-2', 'iso_8859-2:1987', 'l2', 'latin2'],
  'iso-8859-3': ['csisolatin3', 'iso-8859-3', 'iso-ir-109', 'iso8859-3', 'iso88593', 'iso_8859-3', 'iso_8859-3:1988', 'l3', 'latin3'],
  'iso-8859-4': ['csisolatin4', 'iso-8859-4', 'iso-ir-110', 'iso8859-4', 'iso88594', 'iso_8859-4', 'iso_8859-4:1988', 'l4', 'latin4'],
  'iso-8859-5': ['csisolatincyrillic', 'cyrillic', 'iso-8859-5', 'iso-ir-144', 'iso8859-5', 'iso88595', 'iso_8859-5', 'iso_8859-5:1988'],
  'iso-8859-6': ['arabic', 'asmo-708', 'csiso88596e', 'csiso88596i', 'csisolatinarabic', 'ecma-114', 'iso-8859-6', 'iso-8859-6-e', 'iso-8859-6-i', 'iso-ir-127', 'iso8859-6', 'iso88596', 'iso_8859-6', 'iso_8859-6:1987'],
  'iso-8859-7': ['csisolatingreek', 'ecma-118', 'elot_928', 'greek', 'greek8', 'iso-8859-7', 'iso-ir-126', 'iso8859-7', 'iso88597', 'iso_8859-7', 'iso_8859-7:1987', 'sun_eu_greek'],
  'iso-8859-8': ['csiso88598e', 'csisolatinhebrew', 'hebrew', 'iso-8859-8', 'iso-8859-8-e', 'iso-ir-138', 'iso8859-8', 'iso88598', 'iso_8859-8', 'iso_8859-8:1988', 'visual'],
  'iso-8859-8-i': ['csiso88598i', 'iso-8859-8-i', 'logical'],
  'iso-8859-10': ['csisolatin6', 'iso-8859-10', 'iso-ir-157', 'iso8859-10', 'iso885910', 'l6', 'latin6'],
  'iso-8859-13': ['iso-8859-13', 'iso8859-13', 'iso885913'],
  'iso-8859-14': ['iso-8859-14', 'iso8859-14', 'iso885914'],
  'iso-8859-15': ['csisolatin9', 'iso-8859-15', 'iso8859-15', 'iso885915', 'iso_8859-15', 'l9'],
  'iso-8859-16': ['iso-8859-16'],
  'koi8-r': ['cskoi8r', 'koi', 'koi8', 'koi8-r', 'koi8_r'],
  'koi8-u': ['koi8-ru', 'koi8-u'],
  macintosh: ['csmacintosh', 'mac', 'macintosh', 'x-mac-roman'],
  'windows-874': ['dos-874', 'iso-8859-11', 'iso8859-11', 'iso885911', 'tis-620', 'windows-874'],
  'windows-1250': ['cp1250', 'windows-1250', 'x-cp1250'],
  'windows-1251': ['cp1251', 'windows-1251', 'x-cp1251'],
  'windows-1253': ['cp1253', 'windows-1253', 'x-cp1253'],
  'windows-1254': ['cp1254', 'csisolatin5', 'iso-8859-9', 'iso-ir-148', 'iso8859-9', 'iso88599', 'iso_8859-9', 'iso_8859-9:1989', 'l5', 'latin5', 'windows-1254', 'x-cp1254'],
  'windows-1255': ['cp1255', 'windows-1255', 'x-cp1255'],
  'windows-1256': ['cp1256', 'windows-1256', 'x-cp1256'],
  'windows-1257': ['cp1257', 'windows-1257', 'x-cp1257'],
  'windows-1258': ['cp1258', 'windows-1258', 'x-cp1258'],
  'x-mac-cyrillic': ['x-mac-cyrillic', 'x-mac-ukrainian'],
  'x-user-defined': ['x-user-defined'],
};

// index-iso-8859-16.txt of the Encoding Standard (public domain): 0x80..0xFF.
const iso885916 = [
  0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f,
  0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f,
  0xa0, 0x104, 0x105, 0x141, 0x20ac, 0x201e, 0x160, 0xa7, 0x161, 0xa9, 0x218, 0xab, 0x179, 0xad, 0x17a, 0x17b,
  0xb0, 0xb1, 0x10c, 0x142, 0x17d, 0x201d, 0xb6, 0xb7, 0x17e, 0x10d, 0x219, 0xbb, 0x152, 0x153, 0x178, 0x17c,
  0xc0, 0xc1, 0xc2, 0x102, 0xc4, 0x106, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
  0x110, 0x143, 0xd2, 0xd3, 0xd4, 0x150, 0xd6, 0x15a, 0x170, 0xd9, 0xda, 0xdb, 0xdc, 0x118, 0x21a, 0xdf,
  0xe0, 0xe1, 0xe2, 0x103, 0xe4, 0x107, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef,
  0x111, 0x144, 0xf2, 0xf3, 0xf4, 0x151, 0xf6, 0x15b, 0x171, 0xf9, 0xfa, 0xfb, 0xfc, 0x119, 0x21b, 0xff,
];

function highHalf(name) {
  if (name === 'iso-8859-16') return iso885916;
  if (name === 'x-user-defined') return Array.from({ length: 128 }, (_, i) => 0xf780 + i);
  const d = new TextDecoder(name);
  const codes = [];
  for (let b = 0x80; b <= 0xff; b++) {
    const s = d.decode(new Uint8Array([b]));
    if (s.length !== 1) throw new Error(`${name}: byte ${b} decodes to ${s.length} code units`);
    codes.push(s.charCodeAt(0)); // U+FFFD where the index has no code point
  }
  return codes;
}

const esc = (c) => (c >= 0x20 && c < 0x7f && c !== 0x27 && c !== 0x5c
  ? String.fromCharCode(c) : `\\u${c.toString(16).padStart(4, '0')}`);

let text = `// Legacy single-byte encodings for TextDecoder (WHATWG Encoding Standard):
// each one's labels and the code points of bytes 0x80..0xFF (U+FFFD: none).
// Generated by tests/compat/tools/gen-single-byte.mjs; do not edit.

const singleByteEncodings = {
`;
for (const [name, labels] of Object.entries(encodings)) {
  const high = highHalf(name).map(esc).join('');
  text += `  '${name}': [${JSON.stringify(labels).replace(/"/g, "'").replace(/,/g, ', ')},\n`;
  for (let i = 0; i < high.length; i += 96) text += `    '${high.slice(i, i + 96)}'${i + 96 < high.length ? ' +' : ','}\n`;
  text += '  ],\n';
}
text += '};\n';
writeFileSync(out, text);
console.log(`wrote ${out}`);
