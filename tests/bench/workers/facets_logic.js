// GET /?op=setup|insert|insert_txn|insert_pre|read&n=N: N operations, one
// exec each.
export function run(sql, transactionSync, url) {
  const op = url.searchParams.get('op');
  const n = Number(url.searchParams.get('n') ?? 0);
  switch (op) {
    case 'setup':
      sql.exec('CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v TEXT)');
      break;
    case 'insert':
      for (let i = 0; i < n; i++) sql.exec('INSERT INTO kv (v) VALUES (?)', 'value ' + i);
      break;
    case 'insert_txn':
      transactionSync(() => {
        for (let i = 0; i < n; i++) sql.exec('INSERT INTO kv (v) VALUES (?)', 'value ' + i);
      });
      break;
    case 'insert_pre': {
      const values = Array.from({ length: 1024 }, (_, i) => 'value ' + i);
      transactionSync(() => {
        for (let i = 0; i < n; i++) sql.exec('INSERT INTO kv (v) VALUES (?)', values[i & 1023]);
      });
      break;
    }
    case 'read': {
      const max = sql.exec('SELECT max(k) AS m FROM kv').one().m;
      let bytes = 0;
      for (let i = 0; i < n; i++) {
        bytes += sql.exec('SELECT v FROM kv WHERE k = ?', 1 + ((i * 7919) % max)).one().v.length;
      }
      if (bytes === 0) throw new Error('nothing read');
      break;
    }
    default:
      return new Response('unknown op', { status: 400 });
  }
  return new Response(`ok ${n}`);
}
