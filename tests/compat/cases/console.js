/* compat
[{"path": "/"}]
*/
// console methods with format specifiers run without throwing (their output
// goes to each platform's logs, which are not compared).
export default {
  fetch() {
    const cyclic = { name: 'loop' };
    cyclic.self = cyclic;
    console.log('%s is %d years and %i days, %f%%, %o %O %c', 'Ada', 36.5, 12.9, 0.5, { a: 1 }, [1, 2], 'color: red');
    console.info('info', new Map([[1, 2]]), new Set([3]), new Error('shown'), Symbol('s'), 10n);
    console.warn('warn', cyclic, new Uint8Array(3), () => 1, class A {}, new Date(0), /re/g);
    console.error('error', null, undefined, NaN, -0, new Headers({ a: 'b' }), new URL('https://x/'));
    console.debug('debug');
    console.table([{ a: 1 }, { a: 2 }]);
    console.dir({ deep: { deeper: { deepest: {} } } }, { depth: 0 });
    console.group('group');
    console.groupEnd();
    console.count();
    console.count();
    console.countReset();
    console.time('t');
    console.timeLog('t', 'extra');
    console.timeEnd('t');
    console.assert(false, 'assertion %s', 'message');
    console.trace('trace');
    return new Response('logged\n');
  },
};
