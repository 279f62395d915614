# SPDX-License-Identifier: MIT
"""faultproxy - a fault-injecting HTTP/1.1 reverse proxy for tests.

It sits on loopback between an HTTP client (our S3 client) and an HTTP
server (an S3 server such as Ceph RGW).  The client's endpoint URL simply
points at the proxy; the proxy relays every request byte-for-byte to the
upstream (the request head is never rewritten, so Host and the AWS
Signature V4 headers arrive exactly as the client signed them) and relays
the response back, except where a fault rule says otherwise.

Standard library only (Python 3.11+), asyncio, streaming: bodies are never
buffered whole; each connection holds at most a few hundred KiB.

Command line
------------
  faultproxy.py --upstream HOST:PORT [--port N] [--listen ADDR]
                [--port-file FILE] [--rule SPEC]... [--max-seconds N]
                [--verbose]

  --upstream HOST:PORT  the real server (required)
  --port N              port to listen on; 0 (default) picks a free one
  --listen ADDR         address to listen on (default 127.0.0.1)
  --port-file FILE      also write the chosen port (decimal + newline) there,
                        atomically (written to FILE.tmp, then renamed)
  --rule SPEC           a fault rule (repeatable; order matters)
  --max-seconds N       exit by itself after N seconds (default 3600)
  --verbose, -v         log every request to stderr, not just faults

The first line on stdout is "PORT <n>" (flushed) once the proxy listens.
It exits with status 0 on SIGTERM, SIGINT or when --max-seconds runs out,
2 on bad arguments.  Each injected fault is logged to stderr as one line.

Rules
-----
A rule is a comma-separated list of key=value items:

  action=ACTION[,method=M][,path=SUBSTR][,count=N][,every=K][,after=N]
        [,bytes=N][,ms=N][,bps=N]

(a bare first item without "=" is taken as the action: "503,count=2").

  503       answer "503 Slow Down" with an S3 <Error><Code>SlowDown</Code>
            XML body; the request is not forwarded
  500       answer "500 Internal Server Error" with <Code>InternalError</Code>;
            not forwarded
  reset     forward, relay the response head and part of the body, then
            reset the client connection (SO_LINGER 0 + close -> RST)
  truncate  like reset, but a clean close (FIN): the client gets fewer
            bytes than the Content-Length (or an unterminated chunked body)
  drop      read the request and never answer; the connection is held open
            (its input read and thrown away) until the client closes it
  delay     forward, and wait ms=N (default 1000) before relaying the
            response head
  slow      forward, and relay the response body at no more than bps=N
            (default 65536) bytes per second
  refuse    reset the client connection (RST) right after the request head
            is read, before anything is forwarded or answered

  method=M     only requests with this method (case-insensitive)
  path=S       only requests whose request target (path + query, as sent)
               contains S.  Values cannot contain ","; use %-escapes as
               they appear in the request target
  count=N      fire N times, then the rule is spent (default: unlimited)
  after=N      let the first N matching requests through
  every=K      then fire on every K-th matching request (default 1)
  bytes=N      reset/truncate: body bytes relayed before the cut.  Default:
               half the Content-Length; 32768 for chunked or close-delimited
               bodies.  Always cut at least one byte short of a known
               length; for a chunked body the terminating 0-chunk is never
               sent.  A response without a body (HEAD, 204, 304,
               Content-Length: 0) is cut in the middle of its head instead.
               For chunked bodies the count is of raw (encoded) bytes.
  ms=N, bps=N  may be given with any action that answers (503, 500, reset,
               truncate, delay, slow): ms delays the head, bps throttles
               the body

Rules are tried in order; a rule takes part only while it is live (not
spent) and its method/path match; such a request counts as one of its
"matches" (after/every are counted on those).  The first rule that fires
applies; later rules do not see the request.

Control endpoint
----------------
Requests whose path starts with /__fault__/ are answered by the proxy and
never forwarded nor matched against rules (answers are JSON):

  GET|POST /__fault__/set?rule=SPEC[&rule=SPEC...]  replace all rules
  GET|POST /__fault__/add?rule=SPEC[&rule=SPEC...]  append rules
  GET|POST /__fault__/clear                          remove all rules
  GET      /__fault__/stats[?reset=1]                counters (then zero them)

For set/add a POST body is accepted too: form-encoded (rule=...&rule=...)
or one rule per line.  Remember to %-encode "&", "+", "#" in a query.
A bad rule gives 400 and leaves the rules unchanged.  stats returns:

  {"requests": N,          client requests seen (control ones excluded)
   "forwarded": N,         requests sent upstream
   "faults": {"503": N, "reset": N, ...},  injected faults by action
   "faults_total": N,
   "control": N, "upstream_errors": N,
   "upstream_retries": N,  bodyless requests resent after an idle upstream
                           connection turned out closed
   "connections": {"accepted": N, "active": N},
   "rules": [{"spec": S, "action": A, "matched": N, "fired": N,
              "count": N|null, "remaining": N|null}, ...]}
"""

import argparse
import asyncio
import email.utils
import fcntl
import json
import os
import re
import signal
import socket
import struct
import sys
import termios
import time
import urllib.parse
from xml.sax.saxutils import escape as xml_escape

HEAD_LIMIT = 64 * 1024          # max request/response head size
IO_CHUNK = 64 * 1024            # relay granularity
CONTROL_BODY_LIMIT = 1 << 20
CUT_DEFAULT_UNKNOWN = 32768     # reset/truncate default for unknown length
CONTROL_PREFIX = "/__fault__/"

ACTIONS = ("503", "500", "reset", "truncate", "drop", "delay", "slow",
           "refuse")
INT_KEYS = ("count", "every", "after", "bytes", "ms", "bps")

_HEX = re.compile(rb"^[0-9A-Fa-f]+$")


def log(msg):
    try:
        sys.stderr.write("faultproxy %s %s\n"
                         % (time.strftime("%H:%M:%S"), msg))
        sys.stderr.flush()
    except Exception:
        pass


class RuleError(ValueError):
    pass


class ProtocolError(Exception):
    pass


class Cut(Exception):
    """Raised by a Sink when the configured cut point is reached."""


class Rule:
    def __init__(self, spec):
        self.spec = spec.strip()
        self.action = None
        self.method = None
        self.path = None
        self.count = None
        self.every = 1
        self.after = 0
        self.bytes = None
        self.ms = None
        self.bps = None
        self.matched = 0
        self.fired = 0
        if not self.spec:
            raise RuleError("empty rule")
        for i, item in enumerate(self.spec.split(",")):
            item = item.strip()
            if not item:
                continue
            if "=" not in item:
                if i == 0:
                    key, val = "action", item
                else:
                    raise RuleError("rule item %r is not key=value" % item)
            else:
                key, val = item.split("=", 1)
                key = key.strip().lower()
                val = val.strip()
            if key == "action":
                val = val.lower()
                if val not in ACTIONS:
                    raise RuleError("unknown action %r (one of %s)"
                                    % (val, ", ".join(ACTIONS)))
                self.action = val
            elif key == "method":
                if not val:
                    raise RuleError("empty method")
                self.method = val.upper()
            elif key == "path":
                self.path = val
            elif key in INT_KEYS:
                try:
                    n = int(val, 10)
                except ValueError:
                    raise RuleError("%s=%r is not an integer" % (key, val))
                if n < 0 or (key in ("every", "bps") and n < 1):
                    raise RuleError("%s=%d out of range" % (key, n))
                setattr(self, key, n)
            else:
                raise RuleError("unknown rule key %r" % key)
        if self.action is None:
            raise RuleError("rule %r has no action" % self.spec)
        if self.action == "delay" and self.ms is None:
            self.ms = 1000
        if self.action == "slow" and self.bps is None:
            self.bps = 65536

    def live(self):
        return self.count is None or self.fired < self.count

    def remaining(self):
        if self.count is None:
            return None
        return max(0, self.count - self.fired)

    def consider(self, method, target):
        """Count a request against this rule; True if the rule fires."""
        if not self.live():
            return False
        if self.method is not None and method.upper() != self.method:
            return False
        if self.path is not None and self.path not in target:
            return False
        self.matched += 1
        n = self.matched - self.after
        if n <= 0 or n % self.every:
            return False
        self.fired += 1
        return True

    def to_json(self):
        return {"spec": self.spec, "action": self.action,
                "matched": self.matched, "fired": self.fired,
                "count": self.count, "remaining": self.remaining()}


def parse_rules(specs):
    return [Rule(s) for s in specs if s.strip()]


class Head:
    """A parsed request or response head; raw keeps the exact bytes."""

    def __init__(self, raw):
        self.raw = raw
        try:
            text = raw.decode("latin-1")
        except Exception:
            raise ProtocolError("undecodable head")
        lines = text.split("\r\n")
        self.start = lines[0]
        self.headers = []
        for line in lines[1:]:
            if not line:
                continue
            if line[0] in " \t" and self.headers:   # obsolete folding
                n, v = self.headers[-1]
                self.headers[-1] = (n, v + " " + line.strip())
                continue
            if ":" not in line:
                raise ProtocolError("bad header line %r" % line[:80])
            n, v = line.split(":", 1)
            self.headers.append((n.strip().lower(), v.strip()))

    def get(self, name):
        for n, v in self.headers:
            if n == name:
                return v
        return None

    def tokens(self, name):
        out = []
        for n, v in self.headers:
            if n == name:
                out.extend(t.strip().lower() for t in v.split(",")
                           if t.strip())
        return out

    def framing(self):
        """('chunked', None) | ('length', n) | ('none', 0) | ('eof', None)"""
        te = self.tokens("transfer-encoding")
        if te:
            if te[-1] == "chunked":
                return ("chunked", None)
            return ("eof", None)
        cl = self.get("content-length")
        if cl is not None:
            try:
                n = int(cl.split(",")[0].strip(), 10)
            except ValueError:
                raise ProtocolError("bad Content-Length %r" % cl)
            if n < 0:
                raise ProtocolError("bad Content-Length %r" % cl)
            return ("length", n)
        return None


class Request(Head):
    def __init__(self, raw):
        super().__init__(raw)
        parts = self.start.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise ProtocolError("bad request line %r" % self.start[:100])
        self.method, self.target, self.version = parts
        f = self.framing()
        if f is None:
            f = ("none", 0)         # requests never read to EOF
        elif f[0] == "eof":
            raise ProtocolError("unsupported request transfer-encoding")
        if f == ("length", 0):
            f = ("none", 0)
        self.body = f
        self.expect_continue = "100-continue" in self.tokens("expect")
        conn = self.tokens("connection")
        if self.version == "HTTP/1.0":
            self.keep_alive = "keep-alive" in conn
        else:
            self.keep_alive = "close" not in conn


class Response(Head):
    def __init__(self, raw, req_method):
        super().__init__(raw)
        parts = self.start.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ProtocolError("bad status line %r" % self.start[:100])
        self.version = parts[0]
        try:
            self.status = int(parts[1])
        except ValueError:
            raise ProtocolError("bad status line %r" % self.start[:100])
        if (req_method == "HEAD" or 100 <= self.status < 200
                or self.status in (204, 304)):
            self.body = ("none", 0)
        else:
            f = self.framing()
            self.body = f if f is not None else ("eof", None)
            if self.body == ("length", 0):
                self.body = ("none", 0)
        conn = self.tokens("connection")
        if self.version == "HTTP/1.0":
            self.keep_alive = "keep-alive" in conn
        else:
            self.keep_alive = "close" not in conn
        if self.body[0] == "eof":
            self.keep_alive = False


async def read_head(reader):
    """Read a head up to CRLFCRLF.  None on clean EOF before any byte."""
    while True:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial.strip(b"\r\n"):
                return None
            raise ProtocolError("connection closed inside a head")
        except asyncio.LimitOverrunError:
            raise ProtocolError("head too large")
        # tolerate stray CRLFs between messages (RFC 9112 2.2)
        stripped = raw.lstrip(b"\r\n")
        if stripped:
            return stripped


async def read_line(reader):
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        raise ProtocolError("connection closed inside chunked framing")
    except asyncio.LimitOverrunError:
        raise ProtocolError("chunk line too long")


async def relay_length(reader, n, sink):
    while n > 0:
        data = await reader.read(min(n, IO_CHUNK))
        if not data:
            raise ProtocolError("connection closed inside a body")
        n -= len(data)
        await sink(data)


async def relay_chunked(reader, sink, before_last=None):
    """Relay a chunked body verbatim (sizes, extensions, trailers)."""
    while True:
        line = await read_line(reader)
        size_s = line.split(b";", 1)[0].strip()
        if not _HEX.match(size_s):
            raise ProtocolError("bad chunk size line %r" % line[:40])
        size = int(size_s, 16)
        if size == 0:
            if before_last is not None:
                await before_last()
            await sink(line)
            while True:                 # trailers, then the empty line
                t = await read_line(reader)
                await sink(t)
                if t in (b"\r\n", b"\n"):
                    return
        await sink(line)
        await relay_length(reader, size, sink)
        await sink(await read_line(reader))


async def relay_eof(reader, sink):
    while True:
        data = await reader.read(IO_CHUNK)
        if not data:
            return
        await sink(data)


async def relay_body(reader, framing, sink, before_last=None):
    kind, n = framing
    if kind == "length":
        await relay_length(reader, n, sink)
    elif kind == "chunked":
        await relay_chunked(reader, sink, before_last)
    elif kind == "eof":
        await relay_eof(reader, sink)
        if before_last is not None:
            await before_last()


async def discard(data):
    return None


class Sink:
    """Writes to a StreamWriter, optionally throttled and/or cut short."""

    def __init__(self, writer, limit=None, bps=None):
        self.writer = writer
        self.limit = limit
        self.bps = bps
        self.sent = 0
        self.t0 = None

    async def __call__(self, data):
        if not data:
            return
        if self.limit is not None:
            room = self.limit - self.sent
            if len(data) >= room:
                await self._send(data[:room])
                raise Cut()
        await self._send(data)

    async def _send(self, data):
        if not data:
            return
        if not self.bps:
            self.writer.write(data)
            self.sent += len(data)
            await self.writer.drain()
            return
        if self.t0 is None:
            self.t0 = time.monotonic()
        piece = max(1, min(IO_CHUNK, self.bps // 20))
        mv = memoryview(data)
        for off in range(0, len(data), piece):
            part = mv[off:off + piece]
            due = self.t0 + (self.sent + len(part)) / self.bps
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.writer.write(bytes(part))
            self.sent += len(part)
            await self.writer.drain()


def reset_writer(writer):
    """Close with RST: SO_LINGER {on, 0} then close."""
    if writer is None:
        return
    try:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                            struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        writer.transport.abort()
    except Exception:
        pass


def abort_writer(writer):
    if writer is None:
        return
    try:
        writer.transport.abort()
    except Exception:
        pass


async def flush_fully(writer):
    """Wait until everything written has reached the kernel."""
    try:
        writer.transport.set_write_buffer_limits(high=0, low=0)
        await writer.drain()
    except Exception:
        pass


async def wait_unsent(writer, timeout=2.0):
    """Wait (bounded) until the kernel has no unsent data for the socket,
    so an RST does not throw away bytes a slow reader has not taken yet."""
    try:
        fd = writer.get_extra_info("socket").fileno()
    except Exception:
        return
    deadline = time.monotonic() + timeout
    buf = bytearray(struct.calcsize("i"))
    while time.monotonic() < deadline:
        try:
            fcntl.ioctl(fd, termios.TIOCOUTQ, buf)   # SIOCOUTQ on Linux
        except OSError:
            return
        if struct.unpack("i", buf)[0] <= 0:
            return
        await asyncio.sleep(0.01)


async def graceful_close(reader, writer, timeout=2.0):
    """FIN our side, swallow what the peer still sends (so the kernel does
    not answer unread data with RST), then close."""
    try:
        await flush_fully(writer)
        if writer.can_write_eof():
            writer.write_eof()

        async def swallow():
            while await reader.read(IO_CHUNK):
                pass
        await asyncio.wait_for(swallow(), timeout)
    except (Exception, asyncio.TimeoutError):
        pass
    try:
        writer.close()
    except Exception:
        pass


def http_date():
    return email.utils.formatdate(usegmt=True)


class Proxy:
    def __init__(self, upstream_host, upstream_port, rules, verbose=False):
        self.up_host = upstream_host
        self.up_port = upstream_port
        self.rules = rules
        self.verbose = verbose
        self.conns = set()
        self.reqid = 0
        self.reset_stats()
        self.accepted = 0

    def reset_stats(self):
        self.n_requests = 0
        self.n_forwarded = 0
        self.n_control = 0
        self.n_upstream_errors = 0
        self.n_upstream_retries = 0
        self.faults = {}

    def stats(self):
        return {"requests": self.n_requests,
                "forwarded": self.n_forwarded,
                "faults": dict(self.faults),
                "faults_total": sum(self.faults.values()),
                "control": self.n_control,
                "upstream_errors": self.n_upstream_errors,
                "upstream_retries": self.n_upstream_retries,
                "connections": {"accepted": self.accepted,
                                "active": len(self.conns)},
                "upstream": "%s:%d" % (self.up_host, self.up_port),
                "rules": [r.to_json() for r in self.rules]}

    def pick_rule(self, req):
        for i, r in enumerate(self.rules):
            if r.consider(req.method, req.target):
                return i, r
        return None, None

    def next_reqid(self):
        self.reqid += 1
        return "FAULTPROXY%08d" % self.reqid

    async def handle(self, reader, writer):
        conn = Connection(self, reader, writer)
        task = asyncio.current_task()
        self.conns.add(task)
        self.accepted += 1
        try:
            await conn.run()
        finally:
            self.conns.discard(task)


class Connection:
    def __init__(self, proxy, reader, writer):
        self.proxy = proxy
        self.reader = reader
        self.writer = writer
        self.up_reader = None
        self.up_writer = None
        self.up_idle = False
        peer = writer.get_extra_info("peername")
        self.peer = "%s:%s" % (peer[0], peer[1]) if peer else "?"

    async def run(self):
        try:
            while True:
                if not await self.one_request():
                    break
            await graceful_close(self.reader, self.writer, 1.0)
        except asyncio.CancelledError:
            reset_writer(self.writer)
            raise
        except ProtocolError as e:
            log("%s: protocol error: %s; closing" % (self.peer, e))
            reset_writer(self.writer)
        except Cut:
            reset_writer(self.writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            reset_writer(self.writer)
        except Exception as e:      # never let one connection kill us
            log("%s: internal error: %r" % (self.peer, e))
            reset_writer(self.writer)
        finally:
            self.close_upstream()

    def close_upstream(self):
        """Close the upstream connection: FIN when it sits between
        messages, RST (abort) when a message is half-way."""
        w = self.up_writer
        if w is not None:
            if self.up_idle:
                try:
                    w.close()
                except Exception:
                    abort_writer(w)
            else:
                abort_writer(w)
        self.up_reader = self.up_writer = None
        self.up_idle = False

    # ---------------------------------------------------------------
    async def one_request(self):
        """Serve one request; True to keep the connection for another."""
        raw = await read_head(self.reader)
        if raw is None:
            return False
        req = Request(raw)
        path = req.target
        if path.startswith(CONTROL_PREFIX):
            return await self.control(req)

        p = self.proxy
        p.n_requests += 1
        idx, rule = p.pick_rule(req)
        if p.verbose:
            log("%s: %s %s%s" % (self.peer, req.method, req.target,
                                 "" if rule is None else
                                 " -> rule #%d %s" % (idx, rule.action)))
        if rule is None:
            return await self.forward(req, None)

        act = rule.action
        p.faults[act] = p.faults.get(act, 0) + 1
        left = rule.remaining()
        log("fault %s rule#%d [%s] %s %s (fired %d%s) from %s"
            % (act, idx, rule.spec, req.method, req.target[:200], rule.fired,
               "" if left is None else ", %d left" % left, self.peer))
        if act == "refuse":
            reset_writer(self.writer)
            return False
        if act in ("503", "500"):
            return await self.answer_error(req, rule)
        if act == "drop":
            await self.drop()
            return False
        return await self.forward(req, rule)

    # ---------------------------------------------------------------
    async def drop(self):
        """Never answer; swallow input until the client goes away."""
        self.close_upstream()
        while await self.reader.read(IO_CHUNK):
            pass
        try:
            self.writer.close()
        except Exception:
            pass

    async def answer_error(self, req, rule):
        if req.body[0] != "none" and req.expect_continue:
            # Final answer instead of 100 Continue: the client will not send
            # the body, so the connection cannot be reused.
            keep = False
        else:
            await relay_body(self.reader, req.body, discard)
            keep = req.keep_alive
        if rule.action == "503":
            status, reason = 503, "Slow Down"
            code, msg = "SlowDown", "Please reduce your request rate."
        else:
            status, reason = 500, "Internal Server Error"
            code = "InternalError"
            msg = "We encountered an internal error. Please try again."
        reqid = self.proxy.next_reqid()
        resource = urllib.parse.urlsplit(req.target).path
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                "<Error><Code>%s</Code><Message>%s</Message>"
                "<Resource>%s</Resource><RequestId>%s</RequestId>"
                "<HostId>faultproxy</HostId></Error>"
                % (code, msg, xml_escape(resource), reqid)).encode()
        if req.method == "HEAD":
            body = b""
        head = ("HTTP/1.1 %d %s\r\n"
                "x-amz-request-id: %s\r\n"
                "Content-Type: application/xml\r\n"
                "Content-Length: %d\r\n"
                "Date: %s\r\n"
                "Connection: %s\r\n\r\n"
                % (status, reason, reqid, len(body), http_date(),
                   "keep-alive" if keep else "close")).encode()
        if rule.ms:
            await asyncio.sleep(rule.ms / 1000.0)
        self.writer.write(head)
        await self.writer.drain()
        if body:
            await Sink(self.writer, bps=rule.bps)(body)
        if not keep:
            await graceful_close(self.reader, self.writer)
        return keep

    # ---------------------------------------------------------------
    async def json_reply(self, req, status, obj):
        body = (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found",
                  405: "Method Not Allowed", 413: "Payload Too Large"}.get(
                      status, "Error")
        head = ("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\nCache-Control: no-store\r\n"
                "Connection: %s\r\n\r\n"
                % (status, reason, len(body),
                   "keep-alive" if req.keep_alive else "close")).encode()
        self.writer.write(head + (b"" if req.method == "HEAD" else body))
        await self.writer.drain()
        return req.keep_alive

    async def control(self, req):
        p = self.proxy
        p.n_control += 1
        if req.expect_continue and req.body[0] != "none":
            self.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await self.writer.drain()
        buf = bytearray()

        async def collect(data):
            buf.extend(data)
            if len(buf) > CONTROL_BODY_LIMIT:
                raise ProtocolError("control body too large")
        await relay_body(self.reader, req.body, collect)

        u = urllib.parse.urlsplit(req.target)
        cmd = u.path[len(CONTROL_PREFIX):].strip("/")
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        if cmd in ("set", "add"):
            specs = list(q.get("rule", []))
            text = bytes(buf).decode("utf-8", "replace").strip()
            if text:
                if text.startswith("rule="):
                    specs += urllib.parse.parse_qs(text).get("rule", [])
                else:
                    specs += [ln for ln in text.splitlines() if ln.strip()]
            try:
                new = parse_rules(specs)
            except RuleError as e:
                return await self.json_reply(req, 400, {"error": str(e)})
            p.rules = new if cmd == "set" else p.rules + new
            log("rules %s: %s" % (cmd, [r.spec for r in p.rules]))
            return await self.json_reply(
                req, 200, {"ok": True,
                           "rules": [r.to_json() for r in p.rules]})
        if cmd == "clear":
            p.rules = []
            log("rules cleared")
            return await self.json_reply(req, 200, {"ok": True, "rules": []})
        if cmd == "stats":
            st = p.stats()
            if q.get("reset", ["0"])[0] not in ("", "0"):
                p.reset_stats()
            return await self.json_reply(req, 200, st)
        return await self.json_reply(
            req, 404, {"error": "unknown control command %r "
                       "(set, add, clear, stats)" % cmd})

    # ---------------------------------------------------------------
    def upstream_usable(self):
        r, w = self.up_reader, self.up_writer
        if r is None or w is None or w.is_closing():
            return False
        # EOF or unsolicited bytes from an idle upstream: do not reuse
        if r.at_eof() or getattr(r, "_eof", False) or getattr(r, "_buffer",
                                                             None):
            return False
        return r.exception() is None

    async def connect_upstream(self):
        self.close_upstream()
        r, w = await asyncio.open_connection(
            self.proxy.up_host, self.proxy.up_port, limit=HEAD_LIMIT)
        try:
            w.get_extra_info("socket").setsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass
        self.up_reader, self.up_writer = r, w

    async def bad_gateway(self, req, why):
        self.proxy.n_upstream_errors += 1
        log("upstream error for %s %s: %s" % (req.method, req.target[:200],
                                              why))
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                "<Error><Code>BadGateway</Code><Message>faultproxy: %s"
                "</Message></Error>" % xml_escape(str(why))).encode()
        self.writer.write(("HTTP/1.1 502 Bad Gateway\r\n"
                           "Content-Type: application/xml\r\n"
                           "Content-Length: %d\r\nConnection: close\r\n\r\n"
                           % len(body)).encode()
                          + (b"" if req.method == "HEAD" else body))
        await graceful_close(self.reader, self.writer)
        return False

    async def forward(self, req, rule):
        p = self.proxy
        has_body = req.body[0] != "none"
        attempts = 1 if has_body else 2
        resp = None
        pump = None
        for attempt in range(attempts):
            reused = self.upstream_usable()
            if not reused:
                try:
                    await self.connect_upstream()
                except OSError as e:
                    return await self.bad_gateway(req, "connect: %s" % e)
            self.up_idle = False
            self.up_writer.write(req.raw)
            if attempt == 0:
                p.n_forwarded += 1
            if has_body:
                pump = asyncio.ensure_future(self.pump_body(req))
            try:
                # 1xx interim answers are passed on; then the final one
                while True:
                    raw = await read_head(self.up_reader)
                    if raw is None:
                        raise ConnectionResetError("upstream closed")
                    resp = Response(raw, req.method)
                    if 100 <= resp.status < 200 and resp.status != 101:
                        self.writer.write(raw)
                        await self.writer.drain()
                        resp = None
                        continue
                    break
            except (ConnectionError, OSError, ProtocolError) as e:
                self.close_upstream()
                if pump is not None:
                    pump.cancel()
                    # the client's body is half sent: cannot recover
                    p.n_upstream_errors += 1
                    log("upstream failed during %s %s: %s"
                        % (req.method, req.target[:200], e))
                    reset_writer(self.writer)
                    return False
                if reused and attempt + 1 < attempts:
                    # stale keep-alive connection: retry on a fresh one
                    p.n_upstream_retries += 1
                    continue
                return await self.bad_gateway(req, e)
            break

        try:
            keep = await self.relay_response(req, resp, rule)
        except Cut:
            if pump is not None:
                pump.cancel()
            self.close_upstream()
            if rule.action == "truncate":
                await flush_fully(self.writer)
                try:
                    self.writer.close()
                except Exception:
                    pass
            else:
                await flush_fully(self.writer)
                await wait_unsent(self.writer)
                reset_writer(self.writer)
            return False
        except (ConnectionError, OSError, ProtocolError) as e:
            # upstream or client died mid-response: propagate as a reset
            if pump is not None:
                pump.cancel()
            self.close_upstream()
            if self.proxy.verbose:
                log("%s: relay failed: %r" % (self.peer, e))
            reset_writer(self.writer)
            return False

        if pump is not None:
            if not pump.done():
                # final answer before the whole request body: the client
                # may still be sending (or may never send, after an
                # Expect: 100-continue); neither side can be reused.
                pump.cancel()
                self.close_upstream()
                await graceful_close(self.reader, self.writer)
                return False
            if pump.cancelled() or pump.exception() is not None:
                self.close_upstream()
                reset_writer(self.writer)
                return False
        if resp.keep_alive:
            self.up_idle = True
        else:
            self.close_upstream()
        if not (resp.keep_alive and req.keep_alive):
            await graceful_close(self.reader, self.writer, 1.0)
            return False
        return True

    async def pump_body(self, req):
        """Relay the request body client -> upstream."""
        w = self.up_writer

        async def to_up(data):
            w.write(data)
            await w.drain()
        try:
            await relay_body(self.reader, req.body, to_up)
        except asyncio.CancelledError:
            raise
        except Exception:
            # client went away mid-body: make the response read fail too
            abort_writer(w)
            raise

    async def relay_response(self, req, resp, rule):
        act = rule.action if rule else None
        cut = None
        if act in ("reset", "truncate"):
            kind, n = resp.body
            if kind == "none":
                # nothing to cut in the body: cut the head instead
                if rule.ms:
                    await asyncio.sleep(rule.ms / 1000.0)
                half = max(1, len(resp.raw) // 2)
                self.writer.write(resp.raw[:half])
                raise Cut()
            if kind == "length":
                cut = n // 2 if rule.bytes is None else min(rule.bytes, n - 1)
            else:
                cut = CUT_DEFAULT_UNKNOWN if rule.bytes is None \
                    else rule.bytes
        if rule is not None and rule.ms:
            await asyncio.sleep(rule.ms / 1000.0)
        self.writer.write(resp.raw)
        await self.writer.drain()
        sink = Sink(self.writer, limit=cut,
                    bps=rule.bps if rule is not None else None)
        before_last = None
        if cut is not None:
            async def before_last():
                raise Cut()
        await relay_body(self.up_reader, resp.body, sink, before_last)
        return True


# -------------------------------------------------------------------
def parse_hostport(s):
    if s.startswith("["):
        host, _, rest = s[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT, got %r" % s)
    return host, int(port)


def write_port_file(path, port):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.replace(tmp, path)


async def amain(args):
    proxy = Proxy(args.upstream[0], args.upstream[1], args.rules,
                  args.verbose)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    why = []

    def request_stop(reason):
        if not why:
            why.append(reason)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, request_stop, signal.Signals(sig).name)
    loop.call_later(args.max_seconds, request_stop, "max-seconds reached")

    server = await asyncio.start_server(
        proxy.handle, args.listen, args.port, limit=HEAD_LIMIT,
        backlog=256, reuse_address=True)
    port = server.sockets[0].getsockname()[1]
    if args.port_file:              # before PORT, so both are there at once
        write_port_file(args.port_file, port)
    try:
        sys.stdout.write("PORT %d\n" % port)
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass
    log("listening on %s:%d -> %s:%d, %d rule(s), max %ds"
        % (args.listen, port, proxy.up_host, proxy.up_port,
           len(proxy.rules), args.max_seconds))

    await stop.wait()
    log("exiting: %s" % why[0])
    server.close()
    tasks = list(proxy.conns)
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=2.0)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Fault-injecting HTTP/1.1 reverse proxy for tests.")
    ap.add_argument("--upstream", required=True, type=parse_hostport,
                    metavar="HOST:PORT")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port-file")
    ap.add_argument("--rule", action="append", default=[], metavar="SPEC")
    ap.add_argument("--max-seconds", type=float, default=3600)
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args(argv)
    try:
        args.rules = parse_rules(args.rule)
    except RuleError as e:
        ap.error("bad --rule: %s" % e)
    if args.max_seconds <= 0:
        ap.error("--max-seconds must be positive")
    try:
        asyncio.run(amain(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
