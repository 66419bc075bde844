// The worker of tests/bench/apis.sh: one route per Web API workload, the same
// module on edgenode and on workerd.
//   /json    parse a 16 KiB JSON document, change it, serialize it back
//   /stream  a 1 MiB response body produced as a ReadableStream (16 x 64 KiB)
//   /sha256  SHA-256 of 1 MiB with crypto.subtle.digest
//   /urls    parse 10,000 URLs with the URL constructor

function sampleDocument() {
  const items = [];
  for (let i = 0; i < 120; i++) {
    items.push({
      id: i,
      name: `item ${i}`,
      price: i * 1.25,
      tags: ['alpha', 'beta', 'gamma'].slice(0, (i % 3) + 1),
      stock: { warehouse: `w${i % 7}`, count: (i * 37) % 101, reserved: i % 2 === 0 },
    });
  }
  return JSON.stringify({ version: 3, generated: '2026-11-29T00:00:00Z', items });
}

const document = sampleDocument();
const megabyte = new Uint8Array(1 << 20).map((_, i) => (i * 31) & 255);
const chunk = new Uint8Array(64 << 10).fill(120);
const urls = [];
for (let i = 0; i < 10000; i++) {
  urls.push(`https://user${i % 13}:pw@shop${i % 97}.example.com:${8000 + (i % 50)}/a/b/../c/${i}?q=${i}&x=%20y#frag${i}`);
}

function hex(buffer) {
  let out = '';
  for (const b of new Uint8Array(buffer)) out += b.toString(16).padStart(2, '0');
  return out;
}

export default {
  async fetch(request) {
    const { pathname } = new URL(request.url);
    switch (pathname) {
      case '/json': {
        const value = JSON.parse(document);
        value.items.reverse();
        value.served = true;
        return new Response(JSON.stringify(value), { headers: { 'content-type': 'application/json' } });
      }
      case '/stream': {
        let sent = 0;
        const body = new ReadableStream({
          pull(controller) {
            if (sent === 16) {
              controller.close();
              return;
            }
            sent++;
            controller.enqueue(chunk);
          },
        });
        return new Response(body, { headers: { 'content-type': 'application/octet-stream' } });
      }
      case '/sha256':
        return new Response(hex(await crypto.subtle.digest('SHA-256', megabyte)));
      case '/urls': {
        let ports = 0;
        for (const u of urls) ports += Number(new URL(u).port);
        return new Response(String(ports));
      }
      default:
        return new Response('routes: /json /stream /sha256 /urls', { status: 404 });
    }
  },
};
