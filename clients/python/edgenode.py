"""edgenode's control API from Python: the standard library only (3.8+).

    from edgenode import Edgenode
    node = Edgenode(url="http://127.0.0.1:8081", token=token)
    answer = node.run(code="export function run(x) { return x * 2 }", input=21)
    node.deploy("hello", code='export default { fetch() { return new Response("hi") } }')
    for line in node.tail("hello"):
        print(line)

Every failure is raised as an EdgenodeError (or one of its subclasses) with
the HTTP status and the node's JSON answer: callers branch on the class,
never on message text.
"""

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request

__all__ = [
    "Edgenode", "EdgenodeError", "ConnectionError", "AuthError", "NotFoundError",
    "BadRequestError", "CodeError", "LimitError", "UnavailableError",
]


class EdgenodeError(Exception):
    """A call failed; status is the HTTP status (0 when none), body the node's JSON."""

    def __init__(self, message, status=0, body=None):
        super().__init__(message)
        self.status = status
        self.body = body
        self.kind = body.get("kind") if isinstance(body, dict) else None


class ConnectionError(EdgenodeError):  # noqa: A001 (the API's own name)
    """The node could not be reached, or answered something that is not its API."""


class AuthError(EdgenodeError):
    """401/403: no token, or the wrong one."""


class NotFoundError(EdgenodeError):
    """404: no such worker, secret or route."""


class BadRequestError(EdgenodeError):
    """400/409/413/422: the request itself is wrong."""


class CodeError(EdgenodeError):
    """/v1/run: the code did not compile, link, or threw; module, line, column say where."""

    def __init__(self, message, status=0, body=None):
        super().__init__(message, status, body)
        body = body if isinstance(body, dict) else {}
        self.module = body.get("module")
        self.line = body.get("line")
        self.column = body.get("column")


class LimitError(EdgenodeError):
    """503/504 with a limit's kind: the code hit its CPU, memory or wall-time limit."""


class UnavailableError(EdgenodeError):
    """503 otherwise: the node (or its fleet) cannot take this now; retry_after in seconds."""

    def __init__(self, message, status=0, body=None, retry_after=None):
        super().__init__(message, status, body)
        self.retry_after = retry_after


_LIMIT_KINDS = {"cpu", "memory", "wall"}
_CODE_KINDS = {"syntax", "link", "exception", "no_handler", "bad_return"}


def _error_for(status, body, headers):
    message = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), str) \
        else "HTTP %d" % status
    kind = body.get("kind") if isinstance(body, dict) else None
    if kind in _LIMIT_KINDS:
        return LimitError(message, status, body)
    if kind in _CODE_KINDS:
        return CodeError(message, status, body)
    if status in (401, 403):
        return AuthError(message, status, body)
    if status == 404:
        return NotFoundError(message, status, body)
    if status == 503:
        ra = headers.get("Retry-After") if headers is not None else None
        return UnavailableError(message, status, body, float(ra) if ra else None)
    if 400 <= status < 500:
        return BadRequestError(message, status, body)
    return EdgenodeError(message, status, body)


def _modules_of(code, modules, main):
    if code is not None and modules is not None:
        raise TypeError("give either code or modules, not both")
    if modules is not None:
        return {"modules": modules, "main_module": main or next(iter(modules))}
    if isinstance(code, str):
        name = main or "index.js"
        return {"modules": {name: code}, "main_module": name}
    raise TypeError("code (a str) or modules (a dict) is required")


class Edgenode:
    """A node's control API. url defaults to $EDGENODE_URL or http://127.0.0.1:8081,
    token to $EDGENODE_TOKEN."""

    def __init__(self, url=None, token=None, timeout=60.0):
        self.url = (url or os.environ.get("EDGENODE_URL") or "http://127.0.0.1:8081").rstrip("/")
        self.token = token if token is not None else os.environ.get("EDGENODE_TOKEN")
        self.timeout = timeout

    def _open(self, method, path, payload=None, timeout=None):
        headers = {}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        data = None
        if payload is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(payload).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            raise _error_for(e.code, body, e.headers) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            raise ConnectionError("cannot reach %s: %s" % (self.url, getattr(e, "reason", e))) from e

    def _call(self, method, path, payload=None):
        with self._open(method, path, payload) as res:
            raw = res.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ConnectionError("%s %s: the answer is not JSON" % (method, path), 200, raw) from None

    def run(self, code=None, modules=None, main=None, **fields):
        """Runs code once in a fresh sandbox (POST /v1/run). fields: input, request, env,
        egress, facet, limits, as docs/control-api.md describes them. Returns the node's
        JSON: result or status/headers/body, plus logs, exception, cpu_ms, wall_ms, cold
        where reported. as_ (a keyword in Python) is the run's "as": the worker whose
        secret grants its egress rules borrow. A failure of the code itself raises CodeError or LimitError."""
        spec = _modules_of(code, modules, main)
        if "as_" in fields:  # "as" is a Python keyword
            fields["as"] = fields.pop("as_")
        for k in ("input", "request", "env", "egress", "as", "facet", "limits", "tail_id"):
            if k in fields:
                spec[k] = fields.pop(k)
        if fields:
            raise TypeError("unknown run() fields: " + ", ".join(sorted(fields)))
        return self._call("POST", "/v1/run", spec)

    def deploy(self, name, code=None, modules=None, main=None, bindings=None, egress=None,
               limits=None):
        """Deploys (or redeploys) a worker."""
        spec = _modules_of(code, modules, main)
        for k, v in (("bindings", bindings), ("egress", egress), ("limits", limits)):
            if v is not None:
                spec[k] = v
        return self._call("PUT", "/v1/workers/" + urllib.parse.quote(name, safe=""), spec)

    def delete(self, name, purge=False):
        """Deletes a worker; purge=True drops its facet too."""
        q = "?purge=true" if purge else ""
        return self._call("DELETE", "/v1/workers/" + urllib.parse.quote(name, safe="") + q)

    def workers(self):
        return self._call("GET", "/v1/workers")

    def worker(self, name):
        return self._call("GET", "/v1/workers/" + urllib.parse.quote(name, safe=""))

    def put_secret(self, name, value, workers=None):
        body = {"value": value}
        if workers is not None:
            body["workers"] = list(workers)
        return self._call("PUT", "/v1/secrets/" + urllib.parse.quote(name, safe=""), body)

    def node_info(self):
        return self._call("GET", "/v1/node")

    def tail(self, name, status=None, sample=None, timeout=None):
        """Yields a worker's live log lines (GET /v1/workers/{name}/tail) as dicts until
        the node ends the stream or the caller stops iterating (which closes it)."""
        q = {}
        if status:
            q["status"] = status
        if sample is not None:
            q["sample"] = str(sample)
        path = "/v1/workers/" + urllib.parse.quote(name, safe="") + "/tail"
        if q:
            path += "?" + urllib.parse.urlencode(q)
        res = self._open("GET", path, timeout=timeout or 3600)
        try:
            for raw in res:
                line = raw.strip()
                if line:
                    yield json.loads(line)
        finally:
            res.close()
