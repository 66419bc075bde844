import { run } from './logic.js';
export default {
  fetch(request, env) {
    return run(env.DB, (fn) => env.DB.transactionSync(fn), new URL(request.url));
  },
};
