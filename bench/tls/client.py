#!/usr/bin/python3
"""TLS handshakes for `ats-bench tls` (bench/src/tls_client.rs).

One JSON command per line on stdin, one JSON answer per line on stdout, so
the bench can zero and dump callgrind around exactly the handshakes it asks
for, with Python's start-up outside every window. Commands:

  {"cmd": "hello", "port": P, "sni": "a.test", "source": "127.0.0.1",
   "n": N, "interval_ms": 0, "timeout_s": 30}
      N full TLS 1.3 handshakes one after the other, each from a new socket
      bound to `source`, closed right after the handshake (or its failure).
      With interval_ms, handshake i starts at i * interval_ms from the first
      (later if the one before took longer). Answer: {"ok": k, "failed": f,
      "errors": {"message": count}, "us": [handshake times, connect to
      handshake done, in microseconds, successful ones only]}.
  {"cmd": "hold", "port": P, "sni": S, "source": A, "timeout_s": 30}
      one handshake, kept open until "release": {"ok": true} or
      {"ok": false, "error": "..."}.
  {"cmd": "release"}                  closes the held connections.
  {"cmd": "clienthello", "sni": S}    the first flight of a TLS 1.3 client,
      made without a socket (ssl.MemoryBIO): {"hex": "..."}.
End of input ends the process. Every socket operation is bounded by its
timeout_s, and a hello command by n * (interval_ms + timeout_s).
"""

import json
import socket
import ssl
import sys
import time


def context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return ctx


CTX = context()
HELD = []


def handshake(port, sni, source, timeout_s):
    """A connected, handshaken SSLSocket and its handshake time in µs."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        raw.settimeout(timeout_s)
        if source:
            raw.bind((source, 0))
        t0 = time.perf_counter()
        raw.connect(("127.0.0.1", port))
        tls = CTX.wrap_socket(raw, server_hostname=sni, do_handshake_on_connect=False)
        tls.do_handshake()
        return tls, (time.perf_counter() - t0) * 1e6
    except BaseException:
        raw.close()
        raise


def hello(c):
    res = {"ok": 0, "failed": 0, "errors": {}, "us": []}
    interval = c.get("interval_ms", 0) / 1000.0
    start = time.monotonic()
    for i in range(c["n"]):
        if interval:
            wait = start + i * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        try:
            tls, us = handshake(c["port"], c.get("sni"), c.get("source"), c.get("timeout_s", 30))
            tls.close()
            res["ok"] += 1
            res["us"].append(round(us, 1))
        except (OSError, ssl.SSLError) as e:
            res["failed"] += 1
            msg = f"{type(e).__name__}: {e}"
            res["errors"][msg] = res["errors"].get(msg, 0) + 1
    return res


def hold(c):
    try:
        tls, _ = handshake(c["port"], c.get("sni"), c.get("source"), c.get("timeout_s", 30))
    except (OSError, ssl.SSLError) as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    HELD.append(tls)
    return {"ok": True}


def release(_c):
    while HELD:
        HELD.pop().close()
    return {"ok": True}


def clienthello(c):
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = CTX.wrap_bio(incoming, outgoing, server_side=False, server_hostname=c["sni"])
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return {"hex": outgoing.read().hex()}


COMMANDS = {"hello": hello, "hold": hold, "release": release, "clienthello": clienthello}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        fn = COMMANDS.get(c.get("cmd"))
        out = fn(c) if fn else {"error": f"unknown command {c.get('cmd')!r}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    release({})


if __name__ == "__main__":
    main()
