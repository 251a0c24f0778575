#!/usr/bin/python3
"""Scripted TLS clients for the global-mode tests (tests/src/tls.rs).

Reads a plan (JSON) on stdin, runs each connection's steps in its own
thread and prints what each handshake did (JSON) on stdout.

Plan: {"port": N, "timeout_s": 20, "conns": [{"sni": "a.test" | null,
       "source": "127.0.0.2" | null, "steps": [STEP, ...]}, ...]}
Steps:
  {"hello": true, "timeout_ms": MS}
                       connects and completes the TLS handshake (or fails;
                       timeout_ms, if given, gives up sooner than timeout_s)
  {"get": "/path"}     one HTTP/1.1 request on the connection, Host: the SNI
  {"sleep_ms": MS}
  {"signal": NAME} / {"await": NAME}  orders steps across connections
  {"close": true}      closes the connection
A failed handshake ends the connection's steps, but its signals are still
raised (so no other connection waits for them in vain). After its last
step a connection that is still open closes.

Output: {"conns": [{"ok": true|false|null, "error": null | "...",
         "start_ms", "done_ms", "status": null | N}]}
`ok` is null if no hello step ran; times are ms from the start of the run.
Every wait is bounded by timeout_s.
"""

import json
import socket
import ssl
import sys
import threading
import time

START = time.monotonic()


def now_ms():
    return int((time.monotonic() - START) * 1000)


class Signals:
    def __init__(self):
        self.cond = threading.Condition()
        self.raised = set()

    def signal(self, name):
        with self.cond:
            self.raised.add(name)
            self.cond.notify_all()

    def wait(self, name, timeout):
        with self.cond:
            return self.cond.wait_for(lambda: name in self.raised, timeout)


def run_conn(plan, conn, signals, out):
    timeout = plan.get("timeout_s", 20)
    sni = conn.get("sni")
    res = {"ok": None, "error": None, "start_ms": None, "done_ms": None, "status": None}
    out.append(res)
    tls = None
    steps = conn.get("steps", [])
    failed = False
    for step in steps:
        if failed:
            if "signal" in step:
                signals.signal(step["signal"])
            continue
        try:
            if "hello" in step:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                raw.settimeout(step.get("timeout_ms", timeout * 1000) / 1000)
                if conn.get("source"):
                    raw.bind((conn["source"], 0))
                res["start_ms"] = now_ms()
                raw.connect(("127.0.0.1", plan["port"]))
                tls = ctx.wrap_socket(raw, server_hostname=sni, do_handshake_on_connect=False)
                try:
                    tls.do_handshake()
                except (OSError, ssl.SSLError):
                    tls.close()
                    tls = None
                    raise
                tls.settimeout(timeout)
                res["done_ms"] = now_ms()
                res["ok"] = True
            elif "get" in step:
                host = sni or "a.test"
                req = f"GET {step['get']} HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\n\r\n"
                tls.sendall(req.encode())
                head = b""
                while b"\r\n" not in head:
                    chunk = tls.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                line = head.split(b"\r\n", 1)[0].split()
                res["status"] = int(line[1]) if len(line) > 1 else None
            elif "sleep_ms" in step:
                time.sleep(step["sleep_ms"] / 1000)
            elif "signal" in step:
                signals.signal(step["signal"])
            elif "await" in step:
                if not signals.wait(step["await"], timeout):
                    raise TimeoutError(f"await {step['await']}")
            elif "close" in step:
                if tls is not None:
                    tls.close()
                    tls = None
        except (OSError, ssl.SSLError, TimeoutError, ValueError) as e:
            res["done_ms"] = now_ms()
            if "hello" in step:
                res["ok"] = False
            res["error"] = f"{type(e).__name__}: {e}"
            failed = True
    if tls is not None:
        tls.close()


def main():
    plan = json.load(sys.stdin)
    signals = Signals()
    outs = [[] for _ in plan["conns"]]
    threads = [
        threading.Thread(target=run_conn, args=(plan, c, signals, outs[i]), daemon=True)
        for i, c in enumerate(plan["conns"])
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + plan.get("timeout_s", 20) * 3
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    conns = [o[0] if o else {"ok": None, "error": "did not run"} for o in outs]
    for t, c in zip(threads, conns):
        if t.is_alive():
            c["error"] = c.get("error") or "still running at the deadline"
    json.dump({"conns": conns}, sys.stdout)


if __name__ == "__main__":
    main()
