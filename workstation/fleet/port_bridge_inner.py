"""The inside half of the port bridge: runs *inside* a dev server's sandbox (standard library
only — its source is handed to the sandbox's Python with ``-c``; nothing of the app is
imported there).

::

    python -I -S -c SOURCE CONTROL_FD PORT,PORT,… -- COMMAND …

It starts ``COMMAND`` (the dev server) and answers the app on the control socket (a Unix
socket pair end it inherited): for each request — a port, two bytes — it connects to that
port on the sandbox's own loopback and hands the connected socket back over the control
socket (``SCM_RIGHTS``), or a refusal byte. Only the session's ports are served. When the
app closes the control socket the server is ended; when the server exits, so does this,
with its exit status.
"""

import contextlib
import socket
import struct
import subprocess
import sys
import threading

OK, REFUSED, NOT_ALLOWED = b"\x00", b"\x01", b"\x02"


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _connect(port: int) -> socket.socket | None:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        sock.settimeout(5.0)
        try:
            sock.connect((host, port))
        except OSError:
            sock.close()
            continue
        sock.settimeout(None)
        return sock
    return None


def _serve(ctrl: socket.socket, allowed: set[int], child: subprocess.Popen) -> None:
    try:
        while True:
            data = _recv_exact(ctrl, 2)
            if data is None:
                break
            port = struct.unpack("!H", data)[0]
            if port not in allowed:
                ctrl.sendall(NOT_ALLOWED)
                continue
            conn = _connect(port)
            if conn is None:
                ctrl.sendall(REFUSED)
                continue
            with conn:
                socket.send_fds(ctrl, [OK], [conn.fileno()])
    except OSError:
        pass
    with contextlib.suppress(OSError):  # the app is gone: so is the server
        child.terminate()


def main() -> None:
    fd = int(sys.argv[1])
    allowed = {int(p) for p in sys.argv[2].split(",") if p}
    command = sys.argv[sys.argv.index("--") + 1:]
    ctrl = socket.socket(fileno=fd)
    child = subprocess.Popen(command)  # close_fds: the server never holds the control socket
    threading.Thread(target=_serve, args=(ctrl, allowed, child), daemon=True).start()
    code = child.wait()
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
