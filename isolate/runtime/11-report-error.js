// reportError and queueMicrotask: an error nobody catches is logged, as the
// platform does, never rethrown. Timers and event listeners report theirs
// here too. (43-globals.js installs both globals.)
//
// Takes from
//   00-util.js: requireArgs
//   10-console.js: consoleWrite, inspectValue

const resolvedPromise = Promise.resolve();

function queueMicrotask(callback) {
  requireArgs(arguments.length, 1, 'queueMicrotask', 'ServiceWorkerGlobalScope');
  if (typeof callback !== 'function') {
    throw new TypeError("Failed to execute 'queueMicrotask' on 'ServiceWorkerGlobalScope': parameter 1 is not of type 'Function'.");
  }
  resolvedPromise.then(() => {
    try {
      callback();
    } catch (err) {
      reportError(err);
    }
  });
}

// An uncaught error: logged, as the platform does, never rethrown.
function reportError(error) {
  requireArgs(arguments.length, 1, 'reportError', 'ServiceWorkerGlobalScope');
  consoleWrite(3, `Uncaught ${inspectValue(error)}`);
}
