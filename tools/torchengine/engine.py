#!/usr/bin/env python3
"""A PyTorch LLM engine laid out like vLLM V1, for the tests.

Two processes: this one, the API server (OpenAI /v1/completions and
/v1/chat/completions, streamed as server-sent events, one handler thread per
connection), and an engine-core process it starts, which runs the model:
each step a batch of the running requests (a prompt's prefill, or one
decode token each), through a stack of transformer-like blocks (matrix
products and GELU, torch's intra-op threads: --threads), and sends each
request's token back. The two talk over a pipe, as vLLM's front end and
engine core talk over a socket.

The model's weights are random: the text is words drawn from a fixed
vocabulary by the model's output, the work per token is a real forward pass.
torch's thread pool keeps its default wait policy (its threads spin between
operations before they sleep), as a deployed engine does.

    python3 engine.py --port 8000 --threads 2 --slots 2
"""

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ("the a of to and in is it that was for on are with as be at this have from or one had by word but not what all were "
         "we when your can said there use an each which she do how their if will up other about out many then them these so "
         "some her would make like him into time has look two more write go see number no way could people my than first "
         "water been call who oil its now find long down day did get come made may part").split()


def core(conn, threads, slots, dim, layers, child=True):
    """The engine core: one step per loop, the running requests batched."""
    if child:
        # The core dies with the API server, however that ends.
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            return
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    blocks = [(torch.randn(dim, 4 * dim) / dim ** 0.5, torch.randn(4 * dim, dim) / (4 * dim) ** 0.5) for _ in range(layers)]
    embed = torch.randn(len(WORDS), dim)
    head = torch.randn(dim, len(WORDS)) / dim ** 0.5

    def forward(x):
        for up, down in blocks:
            x = x + torch.nn.functional.gelu(x @ up) @ down
            x = torch.nn.functional.layer_norm(x, (dim,))
        return x

    waiting, running = [], []  # requests: [id, tokens left, last hidden, prompt ids]
    conn.send(("ready", os.getpid()))
    with torch.no_grad():
        while True:
            # Block for work when idle, else take what arrived.
            while not running and not waiting or conn.poll():
                msg = conn.recv()
                if msg is None:
                    return
                rid, prompt, n = msg
                ids = [hash(w) % len(WORDS) for w in prompt.split()] or [0]
                waiting.append([rid, n, None, ids])
            # Admit one waiting request's prefill into the step when a slot is free.
            out = []
            if waiting and len(running) < slots:
                r = waiting.pop(0)
                h = forward(embed[r[3]].unsqueeze(0))  # [1, prompt, dim]
                r[2] = h[0, -1]
                running.append(r)
            elif running:
                x = torch.stack([r[2] for r in running])  # [batch, dim]
                h = forward(x)
                for r, v in zip(running, h):
                    r[2] = v
            if not running:
                continue
            ids = (torch.stack([r[2] for r in running]) @ head).argmax(dim=1).tolist()
            done = []
            for r, i in zip(running, ids):
                r[1] -= 1
                out.append((r[0], " " + WORDS[i], r[1] <= 0))
                if r[1] <= 0:
                    done.append(r)
            for r in done:
                running.remove(r)
            conn.send(("tokens", out))


class Front:
    """The API server's side of the pipe: requests in, tokens routed out."""

    def __init__(self, conn):
        self.conn = conn
        self.lock = threading.Lock()
        self.streams = {}
        self.next = 0
        self.started = time.time()
        self.served = 0
        threading.Thread(target=self.route, daemon=True).start()

    def submit(self, prompt, n):
        q = queue.Queue()
        with self.lock:
            self.next += 1
            rid = self.next
            self.streams[rid] = q
            self.conn.send((rid, prompt, n))
        return rid, q

    def route(self):
        while True:
            try:
                kind, body = self.conn.recv()
            except EOFError:
                os._exit(1)
            if kind != "tokens":
                continue
            for rid, text, last in body:
                with self.lock:
                    q = self.streams.get(rid)
                    if last:
                        self.streams.pop(rid, None)
                        self.served += 1
                if q is not None:
                    q.put((text, last))


def handler(front, model):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body):
            b = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self):
            chat = self.path.endswith("/chat/completions")
            if not chat and not self.path.endswith("/completions"):
                self.reply(404, {"error": "not found"})
                return
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = " ".join(m.get("content", "") for m in req["messages"]) if chat else req["prompt"]
                n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
            except (ValueError, KeyError, TypeError) as e:
                self.reply(400, {"error": {"message": "bad request: %s" % e}})
                return
            if not isinstance(prompt, str):
                prompt = " ".join(map(str, prompt))
            rid, q = front.submit(prompt, max(1, n))
            created = int(time.time())
            if not req.get("stream"):
                text = "".join(q.get()[0] for _ in range(n))
                msg = {"role": "assistant", "content": text}
                choice = {"index": 0, "finish_reason": "length", **({"message": msg} if chat else {"text": text})}
                self.reply(200, {"id": "cmpl-%d" % rid, "object": "chat.completion" if chat else "text_completion",
                                 "created": created, "model": model, "choices": [choice],
                                 "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": n}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            obj = "chat.completion.chunk" if chat else "text_completion"

            def chunk(data):
                b = ("data: %s\n\n" % data).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
                self.wfile.flush()

            try:
                while True:
                    text, last = q.get()
                    c = {"index": 0, "finish_reason": "length" if last else None}
                    if chat:
                        c["delta"] = {"content": text}
                    else:
                        c["text"] = text
                    chunk(json.dumps({"id": "cmpl-%d" % rid, "object": obj, "created": created, "model": model, "choices": [c]}))
                    if last:
                        break
                chunk("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return H


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads of the engine core")
    ap.add_argument("--slots", type=int, default=2, help="requests decoded together at most")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--model", default="torch-tiny")
    ap.add_argument("--one-process", action="store_true", help="run the engine core in a thread of this process")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ctx = mp.get_context("fork")  # no thread yet, and no resource tracker process
    ours, theirs = ctx.Pipe()
    if a.one_process:
        threading.Thread(target=core, args=(theirs, a.threads, a.slots, a.dim, a.layers, False), daemon=True, name="engine-core").start()
    else:
        ctx.Process(target=core, args=(theirs, a.threads, a.slots, a.dim, a.layers), daemon=True, name="engine-core").start()
    kind, pid = ours.recv()
    front = Front(ours)
    srv = ThreadingHTTPServer((a.host, a.port), handler(front, a.model))
    srv.daemon_threads = True
    print("listening on http://%s:%d (engine core pid %d, %d threads, %d slots)" % (a.host, srv.server_address[1], pid, a.threads, a.slots), flush=True)
    try:
        srv.serve_forever()
    finally:
        try:
            ours.send(None)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
