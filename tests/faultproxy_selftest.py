# SPDX-License-Identifier: MIT
"""Self-test for tests/faultproxy.py.

Starts a small HTTP/1.1 upstream server (http.server, keep-alive) in this
process, starts faultproxy.py in front of it as a child process, and
drives it with curl and http.client.  Prints PASS/FAIL per check and
exits non-zero if any check failed.

  python3 tests/faultproxy_selftest.py [-v]

Upstream endpoints (any path):
  GET  ?size=N     N bytes of fixed pseudo-random data (default 4 MiB)
  GET  /chunked... the same with Transfer-Encoding: chunked
  GET  ...close=1  close the connection after the answer, unannounced
  HEAD             the GET headers, no body
  PUT              reads the body (Content-Length or chunked), answers
                   JSON {"len": N, "sha256": HEX}
  DELETE           204 No Content
"""

import hashlib
import http.client
import http.server
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
PROXY = os.path.join(HERE, "faultproxy.py")
MiB = 1 << 20
DATA = random.Random(1234).randbytes(4 * MiB)
VERBOSE = "-v" in sys.argv

failures = []
passes = 0


def check(name, ok, detail=""):
    global passes
    if ok:
        passes += 1
        print("PASS %s" % name, flush=True)
    else:
        failures.append(name)
        print("FAIL %s%s" % (name, (": " + detail) if detail else ""),
              flush=True)
    return ok


def data_of(size):
    if size <= len(DATA):
        return DATA[:size]
    reps = size // len(DATA) + 1
    return (DATA * reps)[:size]


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---------------------------------------------------------------- upstream
class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "selftest-upstream"

    def log_message(self, fmt, *args):
        if VERBOSE:
            sys.stderr.write("upstream: " + (fmt % args) + "\n")

    def _size(self):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        return int(q.get("size", [str(4 * MiB)])[0])

    def _head(self, size, chunked=False):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(size))
        self.end_headers()

    def do_GET(self):
        size = self._size()
        body = data_of(size)
        chunked = self.path.startswith("/chunked")
        self._head(size, chunked)
        step = 65536
        for off in range(0, size, step):
            part = body[off:off + step]
            if chunked:
                self.wfile.write(b"%x\r\n" % len(part) + part + b"\r\n")
            else:
                self.wfile.write(part)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        if "close=1" in self.path:
            # close the keep-alive connection without announcing it
            self.close_connection = True

    def do_HEAD(self):
        self._head(self._size())

    def do_DELETE(self):
        self.send_response(204)
        self.end_headers()

    def do_PUT(self):
        h = hashlib.sha256()
        n = 0
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n",
                                                            b""):
                        pass
                    break
                left = size
                while left:
                    b = self.rfile.read(min(left, 65536))
                    if not b:
                        raise ConnectionError("short chunk")
                    h.update(b)
                    n += len(b)
                    left -= len(b)
                self.rfile.readline(16)
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                b = self.rfile.read(min(left, 65536))
                if not b:
                    raise ConnectionError("short body")
                h.update(b)
                n += len(b)
                left -= len(b)
        body = json.dumps({"len": n, "sha256": h.hexdigest(),
                           "te": self.headers.get("Transfer-Encoding"),
                           "expect": self.headers.get("Expect"),
                           "host": self.headers.get("Host")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class UpstreamServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # the proxy resets upstream connections on purpose (reset/truncate)
        if VERBOSE:
            super().handle_error(request, client_address)


def start_upstream():
    srv = UpstreamServer(("127.0.0.1", 0), Upstream)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv


# ---------------------------------------------------------------- proxy
ALL_PROXIES = []


def _die_with_parent():
    """Child side: get SIGTERM if this self-test dies (Linux, best effort)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PDEATHSIG
    except Exception:
        pass


class ProxyProc:
    def __init__(self, upstream_port, *extra, port_file=None):
        cmd = [sys.executable, PROXY, "--upstream",
               "127.0.0.1:%d" % upstream_port, "--max-seconds", "120"]
        if port_file:
            cmd += ["--port-file", port_file]
        cmd += list(extra)
        self.errf = tempfile.TemporaryFile()
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                  stderr=self.errf,
                                  preexec_fn=_die_with_parent)
        ALL_PROXIES.append(self)
        line = self.p.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.p.kill()
            raise RuntimeError("proxy did not start: %r" % line)
        self.port = int(line.split()[1])

    def stderr(self):
        self.errf.seek(0)
        return self.errf.read().decode("utf-8", "replace")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


class Ctl:
    def __init__(self, port):
        self.port = port

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/__fault__/" + path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, json.loads(body)

    def set(self, *rules):
        q = "&".join("rule=" + urllib.parse.quote(r, safe="=,")
                     for r in rules)
        st, js = self.get("set?" + q)
        if st != 200:
            raise RuntimeError("set failed: %s" % js)
        return js

    def clear(self):
        return self.get("clear")[1]

    def stats(self):
        return self.get("stats")[1]


def curl(args, timeout=60):
    """Run curl; returns (exit code, stdout bytes, stderr text, seconds)."""
    t0 = time.monotonic()
    p = subprocess.run(["curl", "-sS", "--noproxy", "*"] + args,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    return (p.returncode, p.stdout, p.stderr.decode("utf-8", "replace"),
            time.monotonic() - t0)


def raw_exchange(port, request, timeout=10):
    """Send raw bytes, read until EOF/RST.  Returns (data, how)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(request)
    buf = bytearray()
    how = "eof"
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            buf += b
    except ConnectionResetError:
        how = "reset"
    except socket.timeout:
        how = "timeout"
    s.close()
    return bytes(buf), how


def split_response(data):
    i = data.find(b"\r\n\r\n")
    if i < 0:
        return data, b""
    return data[:i + 4], data[i + 4:]


# ---------------------------------------------------------------- tests
def main():
    srv = start_upstream()
    up = srv.server_address[1]
    tmp = tempfile.mkdtemp(prefix="faultproxy-selftest.")
    portfile = os.path.join(tmp, "port")
    px = ProxyProc(up, "--rule", "action=500,path=/never-matches",
                   port_file=portfile)
    base = "http://127.0.0.1:%d" % px.port
    ctl = Ctl(px.port)
    try:
        run_checks(px, ctl, base, up, tmp, portfile)
    except Exception as e:
        import traceback
        traceback.print_exc()
        check("no exception in self-test", False, repr(e))
    finally:
        rc = px.stop()
        check("proxy exits 0 on SIGTERM", rc == 0, "rc=%s" % rc)
        for other in ALL_PROXIES:
            other.stop()
        if failures or VERBOSE:
            sys.stderr.write("---- proxy stderr ----\n" + px.stderr())
        srv.shutdown()
        srv.server_close()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    print("%d passed, %d failed%s" % (passes, len(failures),
                                      (": " + ", ".join(failures))
                                      if failures else ""))
    return 1 if failures else 0


def run_checks(px, ctl, base, up, tmp, portfile):
    with open(portfile) as f:
        check("port file holds the port", f.read().strip() == str(px.port))
    st = ctl.stats()
    check("initial rule from --rule", len(st["rules"]) == 1
          and st["rules"][0]["action"] == "500")
    ctl.clear()

    out = os.path.join(tmp, "out")
    # --- pass-through GET, byte exact
    rc, code, err, _ = curl(["-o", out, "-w", "%{http_code}", base + "/obj"])
    with open(out, "rb") as f:
        got = f.read()
    check("GET 4 MiB pass-through byte-exact",
          rc == 0 and code == b"200" and got == DATA,
          "rc=%d code=%s len=%d %s" % (rc, code, len(got), err))

    rc, code, err, _ = curl(["-o", out, "-w", "%{http_code}",
                             base + "/chunked?size=3000001"])
    with open(out, "rb") as f:
        got = f.read()
    check("GET chunked response pass-through byte-exact",
          rc == 0 and code == b"200" and got == data_of(3000001),
          "rc=%d code=%s len=%d %s" % (rc, code, len(got), err))

    # --- PUT 20 MiB with Expect: 100-continue
    big = os.path.join(tmp, "big")
    bigdata = data_of(20 * MiB)
    with open(big, "wb") as f:
        f.write(bigdata)
    rc, body, err, _ = curl(["-v", "-T", big, base + "/bucket/big"])
    try:
        js = json.loads(body)
    except ValueError:
        js = {}
    check("PUT 20 MiB byte-exact (curl)",
          rc == 0 and js.get("len") == len(bigdata)
          and js.get("sha256") == sha(bigdata), "rc=%d %r" % (rc, body[:200]))
    check("PUT used Expect: 100-continue and got 100 Continue relayed",
          "Expect: 100-continue" in err and "HTTP/1.1 100 Continue" in err
          and js.get("expect") == "100-continue")
    check("Host header forwarded unchanged",
          js.get("host") == "127.0.0.1:%d" % px.port, repr(js.get("host")))

    rc, body, err, _ = curl(["-T", big, "-H", "Transfer-Encoding: chunked",
                             base + "/bucket/bigchunked"])
    try:
        js = json.loads(body)
    except ValueError:
        js = {}
    check("PUT 20 MiB chunked request body byte-exact",
          rc == 0 and js.get("len") == len(bigdata)
          and js.get("sha256") == sha(bigdata)
          and js.get("te") == "chunked", "rc=%d %r" % (rc, body[:200]))

    # --- HEAD
    rc, hdr, err, t = curl(["-I", base + "/obj?size=12345"], timeout=10)
    check("HEAD works (no body, Content-Length kept)",
          rc == 0 and b" 200 " in hdr.split(b"\r\n")[0]
          and b"Content-Length: 12345" in hdr and t < 2,
          "rc=%d %r %s" % (rc, hdr, err))

    # --- keep-alive: several requests on one client connection
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    ok = True
    detail = []
    c.request("GET", "/__fault__/stats")
    r = c.getresponse()
    acc0 = json.loads(r.read())["connections"]["accepted"]
    for i in range(3):
        c.request("GET", "/obj?size=%d" % (100000 + i))
        r = c.getresponse()
        b = r.read()
        ok &= r.status == 200 and b == data_of(100000 + i)
    c.request("HEAD", "/obj")
    r = c.getresponse()
    ok &= r.status == 200 and r.read() == b""
    c.request("PUT", "/bucket/k", body=DATA[:300000])
    r = c.getresponse()
    ok &= json.loads(r.read()).get("sha256") == sha(DATA[:300000])
    c.request("DELETE", "/bucket/k")
    r = c.getresponse()
    ok &= r.status == 204 and r.read() == b""
    c.request("GET", "/chunked?size=70000")
    r = c.getresponse()
    ok &= r.status == 200 and r.read() == data_of(70000)
    c.request("GET", "/__fault__/stats")
    r = c.getresponse()
    acc1 = json.loads(r.read())["connections"]["accepted"]
    detail.append("accepted %d -> %d" % (acc0, acc1))
    c.close()
    check("keep-alive: 9 requests (GET/HEAD/PUT/204/chunked) on one "
          "connection", ok and acc1 == acc0, "; ".join(detail))

    rc, _, err, _ = curl(["-v", "-o", "/dev/null", "-o", "/dev/null",
                          "-o", "/dev/null", base + "/obj?size=1000",
                          base + "/obj?size=2000", base + "/obj?size=3000"])
    check("keep-alive: curl reuses its connection",
          rc == 0 and err.count("Re-using existing connection") >= 2,
          "rc=%d" % rc)

    # --- upstream closes an idle keep-alive connection: proxy reconnects
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    errs0 = ctl.stats()["upstream_errors"]
    ok = True
    for i, pause in enumerate((0, 0.2, 0, 0.2, 0, 0)):
        c.request("GET", "/obj?size=%d&close=1" % (1000 + i))
        r = c.getresponse()
        ok &= r.status == 200 and r.read() == data_of(1000 + i)
        time.sleep(pause)
    c.close()
    check("upstream closing idle connections is handled (reconnect)",
          ok and ctl.stats()["upstream_errors"] == errs0)

    # --- reset delivers the bytes before the RST even to a slow reader
    ctl.set("action=reset,bytes=300000,count=1")
    s = socket.create_connection(("127.0.0.1", px.port), timeout=10)
    s.sendall(b"GET /obj HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.5)
    buf = bytearray()
    how = "eof"
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            buf += b
    except ConnectionResetError:
        how = "reset"
    s.close()
    hd, body = split_response(bytes(buf))
    check("reset bytes=300000 with a slow reader: 300000 bytes then RST",
          how == "reset" and body == DATA[:300000],
          "how=%s body=%d" % (how, len(body)))
    ctl.clear()

    # --- 503 count=2
    ctl.set("action=503,count=2")
    codes = []
    bodies = []
    for i in range(3):
        rc, b, err, _ = curl(["-w", "\n%{http_code}",
                              base + "/obj?size=1000"])
        bodies.append(b)
        codes.append(b.rsplit(b"\n", 1)[-1])
    check("503 count=2: two 503 SlowDown then success",
          codes == [b"503", b"503", b"200"]
          and b"<Code>SlowDown</Code>" in bodies[0]
          and b"Please reduce your request rate." in bodies[0]
          and bodies[2][:1000] == DATA[:1000], repr(codes))
    st = ctl.stats()
    check("stats: 503 rule spent, counts",
          st["faults"].get("503") == 2 and st["rules"][0]["remaining"] == 0
          and st["rules"][0]["fired"] == 2, json.dumps(st))

    # 503 on a keep-alive connection: connection survives (PUT body drained)
    ctl.set("action=503,method=PUT,count=1")
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    c.request("PUT", "/bucket/x", body=DATA[:MiB])
    r = c.getresponse()
    b1 = r.read()
    s1 = r.status
    c.request("PUT", "/bucket/x", body=DATA[:MiB])
    r = c.getresponse()
    js = json.loads(r.read())
    c.close()
    check("503 on PUT (no Expect) keeps the connection usable",
          s1 == 503 and b"SlowDown" in b1 and js.get("len") == MiB,
          "s1=%d" % s1)

    # 503 on a PUT with Expect: 100-continue: answered at once, no body sent
    ctl.set("action=503,method=PUT,count=1")
    rc, b, err, t = curl(["-v", "-T", big, "-w", "\n%{http_code}",
                          base + "/bucket/big"])
    code = b.rsplit(b"\n", 1)[-1]
    rc2, b2, err2, _ = curl(["-T", big, base + "/bucket/big"])
    try:
        js = json.loads(b2)
    except ValueError:
        js = {}
    check("503 on PUT with Expect: 100-continue, then retry succeeds",
          rc == 0 and code == b"503" and t < 5 and rc2 == 0
          and js.get("sha256") == sha(bigdata),
          "rc=%d code=%s t=%.2f rc2=%d" % (rc, code, t, rc2))

    # --- 500
    ctl.set("action=500,count=1")
    rc, b, err, _ = curl(["-w", "\n%{http_code}", base + "/obj?size=10"])
    check("500 InternalError",
          b.endswith(b"\n500") and b"<Code>InternalError</Code>" in b,
          repr(b[-200:]))
    rc, code, err, _ = curl(["-I", "-o", "/dev/null", "-w", "%{http_code}",
                             base + "/obj"])
    check("rule spent after count=1", rc == 0 and code == b"200")

    # --- reset
    ctl.set("action=reset,count=1")
    rc, _, err, _ = curl(["-o", out, base + "/obj"])
    check("reset gives curl error 56/18", rc in (56, 18),
          "rc=%d %s" % (rc, err.strip()))
    ctl.set("action=reset,bytes=100000,count=1")
    data, how = raw_exchange(px.port, b"GET /obj HTTP/1.1\r\nHost: x\r\n\r\n")
    hd, body = split_response(data)
    check("reset bytes=100000: RST after at most 100000 body bytes",
          how == "reset" and b"Content-Length: 4194304" in hd
          and len(body) <= 100000 and body == DATA[:len(body)],
          "how=%s body=%d" % (how, len(body)))
    ctl.set("action=reset,count=1,method=HEAD")
    rc, _, err, _ = curl(["-I", base + "/obj"])
    check("reset on HEAD (no body) gives a curl error", rc != 0,
          "rc=%d" % rc)

    # --- truncate
    ctl.set("action=truncate,count=1")
    rc, _, err, _ = curl(["-o", out, base + "/obj"])
    check("truncate gives curl error 18", rc == 18,
          "rc=%d %s" % (rc, err.strip()))
    ctl.set("action=truncate,bytes=12345,count=1")
    data, how = raw_exchange(px.port, b"GET /obj HTTP/1.1\r\nHost: x\r\n\r\n")
    hd, body = split_response(data)
    check("truncate bytes=12345: clean FIN after exactly 12345 body bytes",
          how == "eof" and len(body) == 12345 and body == DATA[:12345],
          "how=%s body=%d" % (how, len(body)))
    ctl.set("action=truncate,count=1")
    rc, _, err, _ = curl(["-o", out, base + "/chunked?size=200000"])
    check("truncate of a chunked body gives a curl error", rc in (18, 56),
          "rc=%d %s" % (rc, err.strip()))

    # --- drop
    ctl.set("action=drop,count=1")
    rc, _, err, t = curl(["--max-time", "2", "-o", out, base + "/obj"])
    check("drop: curl times out (28) with --max-time 2",
          rc == 28 and 1.8 < t < 4, "rc=%d t=%.2f" % (rc, t))

    # --- delay
    ctl.clear()
    rc, _, _, t0 = curl(["-o", out, base + "/obj?size=1000"])
    ctl.set("action=delay,ms=500,count=1")
    rc1, _, _, t1 = curl(["-o", out, base + "/obj?size=1000"])
    check("delay ms=500 adds ~0.5 s",
          rc == 0 and rc1 == 0 and 0.45 <= t1 - t0 <= 1.5,
          "plain %.3f delayed %.3f" % (t0, t1))

    # --- slow
    ctl.set("action=slow,bps=1000000,count=1")
    rc, _, err, t = curl(["-o", out, "-w", "%{speed_download}",
                          base + "/obj?size=2000000"])
    with open(out, "rb") as f:
        got = f.read()
    check("slow bps=1000000: 2 MB takes ~2 s, data intact",
          rc == 0 and 1.8 <= t <= 4 and got == data_of(2000000),
          "rc=%d t=%.2f" % (rc, t))

    # --- refuse
    ctl.set("action=refuse,count=1")
    rc, _, err, _ = curl(["-o", out, base + "/obj"])
    check("refuse: connection reset before any reply (curl 56/52)",
          rc in (56, 52), "rc=%d %s" % (rc, err.strip()))

    # --- matching: method, path, after, every, count; first rule wins
    ctl.set("action=500,method=GET,path=/m/,after=1,every=2,count=2",
            "action=503,path=/m/x5")
    codes = []
    for i in range(7):
        rc, code, _, _ = curl(["-o", "/dev/null", "-w", "%{http_code}",
                               base + "/m/x%d?size=10" % i])
        codes.append(code.decode())
        # a PUT and a non-matching path must not count
        curl(["-o", "/dev/null", "-T", "/dev/null", base + "/m/put"])
        curl(["-o", "/dev/null", base + "/other?size=10"])
    want = ["200", "200", "500", "200", "500", "503", "200"]
    check("matching method/path/after/every/count, first rule wins",
          codes == want, "got %s want %s" % (codes, want))
    st = ctl.stats()
    r0, r1 = st["rules"]
    check("stats per-rule matched/fired/remaining",
          r0["fired"] == 2 and r0["remaining"] == 0 and r0["matched"] == 5
          and r1["fired"] == 1 and r1["remaining"] is None, json.dumps(st))

    # --- control endpoint details
    st_code, js = ctl.get("set?rule=action=bogus")
    check("bad rule -> 400, rules unchanged",
          st_code == 400 and len(ctl.stats()["rules"]) == 2, repr(js))
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    c.request("POST", "/__fault__/add", body=b"503,count=1\nrefuse,count=0\n")
    r = c.getresponse()
    js = json.loads(r.read())
    c.close()
    check("POST add with one rule per line", r.status == 200
          and [x["spec"] for x in js["rules"]][2:]
          == ["503,count=1", "refuse,count=0"], repr(js))
    st_code, _ = ctl.get("nothing")
    check("unknown control command -> 404", st_code == 404)
    ctl.clear()

    st = ctl.stats()
    want = {"503": 5, "500": 3, "reset": 4, "truncate": 3, "drop": 1,
            "delay": 1, "slow": 1, "refuse": 1}
    check("stats faults by kind", st["faults"] == want
          and st["faults_total"] == sum(want.values())
          and st["rules"] == [] and st["forwarded"] > 20,
          "got %s" % st["faults"])

    # --- concurrency: 40 connections at once
    results = []

    def worker(i):
        try:
            c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=30)
            c.request("GET", "/obj")
            r = c.getresponse()
            time.sleep(0.2)             # keep them all open together
            b = r.read()
            c.request("PUT", "/bucket/c%d" % i, body=DATA[:200000 + i])
            r2 = c.getresponse()
            js = json.loads(r2.read())
            c.close()
            results.append(r.status == 200 and b == DATA
                           and js["sha256"] == sha(DATA[:200000 + i]))
        except Exception as e:
            results.append(repr(e))
    ths = [threading.Thread(target=worker, args=(i,)) for i in range(40)]
    t0 = time.monotonic()
    for t in ths:
        t.start()
    for t in ths:
        t.join(60)
    check("40 concurrent connections, all byte-exact",
          len(results) == 40 and all(x is True for x in results),
          "%r (%.1fs)" % ([x for x in results if x is not True][:3],
                          time.monotonic() - t0))

    # --- upstream down -> 502; bad --rule -> exit 2; max-seconds; SIGTERM
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    p2 = ProxyProc(dead, "--max-seconds", "1.5")
    rc, code, _, _ = curl(["-o", "/dev/null", "-w", "%{http_code}",
                           "http://127.0.0.1:%d/x" % p2.port])
    check("upstream unreachable -> 502", code == b"502", repr(code))
    t0 = time.monotonic()
    try:
        p2.p.wait(5)
    except subprocess.TimeoutExpired:
        pass
    check("--max-seconds makes it exit by itself",
          p2.p.returncode == 0 and time.monotonic() - t0 < 3,
          "rc=%s" % p2.p.returncode)
    p2.stop()

    p3 = subprocess.run([sys.executable, PROXY, "--upstream", "127.0.0.1:1",
                         "--rule", "action=nope"], capture_output=True)
    check("bad --rule -> exit 2", p3.returncode == 2)

    try:
        with open("/proc/%d/status" % px.p.pid) as f:
            hwm = [l for l in f if l.startswith("VmHWM:")][0].split()[1]
        check("proxy peak RSS stays small (< 150 MiB)",
              int(hwm) < 150 * 1024, "VmHWM %s kB" % hwm)
    except (OSError, IndexError):
        pass

    p5 = ProxyProc(up)
    p5.p.send_signal(signal.SIGINT)
    try:
        p5.p.wait(3)
    except subprocess.TimeoutExpired:
        pass
    check("SIGINT makes it exit 0", p5.p.returncode == 0,
          "rc=%s" % p5.p.returncode)
    p5.stop()

    p4 = ProxyProc(up, "--rule", "drop")
    hold = socket.create_connection(("127.0.0.1", p4.port))
    hold.sendall(b"GET /obj HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.3)
    t0 = time.monotonic()
    rc = p4.stop()
    dt = time.monotonic() - t0
    hold.close()
    check("SIGTERM exits promptly with a held connection",
          rc == 0 and dt < 3, "rc=%s dt=%.2f" % (rc, dt))


if __name__ == "__main__":
    sys.exit(main())
