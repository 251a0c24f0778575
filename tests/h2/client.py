#!/usr/bin/python3
"""A scripted HTTP/2 client for the integration tests (tests/src/h2.rs).

Reads a plan (JSON) on stdin, runs each connection's steps in its own
thread over TLS (ALPN h2) and prints what every stream got (JSON) on stdout.

Plan: {"port": N, "host": "a.test", "timeout_s": 20,
       "conns": [{"steps": [STEP, ...]}, ...]}
Steps:
  {"send": N, "path": "/p", "headers": {"name": "value"}}
      opens N streams, GET PATH0 .. PATH{N-1} (indexes go on across sends)
  {"wait": K}         until K of this connection's streams have ended
  {"wait_status": K}  until K of its streams have their response headers
  {"sleep_ms": MS}    keeps reading meanwhile
  {"reset": [I, ...]} RST_STREAM (CANCEL) on those streams (send order)
  {"close": true}     closes the connection (TCP, no GOAWAY)
  {"signal": NAME} / {"await": NAME}  orders steps across connections
After its last step a connection that is still open closes.

Output: {"conns": [{"streams": [{"path", "status", "t_ms", "ended",
         "reset_by_server", "reset_by_client"}], "error": null | "..."}]}
`t_ms` is when the response headers came, from the start of the run.
Every wait is bounded by timeout_s: a step that times out ends the
connection's steps with an error.
"""

import json
import socket
import ssl
import sys
import threading
import time

import h2.config
import h2.connection
import h2.events

START = time.monotonic()


def now_ms():
    return int((time.monotonic() - START) * 1000)


class Conn:
    def __init__(self, plan, events):
        self.port = plan["port"]
        self.host = plan.get("host", "a.test")
        self.timeout = plan.get("timeout_s", 20)
        self.events = events
        self.streams = []  # dicts, in send order
        self.by_id = {}
        self.error = None
        self.closed = False

    def connect(self):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.sock = ctx.wrap_socket(raw, server_hostname=self.host)
        if self.sock.selected_alpn_protocol() != "h2":
            raise RuntimeError("ALPN chose %r, not h2" % self.sock.selected_alpn_protocol())
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=cfg)
        self.h2.initiate_connection()
        self.flush()

    def flush(self):
        data = self.h2.data_to_send()
        if data and not self.closed:
            self.sock.sendall(data)

    def pump(self, until):
        """Reads and handles frames until `until()` holds; False on timeout."""
        deadline = time.monotonic() + self.timeout
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.closed:
                return until()
            self.sock.settimeout(min(left, 0.05))
            try:
                data = self.sock.recv(65535)
            except (socket.timeout, ssl.SSLWantReadError):
                continue
            except OSError as e:
                self.error = self.error or "recv: %s" % e
                self.closed = True
                continue
            if not data:
                self.closed = True
                continue
            for ev in self.h2.receive_data(data):
                self.handle(ev)
            self.flush()
        return True

    def handle(self, ev):
        s = self.by_id.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.ResponseReceived) and s is not None:
            for k, v in ev.headers:
                if k == ":status":
                    s["status"] = int(v)
            s["t_ms"] = now_ms()
        elif isinstance(ev, h2.events.DataReceived):
            self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded) and s is not None:
            s["ended"] = True
        elif isinstance(ev, h2.events.StreamReset) and s is not None:
            s["ended"] = True
            s["reset_by_server"] = bool(ev.remote_reset)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.closed = True

    def ended(self):
        return sum(1 for s in self.streams if s["ended"])

    def answered(self):
        return sum(1 for s in self.streams if s["status"] is not None)

    def step(self, st):
        if "send" in st:
            for _ in range(st["send"]):
                sid = self.h2.get_next_available_stream_id()
                path = "%s%d" % (st.get("path", "/s"), len(self.streams))
                hdrs = [(":method", "GET"), (":scheme", "https"),
                        (":authority", self.host), (":path", path)]
                hdrs += [(k.lower(), v) for k, v in st.get("headers", {}).items()]
                self.h2.send_headers(sid, hdrs, end_stream=True)
                s = {"path": path, "status": None, "t_ms": None, "ended": False,
                     "reset_by_server": False, "reset_by_client": False, "id": sid}
                self.streams.append(s)
                self.by_id[sid] = s
            self.flush()
        elif "wait" in st:
            return self.pump(lambda: self.ended() >= st["wait"]) or "wait %d" % st["wait"]
        elif "wait_status" in st:
            k = st["wait_status"]
            return self.pump(lambda: self.answered() >= k) or "wait_status %d" % k
        elif "sleep_ms" in st:
            end = time.monotonic() + st["sleep_ms"] / 1000
            self.pump(lambda: time.monotonic() >= end)
            if self.closed:  # pump returned early: sleep the rest
                time.sleep(max(0.0, end - time.monotonic()))
        elif "reset" in st:
            for i in st["reset"]:
                s = self.streams[i]
                self.h2.reset_stream(s["id"], error_code=8)  # CANCEL
                s["ended"] = True
                s["reset_by_client"] = True
            self.flush()
        elif "close" in st:
            self.close()
        elif "signal" in st:
            self.events.setdefault(st["signal"], threading.Event()).set()
        elif "await" in st:
            ev = self.events.setdefault(st["await"], threading.Event())
            end = time.monotonic() + self.timeout
            while not ev.is_set():
                if time.monotonic() > end:
                    return "await %s" % st["await"]
                self.pump(lambda: ev.is_set() or time.monotonic() > end)
                if self.closed:
                    time.sleep(0.01)
        return True

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def run(self, steps):
        try:
            self.connect()
            for st in steps:
                r = self.step(st)
                if r is not True:
                    self.error = "timed out: %s" % r
                    break
        except Exception as e:  # reported, never hidden
            self.error = "%s: %s" % (type(e).__name__, e)
        finally:
            if hasattr(self, "sock"):
                self.close()


def main():
    plan = json.load(sys.stdin)
    events = {}  # shared; dict.setdefault is atomic under the GIL
    conns = [Conn(plan, events) for _ in plan["conns"]]
    threads = [threading.Thread(target=c.run, args=(p["steps"],))
               for c, p in zip(conns, plan["conns"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = {"conns": [{"streams": [{k: v for k, v in s.items() if k != "id"}
                                  for s in c.streams],
                      "error": c.error} for c in conns]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
