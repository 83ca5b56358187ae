"""A Hugging Face Hub-compatible HTTP server for the test suite.

Code that pushes to and loads from the Hub is tested with the real, unpatched ``huggingface_hub``
client talking to this server on ``127.0.0.1``. The server runs in-process on a background thread
(``http.server.ThreadingHTTPServer``), keeps file contents in a content-addressed blob store in a
temporary directory and the git-like history in memory: every commit gets a 40-hex sha and a full
snapshot of its files (path -> blob oid), branches point at commits, and any older commit stays
readable by its sha.

Endpoints served (``{type}`` is ``models``, ``datasets`` or ``spaces``; ``{repo}`` is
``namespace/name`` with a user or an organization as namespace; ``{rev}`` is a branch, a full commit
sha or an unambiguous sha prefix of at least 7 characters):

====================================================  ==========================================
``GET  /api/whoami-v2``                               token check (401 for a bad token)
``POST /api/repos/create``                            create_repo (409 if it exists)
``POST /api/validate-yaml``                           model card front matter check (400 if bad)
``GET  /api/{type}/{repo}[/revision/{rev}]``          model_info / repo_info (siblings, sha, ...)
``GET  /api/{type}/{repo}/tree/{rev}[/{path}]``       list_repo_tree / list_repo_files
``GET  /api/{type}/{repo}/refs``                      list_repo_refs
``POST /api/{type}/{repo}/preupload/{rev}``           upload modes: always ``regular`` (inline)
``POST /api/{type}/{repo}/commit/{rev}``              create_commit (ndjson: header, file, deleted*)
``POST /api/{type}/{repo}/branch/{branch}``           create_branch
``HEAD|GET /[datasets/|spaces/]{repo}/resolve/{rev}/{path}``  file metadata and download
====================================================  ==========================================

Errors carry the ``X-Error-Code`` header (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``) that the client maps to its exceptions. As on the Hub, a missing repo and a
private repo one cannot read look the same: 401 without a token, 404 with a valid one; an unknown
token gets 401 "Invalid credentials in Authorization header" everywhere. Every upload is inline
(base64 in the commit payload): preupload never answers ``lfs``, so neither LFS nor Xet is involved.

Pointing the client at the server
---------------------------------
``huggingface_hub`` reads ``HF_ENDPOINT``, ``HF_HOME``, ``HF_HUB_DISABLE_XET``, ... once, when
``huggingface_hub.constants`` is imported, and builds a module-level ``HfApi`` instance whose
endpoint is fixed at that moment (``huggingface_hub.model_info``, ``upload_file``, ... are bound
methods of it, and ``ModelCard.push_to_hub`` and timm use them). In a pytest process the client is
normally imported long before a fixture can start a server on a free port, so setting environment
variables is not enough. :func:`configure_client` therefore does both:

* it sets the environment variables (``HF_ENDPOINT``, ``HF_TOKEN``, ``HF_HOME``, ``HF_HUB_CACHE``,
  ``HF_HUB_DISABLE_XET``, ``HF_HUB_DISABLE_TELEMETRY``, ...), which subprocesses and anything read
  at call time (the token) pick up;
* it overrides the configuration values captured at import time: the ``huggingface_hub.constants``
  values derived from them and ``huggingface_hub.hf_api.api.endpoint``.

Only configuration *values* are replaced (with ``monkeypatch``, undone after each test); no client
function is patched, so every request goes through the client's real code paths. Xet must be
disabled explicitly because ``hf_xet`` is installed: otherwise ``upload_folder`` takes the Xet
upload pipeline instead of preupload + commit. Copies made elsewhere at import time (e.g.
transformers' ``HF_MODULES_CACHE`` for remote code) are not redirected; nothing here needs them.
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

TOKEN = "hf_test_token_testuser"  # write token of USER, member of ORG
OTHER_TOKEN = "hf_test_token_otheruser"  # a second, valid user outside ORG
USER, OTHER_USER, ORG = "testuser", "otheruser", "testorg"

GITATTRIBUTES = b"*.bin filter=lfs diff=lfs merge=lfs -text\n*.safetensors filter=lfs diff=lfs merge=lfs -text\n"


def git_blob_oid(data: bytes) -> str:
    """The git sha1 of a blob: what the Hub reports as ``oid``/``ETag`` of a regular file."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None,
                 body: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers, self.body = status, message, code, headers or {}, body


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    date: str
    files: dict[str, str]  # path -> blob oid: the full snapshot, so every revision stays readable


@dataclass
class Repo:
    type: str
    id: str
    private: bool
    created: str
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit oid
    commits: dict[str, Commit] = field(default_factory=dict)


class HubServer:
    """The Hub state plus the HTTP server thread. Use as a context manager, or ``start()``/``stop()``."""

    def __init__(self, root: str | Path, tokens: dict[str, str] | None = None,
                 orgs: dict[str, set[str]] | None = None):
        self.blobs = Path(root) / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.tokens = tokens if tokens is not None else {TOKEN: USER, OTHER_TOKEN: OTHER_USER}
        self.orgs = orgs if orgs is not None else {ORG: {USER}}
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[str] = []  # "METHOD path status", for assertions on what the client sent
        self.errors: list[str] = []  # tracebacks of server-side bugs (answered with 500)
        self.lock = threading.RLock()
        self._counter = itertools.count()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.hub = self
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="hub-server",
                                        daemon=True)

    def start(self) -> "HubServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- storage -------------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        oid = git_blob_oid(data)
        path = self.blobs / oid
        if not path.exists():
            path.write_bytes(data)
        return oid

    def blob(self, oid: str) -> bytes:
        return (self.blobs / oid).read_bytes()

    def blob_size(self, oid: str) -> int:
        return (self.blobs / oid).stat().st_size

    def can_write(self, user: str | None, namespace: str) -> bool:
        return user is not None and (namespace == user or user in self.orgs.get(namespace, ()))

    def create_repo(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_type, repo_id, private, _now())
        self.repos[(repo_type, repo_id)] = repo
        self.add_commit(repo, "main", None, "initial commit", {".gitattributes": self.put_blob(GITATTRIBUTES)})
        return repo

    def add_commit(self, repo: Repo, branch: str, parent: str | None, title: str, files: dict[str, str]) -> Commit:
        """Record a commit with the given full snapshot and move ``branch`` to it."""
        material = json.dumps([repo.id, parent, title, sorted(files.items()), next(self._counter)])
        commit = Commit(hashlib.sha1(material.encode()).hexdigest(), parent, title, _now(), dict(files))
        repo.commits[commit.oid] = commit
        repo.branches[branch] = commit.oid
        return commit

    def commit_at(self, repo: Repo, rev: str) -> Commit:
        """The commit a branch name, a full sha or an unambiguous sha prefix (>= 7 chars) points to."""
        if rev in repo.branches:
            return repo.commits[repo.branches[rev]]
        matches = [c for oid, c in repo.commits.items() if len(rev) >= 7 and oid.startswith(rev.lower())]
        if len(matches) == 1:
            return matches[0]
        raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")


_REPO = r"/api/(?P<type>models|datasets|spaces)/(?P<repo>[^/]+/[^/]+)"
ROUTES = [  # (methods, path regex on the still percent-encoded path, handler name)
    ("GET", r"/api/whoami-v2", "whoami"),
    ("POST", r"/api/repos/create", "create_repo"),
    ("POST", r"/api/validate-yaml", "validate_yaml"),
    ("GET", _REPO + r"(?:/revision/(?P<rev>[^/]+))?", "repo_info"),
    ("GET", _REPO + r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?", "tree"),
    ("GET", _REPO + r"/refs", "refs"),
    ("POST", _REPO + r"/preupload/(?P<rev>[^/]+)", "preupload"),
    ("POST", _REPO + r"/commit/(?P<rev>[^/]+)", "commit"),
    ("POST", _REPO + r"/branch/(?P<rev>[^/]+)", "create_branch"),
    ("GET HEAD", r"/(?:(?P<type>datasets|spaces)/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)",
     "resolve"),
]
ROUTES = [(methods.split(), re.compile(pattern), name) for methods, pattern, name in ROUTES]
_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space", None: "model"}


class _Handler(BaseHTTPRequestHandler):
    server_version = "hub-test-server"

    # --- plumbing ------------------------------------------------------------------------------
    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def log_message(self, *args):  # keep test output quiet; requests are recorded in hub.requests
        pass

    @property
    def hub(self) -> HubServer:
        return self.server.hub

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            for methods, pattern, name in ROUTES:
                match = pattern.fullmatch(url.path)
                if method in methods and match:
                    args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                    with self.hub.lock:
                        status, body, headers = getattr(self, name)(**args)
                    break
            else:
                raise HubError(404, f"No route for {method} {url.path}")
        except HubError as e:
            status, body = e.status, {"error": e.message, **(e.body or {})}
            headers = {"X-Error-Message": e.message, **({"X-Error-Code": e.code} if e.code else {}), **e.headers}
        except Exception:
            self.hub.errors.append(traceback.format_exc())
            status, body, headers = 500, {"error": self.hub.errors[-1]}, {}
        self.hub.requests.append(f"{method} {url.path} {status}")
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        headers.setdefault("Content-Type", "application/json" if not isinstance(body, bytes) else
                           "application/octet-stream")
        for key, value in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(key, value)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _user(self) -> str | None:
        """The authenticated user, ``None`` when anonymous; 401 for an unknown token."""
        auth = self.headers.get("Authorization")
        if not auth:
            return None
        user = self.hub.tokens.get(auth.removeprefix("Bearer ").strip())
        if user is None:
            raise HubError(401, "Invalid credentials in Authorization header")
        return user

    def _repo(self, type: str | None, repo: str, write: bool = False) -> Repo:
        user = self._user()
        found = self.hub.repos.get((_PLURAL[type], repo))
        can_write = self.hub.can_write(user, repo.split("/")[0])
        if found is None or (found.private and not can_write):
            raise HubError(401 if user is None else 404, "Repository not found", "RepoNotFound")
        if write and not can_write:
            raise HubError(403 if user else 401, f"You don't have the rights to write to {repo}")
        return found

    def _repo_url(self, repo: Repo) -> str:
        prefix = "" if repo.type == "model" else f"{repo.type}s/"
        return f"{self.hub.url}/{prefix}{repo.id}"

    # --- endpoints -----------------------------------------------------------------------------
    def whoami(self):
        user = self._user()
        if user is None:
            raise HubError(401, "Invalid credentials in Authorization header")
        orgs = [{"type": "org", "name": org, "fullname": org, "roleInOrg": "admin"}
                for org, members in sorted(self.hub.orgs.items()) if user in members]
        return 200, {"type": "user", "id": hashlib.sha1(user.encode()).hexdigest()[:24], "name": user,
                     "fullname": user.title(), "email": f"{user}@example.com", "emailVerified": True,
                     "isPro": False, "orgs": orgs,
                     "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": "write"}}}, {}

    def create_repo(self):
        body = json.loads(self._body())
        user = self._user()
        if user is None:
            raise HubError(401, "You must be authenticated to create a repo")
        namespace = body.get("organization") or user
        repo_type, repo_id = body.get("type") or "model", f"{namespace}/{body['name']}"
        if not self.hub.can_write(user, namespace):
            raise HubError(403, f"You don't have the rights to create a {repo_type} under the namespace {namespace}")
        private = body.get("visibility", "private" if body.get("private") else "public") == "private"
        if (repo_type, repo_id) in self.hub.repos:
            existing = self.hub.repos[(repo_type, repo_id)]  # `create_repo(exist_ok=True)` reads the url
            raise HubError(409, f"You already created this {repo_type} repo", body={"url": self._repo_url(existing)})
        repo = self.hub.create_repo(repo_type, repo_id, private)
        return 200, {"url": self._repo_url(repo), "name": repo_id, "id": repo_id}, {}

    def validate_yaml(self):
        try:
            metadata = _front_matter(json.loads(self._body())["content"])
        except ValueError as e:
            return 400, {"errors": [{"message": str(e)}], "warnings": []}, {}
        return 200, {"errors": [], "warnings": [] if metadata else [{"message": "empty or missing yaml metadata"}]}, {}

    def repo_info(self, type, repo, rev="main"):
        r = self._repo(type, repo)
        commit = self.hub.commit_at(r, rev)
        card = _front_matter(self.hub.blob(commit.files["README.md"]).decode()) if "README.md" in commit.files else {}
        blobs = self.query.get("blobs") in ("1", "true", "True")
        siblings = [{"rfilename": p, **({"size": self.hub.blob_size(o), "blobId": o} if blobs else {})}
                    for p, o in sorted(commit.files.items())]
        return 200, {"_id": r.id, "id": r.id, "modelId": r.id, "author": r.id.split("/")[0], "sha": commit.oid,
                     "lastModified": commit.date, "createdAt": r.created, "private": r.private, "gated": False,
                     "disabled": False, "downloads": 0, "likes": 0, "tags": card.get("tags") or [],
                     "library_name": card.get("library_name"), "pipeline_tag": card.get("pipeline_tag"),
                     "cardData": card or None, "siblings": siblings, "spaces": [],
                     "usedStorage": sum(self.hub.blob_size(o) for o in set(commit.files.values()))}, {}

    def tree(self, type, repo, rev, path=""):
        r = self._repo(type, repo)
        commit = self.hub.commit_at(r, rev)
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        recursive = self.query.get("recursive") in ("1", "true", "True")
        files = {p: o for p, o in commit.files.items() if p.startswith(prefix)}
        if prefix and not files:
            raise HubError(404, f"{path} does not exist on {rev}", "EntryNotFound",
                           {"X-Repo-Commit": commit.oid})
        entries, dirs = [], set()
        for p, oid in sorted(files.items()):
            parts = p[len(prefix):].split("/")
            dirs.update(prefix + "/".join(parts[:i]) for i in range(1, len(parts) if recursive else min(2, len(parts))))
            if recursive or len(parts) == 1:
                entries.append({"type": "file", "oid": oid, "size": self.hub.blob_size(oid), "path": p})
        for d in sorted(dirs):
            below = sorted((p, o) for p, o in commit.files.items() if p.startswith(d + "/"))
            entries.append({"type": "directory", "oid": hashlib.sha1(json.dumps(below).encode()).hexdigest(),
                            "size": 0, "path": d})
        return 200, entries, {}

    def refs(self, type, repo):
        r = self._repo(type, repo)
        branches = [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": oid} for b, oid in sorted(r.branches.items())]
        return 200, {"branches": branches, "converts": [], "tags": [], "pullRequests": []}, {}

    def preupload(self, type, repo, rev):
        r = self._repo(type, repo, write=True)
        _no_pull_requests(self.query)
        commit = self.hub.commit_at(r, rev)
        files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                  "oid": commit.files.get(f["path"])} for f in json.loads(self._body())["files"]]
        return 200, {"files": files, "commitOid": commit.oid}, {}

    def commit(self, type, repo, rev):
        r = self._repo(type, repo, write=True)
        _no_pull_requests(self.query)
        if rev not in r.branches:
            raise HubError(404, f"Invalid rev id: {rev} (commits go to an existing branch)", "RevisionNotFound")
        head = r.commits[r.branches[rev]]
        files, title = dict(head.files), "Upload"
        for line in self._body().splitlines():
            if not line.strip():
                continue
            op = json.loads(line)
            key, value = op["key"], op["value"]
            if key == "header":
                title = value["summary"]
                parent = value.get("parentCommit")
                if parent and not head.oid.startswith(parent):
                    raise HubError(412, f"A commit has happened since {parent}: {rev} is at {head.oid}")
            elif key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, f"Unsupported encoding {value['encoding']!r}")
                files[value["path"]] = self.hub.put_blob(base64.b64decode(value["content"]))
            elif key == "deletedFile":
                if files.pop(value["path"], None) is None:
                    raise HubError(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
            elif key == "deletedFolder":
                folder = value["path"].rstrip("/") + "/"
                files = {p: o for p, o in files.items() if not p.startswith(folder)}
            else:  # lfsFile/... never happen: preupload always answers "regular"
                raise HubError(400, f"Unsupported commit operation {key!r} (this server takes inline files only)")
        commit = self.hub.add_commit(r, rev, head.oid, title, files)
        return 200, {"success": True, "commitOid": commit.oid, "commitMessage": title,
                     "commitUrl": f"{self._repo_url(r)}/commit/{commit.oid}", "hookOutput": "",
                     "pullRequestUrl": None}, {}

    def create_branch(self, type, repo, rev):
        r = self._repo(type, repo, write=True)
        start = json.loads(self._body() or b"{}").get("startingPoint") or "main"
        if rev in r.branches:
            raise HubError(409, f"Reference already exists: refs/heads/{rev}")
        r.branches[rev] = self.hub.commit_at(r, start).oid
        return 200, {}, {}

    def resolve(self, repo, rev, path, type=None):
        r = self._repo(type, repo)
        commit = self.hub.commit_at(r, rev)
        oid = commit.files.get(path)
        if oid is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit.oid})
        return 200, self.hub.blob(oid), {"X-Repo-Commit": commit.oid, "ETag": f'"{oid}"'}


def _front_matter(content: str) -> dict:
    """The YAML metadata block of a model card (``{}`` if none); ValueError when it is not a mapping."""
    match = re.match(r"\A\ufeff?---\r?\n(.*?)^---\s*$", content, flags=re.S | re.M)
    if not match:
        return {}
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as e:
        raise ValueError(f"Invalid YAML in model card metadata: {e}") from None
    if data is not None and not isinstance(data, dict):
        raise ValueError("Model card metadata must be a YAML mapping")
    return data or {}


def _no_pull_requests(query: dict) -> None:
    if query.get("create_pr") in ("1", "true", "True"):
        raise HubError(400, "Pull requests are not supported by this test server")


def configure_client(server: HubServer, hf_home: str | Path, monkeypatch, token: str = TOKEN) -> None:
    """Point the already imported ``huggingface_hub`` (and subprocesses) at ``server``.

    Sets the environment and replaces the configuration values ``huggingface_hub`` captured at import
    time (see the module docstring); ``monkeypatch`` undoes everything after the test.
    """
    from huggingface_hub import constants, hf_api

    hf_home = Path(hf_home)
    cache = hf_home / "hub"
    env = {"HF_ENDPOINT": server.url, "HF_TOKEN": token, "HF_HOME": str(hf_home), "HF_HUB_CACHE": str(cache),
           "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
           "HF_HUB_DISABLE_IMPLICIT_TOKEN": "0"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE",
                "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH", "HUGGINGFACE_CO_STAGING"):
        monkeypatch.delenv(key, raising=False)
    values = {"ENDPOINT": server.url,
              "HUGGINGFACE_CO_URL_TEMPLATE": server.url + "/{repo_id}/resolve/{revision}/{filename}",
              "HF_HOME": str(hf_home), "HF_HUB_CACHE": str(cache), "HUGGINGFACE_HUB_CACHE": str(cache),
              "HF_ASSETS_CACHE": str(hf_home / "assets"), "HF_XET_CACHE": str(hf_home / "xet"),
              "HF_TOKEN_PATH": str(hf_home / "token"), "HF_STORED_TOKENS_PATH": str(hf_home / "stored_tokens"),
              "HF_HUB_DISABLE_XET": True, "HF_HUB_DISABLE_TELEMETRY": True, "HF_HUB_OFFLINE": False,
              "HF_HUB_DISABLE_IMPLICIT_TOKEN": False}
    for name, value in values.items():
        monkeypatch.setattr(constants, name, value)
    monkeypatch.setattr(hf_api.api, "endpoint", server.url)
