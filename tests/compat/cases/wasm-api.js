/* compat
[{"path": "/"}]
*/
// The WebAssembly API: what both platforms have, and compiling from bytes,
// which workerd refuses and edgenode allows.
const ADD = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 7, 1, 96, 2, 127, 127, 1, 127, 3, 2, 1, 0,
  7, 7, 1, 3, 97, 100, 100, 0, 0, 10, 9, 1, 7, 0, 32, 0, 32, 1, 106, 11]);

export default {
  async fetch() {
    const out = {};
    for (const n of ['Module', 'Instance', 'Memory', 'Table', 'Global', 'compile', 'instantiate',
      'compileStreaming', 'instantiateStreaming', 'validate', 'CompileError', 'LinkError', 'RuntimeError']) {
      out[n] = typeof WebAssembly[n];
    }
    out.validate = [WebAssembly.validate(ADD), WebAssembly.validate(new Uint8Array(4))];
    const memory = new WebAssembly.Memory({ initial: 1, maximum: 2 });
    out.memory = [memory.buffer.byteLength, memory.grow(1), memory.buffer.byteLength];
    try {
      memory.grow(1);
    } catch (e) {
      out.growPastMaximum = e.name;
    }
    try {
      const { instance } = await WebAssembly.instantiate(ADD);
      out.fromBytes = instance.exports.add(2, 3);
    } catch (e) {
      out.fromBytes = e.name;
    }
    return Response.json(out);
  },
};
