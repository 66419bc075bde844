/* compat
[{"path": "/"}]
*/
// FormData built by hand, sent as a body and parsed back.
export default {
  async fetch() {
    const fd = new FormData();
    fd.append('a', '1');
    fd.append('a', '2');
    fd.append('file', new Blob(['contents'], { type: 'text/csv' }), 'data.csv');
    fd.append('blob', new Blob(['raw']));
    fd.set('b', 'line\nbreak');
    const out = { has: fd.has('a'), getAll: fd.getAll('a'), keys: [...fd.keys()] };
    const file = fd.get('file');
    out.file = [file instanceof File, file.name, file.type, file.size];
    out.blobName = fd.get('blob').name;
    const r = new Response(fd);
    out.type = r.headers.get('content-type').split(';')[0];
    const back = await r.formData();
    out.back = [];
    for (const [k, v] of back) out.back.push([k, typeof v === 'string' ? v : [v.name, v.type, await v.text()]]);
    fd.delete('a');
    out.afterDelete = [...fd.keys()];
    return Response.json(out);
  },
};
