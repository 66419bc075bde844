// The runtime's clock: performance.now() and performance.timeOrigin, which
// console.time() and Event.timeStamp read too.
//
// Takes nothing from the files before it.
//
// The origin is read at first use, in a worker: a time taken while the
// runtime loads would be the snapshot's, the same for every worker.

let performanceOrigin = 0;
let performanceLast = 0;

function performanceTimeOrigin() {
  if (performanceOrigin === 0) performanceOrigin = Date.now();
  return performanceOrigin;
}

// Milliseconds since the time origin, never going backwards even if the
// wall clock does.
function performanceNow() {
  let t = Date.now() - performanceTimeOrigin();
  if (t < performanceLast) t = performanceLast;
  performanceLast = t;
  return t;
}
