"""Fixtures for the CLI suite: real servers in embedded mode, local stub servers, and a CLI runner.

The real servers are `npx tsx services/all-in-one/server.ts` (the same thing `npm start` runs), each
on a port the OS picks (the server reports it) with its own limits and thresholds, started on first
use and stopped at the end of the session. The CLI under test is always the copy downloaded from the running server, exactly as a
user installs it.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI_SOURCE = ROOT / "services" / "health" / "skill" / "nsfwdetector.py"
# The shared real-world corpus beside the repository, as in test/support/paths.ts (override: NSFW_CORPUS).
CORPUS = Path(os.environ.get("NSFW_CORPUS") or ROOT.parent / "shared" / "corpus" / "sharp-fixtures")
SERVER_ENTRY = ROOT / "services" / "all-in-one" / "server.ts"
STARTUP_TIMEOUT = float(os.environ.get("CLI_TEST_STARTUP_TIMEOUT", "300"))

# Every server of this suite is on 127.0.0.1: never send those requests through a proxy from the
# environment (the CLI and these fixtures both use urllib, which honours *_proxy variables).
for _name in ("NO_PROXY", "no_proxy"):
    os.environ[_name] = ",".join(filter(None, [os.environ.get(_name), "127.0.0.1", "localhost"]))

# Runs the CLI with Pillow hidden: `import PIL` raises ImportError, as on a machine without it.
NO_PILLOW = (
    "import runpy, sys; sys.modules['PIL'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def corpus(name):
    path = CORPUS / name
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail("corpus file missing: %s" % path)
        pytest.skip("corpus file missing: %s" % path)
    return path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url, timeout=5.0):
    """(status, headers, body) of a GET, without raising on HTTP errors."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def clean_env(**extra):
    """The test process's environment without any NSFWDETECTOR_* setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSFWDETECTOR_")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


# ---------------------------------------------------------------------------------------------
# Real servers


class RealServer:
    def __init__(self, name, env, log_dir):
        self.name = name
        # PORT=0: the OS picks the port and the server reports it ({"msg":"listening",...} on stdout,
        # read from the log in wait_ready); a port chosen here could be taken before the server binds it.
        self.port = None
        self.base_url = None
        self.log_path = log_dir / ("server-%s.log" % name)
        tsx = ROOT / "node_modules" / ".bin" / "tsx"
        command = [str(tsx)] if tsx.exists() else ["npx", "tsx"]
        full_env = clean_env(
            PORT=0, HOST="127.0.0.1", LOG_LEVEL="warn", SHUTDOWN_GRACE_MS="2000",
            **env,
        )
        for name in ("REDIS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            full_env.pop(name, None)
        self._log = open(self.log_path, "wb")
        # A session of its own, so the whole tree (tsx spawns node) is stopped by its group id.
        self.process = subprocess.Popen(
            command + [str(SERVER_ENTRY)], cwd=str(ROOT), env=full_env,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def log_tail(self, lines=40):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def listening_port(self):
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return None
        for line in lines:
            if line.startswith("{") and '"listening"' in line:
                try:
                    parsed = json.loads(line)
                except ValueError:
                    continue
                if parsed.get("msg") == "listening" and isinstance(parsed.get("port"), int):
                    return parsed["port"]
        return None

    def wait_ready(self):
        deadline = time.monotonic() + STARTUP_TIMEOUT
        healthy = False
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("server %s exited with %s:\n%s" % (self.name, self.process.returncode,
                                                                       self.log_tail()))
            if self.port is None:
                self.port = self.listening_port()
                if self.port is None:
                    time.sleep(0.1)
                    continue
                self.base_url = "http://127.0.0.1:%d" % self.port
            try:
                if not healthy:
                    status, _, _ = http_get(self.base_url + "/api/public/health", timeout=2)
                    healthy = status == 200
                if healthy:
                    # Health does not probe the model; detect answers 503 until the model is loaded.
                    status, _, _ = http_get(self.base_url + "/internal/ready", timeout=2)
                    if status in (200, 404):
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError("server %s not ready after %ss:\n%s" % (self.name, STARTUP_TIMEOUT, self.log_tail()))

    def stop(self):
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
            except ProcessLookupError:
                pass
        self._log.close()


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("server-logs")


def _server(request, log_dir, name, env):
    server = RealServer(name, env, log_dir)
    request.addfinalizer(server.stop)
    server.wait_ready()
    return server


@pytest.fixture(scope="session")
def server(request, log_dir):
    """The main server: default thresholds (allow 0.10, block 0.90), generous anonymous limits."""
    return _server(request, log_dir, "main", {"ANON_PER_MINUTE": "100000", "ANON_PER_DAY": "1000000"})


@pytest.fixture(scope="session")
def review_server(request, log_dir):
    """Thresholds allow 0 / block 1: every real score falls in the gray zone, so every answer is review."""
    return _server(request, log_dir, "review", {
        "ANON_PER_MINUTE": "100000", "ANON_PER_DAY": "1000000", "THRESHOLD_ALLOW": "0", "THRESHOLD_BLOCK": "1",
    })


@pytest.fixture(scope="session")
def limited_server(request, log_dir):
    """One anonymous request per minute, and thresholds 0 / 0.000001 (allow must stay below block) so
    that the one allowed answer is block."""
    return _server(request, log_dir, "limited", {
        "ANON_PER_MINUTE": "1", "ANON_PER_DAY": "1000", "THRESHOLD_ALLOW": "0", "THRESHOLD_BLOCK": "0.000001",
    })


@pytest.fixture(scope="session")
def cli(server, tmp_path_factory):
    """nsfwdetector.py as served by the main server, saved like `curl -s {base}/skill/nsfwdetector.py -o ...`."""
    status, headers, body = http_get(server.base_url + "/skill/nsfwdetector.py")
    assert status == 200, body[:300]
    path = tmp_path_factory.mktemp("installed") / "nsfwdetector.py"
    path.write_bytes(body)
    return path


class Result:
    def __init__(self, completed, elapsed):
        self.code = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.elapsed = elapsed

    def json(self):
        return json.loads(self.stdout)

    def __repr__(self):
        return "exit=%s elapsed=%.2fs\nstdout=%s\nstderr=%s" % (self.code, self.elapsed, self.stdout, self.stderr)


@pytest.fixture(scope="session")
def run(cli):
    """run(*args, env=None, pillow=True, stdin=None, timeout=120, python=sys.executable) -> Result."""

    def runner(*args, env=None, pillow=True, stdin=None, timeout=120, python=None, cwd=None):
        python = python or sys.executable
        prefix = [python, str(cli)] if pillow else [python, "-c", NO_PILLOW, str(cli)]
        started = time.monotonic()
        completed = subprocess.run(
            prefix + [str(a) for a in args], env=env if env is not None else clean_env(),
            input=stdin if stdin is not None else b"", capture_output=True, timeout=timeout,
            cwd=str(cwd) if cwd else None,
        )
        completed.stdout = completed.stdout.decode("utf-8", "replace")
        completed.stderr = completed.stderr.decode("utf-8", "replace")
        return Result(completed, time.monotonic() - started)

    return runner


# ---------------------------------------------------------------------------------------------
# Local HTTP servers: a programmable stub of the service, and a file host for --url


class LocalServer:
    """A threaded HTTP server whose answers are set per path by the test."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?")[0]
                outer.requests.append({
                    "method": self.command, "path": path, "headers": dict(self.headers),
                    "body": body, "time": time.monotonic(),
                })
                route = outer.routes.get(path)
                if route is None:
                    return self.reply(404, {"code": 4040, "message": "Not found"})
                route(self)

            do_GET = do_POST = _handle

            def reply(self, status, body, headers=None, content_type="application/json"):
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def sequence(self, path, answers):
        """Answers the path with each (status, body, headers) in turn; the last one repeats."""
        answers = list(answers)

        def route(handler):
            status, body, headers = answers.pop(0) if len(answers) > 1 else answers[0]
            handler.reply(status, body, headers)

        self.routes[path] = route

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stub():
    server = LocalServer()
    yield server
    server.close()


def detection(decision="allow", nsfw=0.01, allow=0.1, block=0.9):
    """A canned `data` of a successful detection (spec 2.2)."""
    return {
        "code": 0, "message": "ok",
        "data": {
            "decision": decision, "scores": {"nsfw": nsfw, "sfw": round(1 - nsfw, 6)},
            "thresholds": {"allow": allow, "block": block},
            "image": {"sha256": "0" * 64, "format": "jpeg", "width": 320, "height": 240, "bytes": 81198,
                      "frames": 1},
            "timing_ms": 12.5,
        },
    }
