import base64, hashlib, socket, sys, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def recvn(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b
def serve(c):
    req = b""
    while b"\r\n\r\n" not in req:
        chunk = c.recv(4096)
        if not chunk:
            return
        req += chunk
    headers = {}
    for line in req.split(b"\r\n")[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            headers[k.strip().lower()] = v.strip()
    key = headers.get(b"sec-websocket-key")
    if key is None:
        c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        return
    acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    while True:
        h = recvn(c, 2)
        op, n = h[0] & 15, h[1] & 127
        if n == 126:
            n = int.from_bytes(recvn(c, 2), "big")
        elif n == 127:
            n = int.from_bytes(recvn(c, 8), "big")
        mask = recvn(c, 4) if h[1] & 128 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(recvn(c, n)))
        if op == 8:
            c.sendall(b"\x88\x00")
            return
        out = b"echo:" + data
        c.sendall(bytes([0x80 | op, len(out)]) + out)
def handle(c):
    try:
        serve(c)
    except Exception:
        pass
    c.close()
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen(8)
while True:
    c, _ = srv.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
