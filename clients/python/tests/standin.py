"""A stand-in model API for the network-policy tests: an HTTPS server on
loopback, its certificate signed by a CA made here (openssl), recording the
Authorization header of every request. The engine's emulator reaches it
through MICROVM_NETWORK_RESOLVE and trusts it through
MICROVM_NETWORK_UPSTREAM_CA, so no packet leaves this machine."""
import http.server
import os
import ssl
import subprocess
import tempfile
import threading
from typing import Dict, List


class StandIn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.auths: List[str] = []
        self._lock = threading.Lock()
        self._dir = tempfile.TemporaryDirectory()
        d = self._dir.name
        self.ca = os.path.join(d, "ca.pem")

        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True)

        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
            "-subj", "/CN=stand-in CA", "-keyout", os.path.join(d, "ca.key"), "-out", self.ca)
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=" + name,
            "-keyout", os.path.join(d, "leaf.key"), "-out", os.path.join(d, "leaf.csr"))
        with open(os.path.join(d, "ext"), "w") as f:
            f.write("subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\n" % name)
        run("x509", "-req", "-in", os.path.join(d, "leaf.csr"), "-CA", self.ca, "-CAkey", os.path.join(d, "ca.key"),
            "-CAcreateserial", "-days", "1", "-extfile", os.path.join(d, "ext"), "-out", os.path.join(d, "leaf.pem"))

        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with outer._lock:
                    outer.auths.append(self.headers.get("Authorization", ""))
                body = b"hello from the stand-in"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(d, "leaf.pem"), os.path.join(d, "leaf.key"))
        self._srv.socket = ctx.wrap_socket(self._srv.socket, server_side=True)
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)
        self._thread.start()

    def env(self) -> Dict[str, str]:
        """What the engine's environment needs to reach this stand-in."""
        return {"MICROVM_NETWORK_RESOLVE": "%s=127.0.0.1:%d" % (self.name, self._srv.server_address[1]),
                "MICROVM_NETWORK_UPSTREAM_CA": self.ca}

    def got(self) -> List[str]:
        with self._lock:
            return list(self.auths)

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
        self._dir.cleanup()
