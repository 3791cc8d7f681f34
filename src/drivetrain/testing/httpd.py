"""The threaded HTTP server both `drivetrain serve` and the scripted test servers stand on."""

from __future__ import annotations

import socketserver
from http.server import ThreadingHTTPServer


class QuickHTTPServer(ThreadingHTTPServer):
    """Daemon handler threads, no waiting for them on close, and no reverse DNS lookup at bind."""

    daemon_threads = True
    block_on_close = False

    def server_bind(self) -> None:
        # skip HTTPServer.server_bind: its getfqdn() can block on a slow resolver
        socketserver.TCPServer.server_bind(self)
        host, self.server_port = self.server_address[:2]
        self.server_name = str(host)  # a str already (an IP address); typeshed also allows bytes
