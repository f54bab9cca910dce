"""The generated Python client against a real agentd process on 127.0.0.1.

Each test class starts its own daemon (identity repair off, in a temporary
directory) and stops it after. The binary is $AGENTD_BIN, or built from
cmd/agentd with `go build` when that is unset.
"""

import base64
import io
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import unittest
import uuid
from pathlib import Path

from microvms_agentd import ApiError, Client, StreamCut, follow, models, run
from microvms_agentd.models import (
    RunHookEnvelope, RunHookPayload, SSEExit, SSEGap, SSEOutput, StartRequest, StdinRequest,
)

REPO = Path(__file__).resolve().parents[3]
_built = {}


def agentd_binary() -> str:
    if os.environ.get("AGENTD_BIN"):
        return os.environ["AGENTD_BIN"]
    if "path" not in _built:
        out = Path(tempfile.mkdtemp(prefix="agentd-py-")) / "agentd"
        subprocess.run(["go", "build", "-o", str(out), "./cmd/agentd"], cwd=REPO, check=True, timeout=300)
        _built["path"] = str(out)
    return _built["path"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One agentd process, reachable at base on 127.0.0.1."""

    def __init__(self, **env):
        self.dir = tempfile.mkdtemp(prefix="agentd-py-run-")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AGENTD_PORT": str(self.port), "AGENTD_IDENTITY_REPAIR": "0"}
        full.update(env)
        self.log = open(os.path.join(self.dir, "agentd.log"), "wb")
        self.proc = subprocess.Popen([agentd_binary()], cwd=self.dir, env=full, stdout=self.log, stderr=self.log)
        client = Client(self.base, timeout=2)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.health()
                return
            except ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("agentd never answered health")
                time.sleep(0.02)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def bootstrap(base: str, token: str) -> None:
    Client(base).hook_run(RunHookEnvelope.from_run_hook_payload(RunHookPayload(agent_token=token, env={"GREETING": "hi"})))


class CutProxy:
    """A TCP relay on 127.0.0.1 that cuts its first connection after relaying
    `cut_after` response bytes, the way a dropped network path would."""

    def __init__(self, port: int, cut_after: int):
        self.target = port
        self.cut_after = cut_after
        self.conns = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.done.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                continue
            self.conns += 1
            limit = self.cut_after if self.conns == 1 else None
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, limit):
        sent = 0
        try:
            while True:
                chunk = src.recv(4096)
                if not chunk:
                    break
                if limit is not None and sent + len(chunk) >= limit:
                    dst.sendall(chunk[: limit - sent])
                    break
                dst.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.done.set()
        self.thread.join(timeout=5)
        self.sock.close()


class BeforeAndAtBootstrap(unittest.TestCase):
    """The run hook and the closed control API before it."""

    def setUp(self):
        self.d = Daemon()
        self.addCleanup(self.d.stop)

    def test_bootstrap(self):
        anon = Client(self.d.base)
        h = anon.health()
        self.assertFalse(h.bootstrapped)
        self.assertTrue(anon.last_version)  # every answer names the daemon version
        self.assertEqual(h.version, anon.last_version)

        # Bearer routes are 503 (no body) until a token is installed, never 404.
        with self.assertRaises(ApiError) as cm:
            Client(self.d.base, token="t").exec_poll("x")
        self.assertEqual((cm.exception.status, cm.exception.error, cm.exception.text), (503, None, ""))

        # A malformed payload is a text/plain 400 that names the fault.
        with self.assertRaises(ApiError) as cm:
            anon.hook_run(RunHookEnvelope(run_hook_payload='{"env": {}}'))
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("agent_token", cm.exception.text)

        bootstrap(self.d.base, "tok-1")
        bootstrap(self.d.base, "tok-1")  # a platform retry of the same token is success
        with self.assertRaises(ApiError) as cm:
            bootstrap(self.d.base, "tok-2")
        self.assertEqual(cm.exception.status, 409)
        self.assertTrue(anon.health().bootstrapped)

        with self.assertRaises(ApiError) as cm:
            Client(self.d.base, token="wrong").exec_poll("x")
        self.assertEqual(cm.exception.status, 401)


class Booted(unittest.TestCase):
    """Exec, streaming, stdin and files on a bootstrapped daemon."""

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(AGENTD_SSE_KEEPALIVE_SECS="1")
        cls.token = "py-" + uuid.uuid4().hex
        bootstrap(cls.d.base, cls.token)
        cls.c = Client(cls.d.base, token=cls.token, timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def run_to_exit(self, exec_id):
        out = {"stdout": b"", "stderr": b""}
        last = None
        for ev in follow(self.c, exec_id):
            if isinstance(ev, SSEOutput):
                out[ev.data.stream] += base64.b64decode(ev.data.output)
            last = ev
        self.assertIsInstance(last, SSEExit)
        return out, last.data

    def test_start_stream_poll_ack(self):
        started = self.c.exec_start(StartRequest(exec_id="sap", command=['printf "$GREETING"; printf oops >&2; exit 3'], shell=True))
        self.assertEqual((started.exec_id, started.phase), ("sap", models.Phase.RUNNING))
        again = self.c.exec_start(StartRequest(exec_id="sap", command=["false"]))  # idempotent: not spawned twice
        self.assertEqual(again.exec_id, "sap")
        out, exit_ = self.run_to_exit("sap")
        self.assertEqual(out, {"stdout": b"hi", "stderr": b"oops"})  # launch env from the run hook reached the child
        self.assertEqual((exit_.exit_code, exit_.signal, exit_.offset), (3, None, 6))
        polled = self.c.exec_poll("sap")
        self.assertEqual((polled.phase, polled.exit_code, polled.stdout), (models.Phase.EXITED, 3, "hi"))
        acked = self.c.exec_ack("sap")
        self.assertEqual((acked.phase, acked.stderr), (models.Phase.ACKED, "oops"))
        with self.assertRaises(ApiError) as cm:
            self.c.exec_ack("sap")
        self.assertEqual((cm.exception.status, cm.exception.slug), (409, "already_acked"))

    def test_run_is_one_exchange_and_releases(self):
        # Catches: run not taking the run route against agentd (the exec would
        # stay exited, unacked), and the events differing from follow's.
        events = list(run(self.c, StartRequest(exec_id="one", command=['printf "$GREETING"; printf e >&2; exit 4'], shell=True)))
        out = {"stdout": b"", "stderr": b""}
        for ev in events:
            if isinstance(ev, SSEOutput):
                out[ev.data.stream] += base64.b64decode(ev.data.output)
        self.assertEqual(out, {"stdout": b"hi", "stderr": b"e"})
        self.assertIsInstance(events[-1], SSEExit)
        self.assertEqual((events[-1].data.exit_code, events[-1].data.offset), (4, 3))
        self.assertEqual(self.c.exec_poll("one").phase, models.Phase.ACKED)

    def test_run_falls_back_without_the_route(self):
        # A daemon whose document lists no run route (as the reference's):
        # run starts and follows, and the exec waits for the caller's ack.
        # Catches: run posting to a route the document does not list.
        plain = Client(self.d.base, token=self.token, timeout=30)
        doc = plain.schema()
        doc["routes"] = [r for r in doc["routes"] if r["path"] != "/v1/exec/run"]
        plain.schema = lambda: doc  # type: ignore[method-assign]
        events = list(run(plain, StartRequest(exec_id="two", command=["printf", "ok"])))
        self.assertIsInstance(events[-1], SSEExit)
        self.assertEqual(self.c.exec_poll("two").phase, models.Phase.EXITED)
        self.assertEqual(self.c.exec_ack("two").stdout, "ok")

    def test_errors_carry_their_slugs(self):
        with self.assertRaises(ApiError) as cm:
            self.c.exec_poll("no-such-exec")
        self.assertEqual((cm.exception.status, cm.exception.slug), (404, "unknown_exec"))
        with self.assertRaises(ApiError) as cm:
            self.c.exec_start(StartRequest(exec_id="bad", command=[]))
        self.assertEqual((cm.exception.status, cm.exception.slug), (400, "malformed_request"))
        self.c.exec_start(StartRequest(exec_id="slow", command=["sleep", "30"]))
        with self.assertRaises(ApiError) as cm:
            self.c.exec_ack("slow")
        self.assertEqual(cm.exception.slug, "still_running")
        killed = self.c.exec_kill("slow")
        self.assertTrue(killed.killed)
        _, exit_ = self.run_to_exit("slow")
        self.assertEqual((exit_.exit_code, exit_.signal), (None, 15))

    def test_resume_from_an_offset_and_across_a_cut(self):
        self.c.exec_start(StartRequest(exec_id="seq", command=["seq", "1", "20000"]))
        whole, _ = self.run_to_exit("seq")
        expected = "".join(f"{i}\n" for i in range(1, 20001)).encode()
        self.assertEqual(whole["stdout"], expected)

        # Resuming from an offset replays exactly the bytes after it.
        tail = b"".join(base64.b64decode(e.data.output) for e in follow(self.c, "seq", 1000) if isinstance(e, SSEOutput))
        self.assertEqual(tail, expected[1000:])

        # A connection cut mid-stream: follow reconnects from the next unread
        # byte, and every byte arrives exactly once.
        proxy = CutProxy(self.d.port, cut_after=4000)
        self.addCleanup(proxy.close)
        via = Client(f"http://127.0.0.1:{proxy.port}", token=self.token, timeout=30)
        got = b"".join(base64.b64decode(e.data.output) for e in follow(via, "seq") if isinstance(e, SSEOutput))
        self.assertEqual(got, expected)
        self.assertGreaterEqual(proxy.conns, 2, "the stream was never cut, so resume was not exercised")

    def test_stream_cut_names_the_resume_point(self):
        self.c.exec_start(StartRequest(exec_id="gone", command=["true"]))
        self.run_to_exit("gone")
        dead = Client(f"http://127.0.0.1:{free_port()}", token=self.token, timeout=2)
        with self.assertRaises(StreamCut) as cm:
            list(follow(dead, "gone", 7, reconnects=1, backoff=0.01))
        self.assertEqual(cm.exception.offset, 7)

    def test_stdin(self):
        self.c.exec_start(StartRequest(exec_id="cat", command=["cat"], stdin=True))
        w = self.c.exec_stdin("cat", StdinRequest(data_b64=base64.b64encode(b"ping\n").decode(), signal="eof"))
        self.assertEqual((w.written, w.eof), (5, True))
        out, exit_ = self.run_to_exit("cat")
        self.assertEqual((out["stdout"], exit_.exit_code), (b"ping\n", 0))
        with self.assertRaises(ApiError) as cm:
            self.c.exec_stdin("cat", StdinRequest(data_b64="eA=="))
        self.assertEqual(cm.exception.slug, "stdin_closed")

    def test_files_and_tar(self):
        root = Path(tempfile.mkdtemp(prefix="agentd-py-fs-"))
        self.addCleanup(shutil.rmtree, root, True)
        target = root / "sub" / "notes.txt"
        body = b"one\ntwo\n\xff\x00three\n"
        self.assertIsNone(self.c.fs_write_file(body, path=str(target), mode="0600"))
        self.assertEqual(target.read_bytes(), body)  # bytes exactly, no JSON quoting
        self.assertEqual(target.stat().st_mode & 0o777, 0o600)
        self.assertEqual(self.c.fs_read_file(path=str(target)), body)
        self.assertEqual(self.c.fs_read_file(path=str(target), start_line=2, end_line=2), b"two\n")
        with self.c.fs_read_file(path=str(target), stream=True) as resp:
            self.assertEqual(resp.read(3), b"one")
        with self.assertRaises(ApiError) as cm:
            self.c.fs_read_file(path=str(root / "missing"))
        self.assertEqual((cm.exception.status, cm.exception.text), (404, "no such file"))
        with self.assertRaises(ApiError) as cm:
            self.c.fs_write_file(b"x", path=str(target), mode="0999")
        self.assertEqual(cm.exception.status, 400)

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for name, data in (("a.txt", b"alpha"), ("d/b.txt", b"beta")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        dest = root / "tree"
        self.assertIsNone(self.c.fs_write_tar(buf.getvalue(), path=str(dest)))
        self.assertEqual((dest / "d" / "b.txt").read_bytes(), b"beta")
        back = tarfile.open(fileobj=io.BytesIO(self.c.fs_read_tar(path=str(dest))))
        files = {m.name.lstrip("./"): back.extractfile(m).read() for m in back.getmembers() if m.isfile()}
        self.assertEqual(files, {"a.txt": b"alpha", "d/b.txt": b"beta"})

    def test_health_and_schema(self):
        h = self.c.health()
        self.assertTrue(h.bootstrapped)
        self.assertTrue(h.disk is None or h.disk.available_bytes >= 0)
        doc = self.c.schema()
        self.assertEqual(doc["protocol_version"], models.PROTOCOL_VERSION)
        self.assertEqual(doc["limits"]["sse_keepalive_secs"], 1)  # the running value, not the default
        self.assertEqual(doc["version_header"], models.VERSION_HEADER)


if __name__ == "__main__":
    unittest.main()
