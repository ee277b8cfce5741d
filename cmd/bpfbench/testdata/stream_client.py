#!/usr/bin/env python3
"""An independent streaming client for the live view's tests: not
bpfbench's load generator. STREAMS threads each keep one keep-alive
connection and stream completions one after the other until SECONDS have
passed. With --slow, each connection has a small receive buffer and reads
READ bytes every PAUSE seconds (a slow reader). Each connection's local
port is printed as it connects: "port N"."""
import argparse, http.client, json, socket, sys, threading, time

p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, required=True)
p.add_argument("--streams", type=int, default=4)
p.add_argument("--seconds", type=float, default=10)
p.add_argument("--max-tokens", type=int, default=64)
p.add_argument("--model", default="m")
p.add_argument("--slow", action="store_true")
p.add_argument("--read", type=int, default=64)
p.add_argument("--pause", type=float, default=0.05)
a = p.parse_args()
stop = time.time() + a.seconds
lock = threading.Lock()


class Conn(http.client.HTTPConnection):
    def connect(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if a.slow:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((self.host, self.port))
        self.sock = s
        with lock:
            print("port", s.getsockname()[1], flush=True)


def worker():
    c = Conn(a.host, a.port, timeout=60)
    while time.time() < stop:
        body = json.dumps({"model": a.model, "prompt": "hello " * 8, "max_tokens": a.max_tokens,
                           "stream": True, "ignore_eos": True})
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            while time.time() < stop + 5:
                b = r.read(a.read) if a.slow else r.readline()
                if not b:
                    break
                if a.slow:
                    time.sleep(a.pause)
            r.close()
        except (http.client.HTTPException, OSError) as e:
            # A server that closes a keep-alive connection after some
            # requests (llama-server's HTTP library does): a new one.
            print("reconnect:", repr(e), file=sys.stderr, flush=True)
            c.close()
            c = Conn(a.host, a.port, timeout=60)
            time.sleep(0.05)


ts = [threading.Thread(target=worker, daemon=True) for _ in range(a.streams)]
for t in ts:
    t.start()
for t in ts:
    t.join()
