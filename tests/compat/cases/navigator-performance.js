/* compat
[{"path": "/"}]
*/
// navigator and performance: shapes that agree, and the user agent, which
// names each platform.
export default {
  fetch() {
    const t0 = performance.now();
    return Response.json({
      userAgent: navigator.userAgent,
      nowType: typeof t0,
      monotonic: performance.now() >= t0,
      timeOrigin: typeof performance.timeOrigin,
      tags: [Object.prototype.toString.call(navigator), Object.prototype.toString.call(performance)],
    });
  },
};
