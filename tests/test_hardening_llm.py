"""An LLM server that trickles its answer a byte at a time is bounded by the card's timeout_s in all."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchlib.cards import ToolCard
from orchlib.tools import build_tool

ANSWER = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "slow"}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()


@pytest.fixture
def trickling_url():
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(ANSWER)))
            self.end_headers()
            for byte in ANSWER:  # each gap is far shorter than the timeout; the whole is far longer
                if stop.wait(0.05):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    stop.set()
    httpd.shutdown()
    httpd.server_close()


def test_a_trickling_server_is_a_timeout_after_timeout_s(trickling_url):
    assert len(ANSWER) * 0.05 > 4  # unbounded, the answer would take over 4 s
    card = ToolCard(name="slow", kind="llm", description="a model",
                    parameters={"type": "object", "properties": {"prompt": {"type": "string"}}},
                    backend={"client": "openai", "base_url": trickling_url, "model": "m", "timeout_s": 0.5})
    t0 = time.perf_counter()
    obs = build_tool(card).call_sync({"prompt": "hi"})
    elapsed = time.perf_counter() - t0
    assert obs.error_kind == "timeout" and "within 0.5 s" in obs.error
    assert elapsed < 1.5
