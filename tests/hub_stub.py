"""A local stand-in for the Hugging Face Hub's HTTP API, enough for ``HfApi.create_repo`` and ``upload_folder``.

    hub = HubStub.start(); os.environ["HF_ENDPOINT"] = hub.url   # then the real huggingface_hub client talks to it
    hub.files["org/name"]  # {path in the repo: bytes} of every committed file;  hub.stop()

It answers the endpoints the client calls for a push (repo creation, the model card's metadata check, the
pre-upload query, which it answers "regular" for every file so contents travel inline in the commit, and the
commit itself), records each request with its ``Authorization`` header, and fails requests with a chosen status
when ``fail_with`` is set.
"""
from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple


class HubStub:
    def __init__(self) -> None:
        self.files: Dict[str, Dict[str, bytes]] = {}
        self.created: List[str] = []
        self.requests: List[Tuple[str, str, Optional[str]]] = []  # (method, path, Authorization header)
        self.fail_with: Optional[int] = None
        self.server: Optional[ThreadingHTTPServer] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    @classmethod
    def start(cls) -> "HubStub":
        hub = cls()
        hub.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        threading.Thread(target=hub.server.serve_forever, daemon=True).start()
        return hub

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(hub: HubStub) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _reply(self, payload: dict, status: int = 200) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            hub.requests.append(("GET", self.path, self.headers.get("authorization")))
            self._reply({"error": "not served by the stub"}, 404)

        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hub.requests.append(("POST", self.path, self.headers.get("authorization")))
            if hub.fail_with:
                return self._reply({"error": "refused by the stub"}, hub.fail_with)
            base = f"http://{self.headers['Host']}"
            if self.path == "/api/repos/create":
                body = json.loads(data)
                repo = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
                hub.created.append(repo)
                return self._reply({"url": f"{base}/{repo}"})
            if self.path == "/api/validate-yaml":
                return self._reply({"errors": [], "warnings": []})
            if "/preupload/" in self.path:
                files = json.loads(data)["files"]
                return self._reply({"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                              for f in files]})
            if "/commit/" in self.path:
                repo = self.path.split("/api/models/", 1)[1].split("/commit/", 1)[0]
                for line in data.decode().splitlines():
                    item = json.loads(line)
                    if item["key"] == "file":
                        content = base64.b64decode(item["value"]["content"])
                        hub.files.setdefault(repo, {})[item["value"]["path"]] = content
                return self._reply({"commitUrl": f"{base}/{repo}/commit/{'0' * 40}", "commitOid": "0" * 40})
            self._reply({"error": "not served by the stub"}, 404)
    return Handler
