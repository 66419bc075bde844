"""Drives clients/python/edgenode.py against a real node whose control API is
$EDGENODE_URL (token $EDGENODE_TOKEN); started by tests/e2e/clients.test.mjs.
Prints one line per check and exits non-zero on the first failure."""

import os
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

import edgenode  # noqa: E402


def check(name, cond, detail=""):
    if not cond:
        print("FAIL %s %s" % (name, detail))
        sys.exit(1)
    print("ok %s" % name)


node = edgenode.Edgenode()

answer = node.run(code="export function run(input) { return { doubled: input.n * 2 }; }",
                  input={"n": 21})
check("run returns the result", answer.get("result") == {"doubled": 42}, answer)

answer = node.run(code='export default { fetch(req) { return new Response("hi " + req.method); } };')
check("run reports logs and timings", "cpu_ms" in answer and "logs" in answer, answer)
answer_facet = node.run(code="export function run(i, env) { env.DB.exec('CREATE TABLE IF NOT EXISTS m (v)'); "
                             "env.DB.exec('INSERT INTO m VALUES (1)'); return env.DB.exec('SELECT count(*) AS n FROM m').one().n; }",
                        input=0, facet="py-memory")
again = node.run(code="export function run(i, env) { return env.DB.exec('SELECT count(*) AS n FROM m').one().n; }",
                 input=0, facet="py-memory")
check("a named facet outlives the sandbox", answer_facet.get("result") == 1 and again.get("result") == 1, again)
try:
    node.run(code="export function run() {}", input=0,
             egress=[{"match": "http://127.0.0.1:9/", "inject": {"headers": {"A": "${secret:NOPE}"}}}], as_="nosuch")
    check("an unknown 'as' worker raises BadRequestError", False)
except edgenode.BadRequestError as e:
    check("an unknown 'as' worker raises BadRequestError", e.status == 400, e.body)
check("run returns a response", answer.get("status") == 200 and answer.get("body") == "hi GET", answer)

try:
    node.run(code="export function run( {", input=1)
    check("a syntax error raises CodeError", False)
except edgenode.CodeError as e:
    check("a syntax error raises CodeError", e.status == 400 and e.kind == "syntax" and e.line == 1, e.body)

try:
    node.run(code="export function run() { for (;;) {} }", input=1, limits={"cpu_ms": 20})
    check("a spin raises LimitError", False)
except edgenode.LimitError as e:
    check("a spin raises LimitError", e.status == 503 and e.kind == "cpu", e.body)

deployed = node.deploy("pyclient", code='export default { fetch() { return new Response("deployed"); } };')
check("deploy answers the version", deployed.get("version") == 1, deployed)
check("worker() reads it back", node.worker("pyclient").get("name") == "pyclient")
names = [w.get("name") for w in node.workers().get("workers", [])]
check("workers() lists it", "pyclient" in names, names)

try:
    node.deploy("pyclient", code="export default {")
    check("code that does not compile raises CodeError", False)
except edgenode.CodeError as e:
    check("code that does not compile raises CodeError", e.status == 400 and e.line == 1, e.body)

try:
    node.deploy("pyclient", code="export default {}", limits={"cpu_ms": -1})
    check("a bad spec raises BadRequestError", False)
except edgenode.BadRequestError as e:
    check("a bad spec raises BadRequestError", e.status == 400, e.body)

node.delete("pyclient")
try:
    node.worker("pyclient")
    check("a deleted worker raises NotFoundError", False)
except edgenode.NotFoundError as e:
    check("a deleted worker raises NotFoundError", e.status == 404)

try:
    edgenode.Edgenode(token="wrong-token").workers()
    check("a wrong token raises AuthError", False)
except edgenode.AuthError as e:
    check("a wrong token raises AuthError", e.status in (401, 403))

try:
    edgenode.Edgenode(url="http://127.0.0.1:1").workers()
    check("an unreachable node raises ConnectionError", False)
except edgenode.ConnectionError:
    check("an unreachable node raises ConnectionError", True)

# tail: a line the worker logs comes through node.tail()
node.deploy("pytail", code='export default { fetch() { console.log("from pytail"); return new Response("t"); } };')
lines = []
def reader():
    for line in node.tail("pytail", timeout=20):
        lines.append(line)
        if any("from pytail" in str(l) for l in lines):
            return
t = threading.Thread(target=reader, daemon=True)
t.start()
for _ in range(100):
    if not t.is_alive():
        break
    req = urllib.request.Request(os.environ["EDGENODE_INGRESS"] + "/", headers={"Host": "pytail.localhost"})
    urllib.request.urlopen(req, timeout=5).read()
    time.sleep(0.1)
t.join(5)
check("tail yields the worker's console line", any("from pytail" in str(l) for l in lines), lines[:5])

print("all passed")
