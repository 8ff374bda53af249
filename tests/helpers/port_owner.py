"""Whose port a server's is (issue 41): stand-ins for the two sides of _server's check.

this_process_systemctl makes the test process the server: a Server given it as its runner is a systemd unit whose
main process is this one, so a port the test listens on (a responder's, a hostile peer's) is the server's own.

Squatter is a local user's process that binds a server's port first, as one may while SGLang loads its model:
run as nobody (uid 65534) where setpriv and a Python it may run exist, it answers every request 200 with one
JSON document (consistent with what the server would report) and records each request's method, path and
Authorization header.
"""
import json
import os
import shutil
import subprocess
import sys
import threading


def this_process_systemctl(argv, timeout):
    """systemctl as systemd answers for a running unit whose main process is this one (control group unknown)."""
    assert argv[:2] == ['systemctl', 'show'], argv
    if argv[2] == '--property=MainPID':
        return 0, '%d\n' % os.getpid(), ''
    return 0, '\n', ''


SQUAT = r'''
import json, socket, sys
listening = socket.socket()
listening.bind(('127.0.0.1', int(sys.argv[1])))
listening.listen(16)
body = sys.argv[2].encode()
print('listening', flush=True)
while True:
    connection = listening.accept()[0]
    head = b''
    while b'\r\n\r\n' not in head:
        piece = connection.recv(65536)
        if not piece:
            break
        head += piece
    lines = head.decode('latin-1').split('\r\n')
    method, path = (lines[0].split(' ') + ['', ''])[:2]
    headers = dict(line.split(': ', 1) for line in lines[1:] if ': ' in line)
    print(json.dumps({'method': method, 'path': path, 'authorization': headers.get('Authorization')}), flush=True)
    connection.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n'
                       b'Connection: close\r\n\r\n%s' % (len(body), body))
    connection.close()
'''
# A Python another user may run: the test's own may live under root's home.
SYSTEM_PYTHON = '/usr/bin/python3'


def _as_nobody():
    """The argv prefix that runs a command as nobody, or [] where that cannot be done here."""
    if os.geteuid() != 0 or not shutil.which('setpriv') or not os.path.exists(SYSTEM_PYTHON):
        return []
    prefix = ['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups']
    if subprocess.call(prefix + [SYSTEM_PYTHON, '-c', 'pass'], stderr=subprocess.DEVNULL) != 0:
        return []
    return prefix


class Squatter(object):
    """A process (not the server's) listening on 127.0.0.1:port, answering `document` to every request."""

    def __init__(self, port, document):
        prefix = _as_nobody()
        self.python = SYSTEM_PYTHON if prefix else sys.executable
        self.uid = 65534 if prefix else os.geteuid()
        self.process = subprocess.Popen(prefix + [self.python, '-c', SQUAT, str(port), json.dumps(document)],
                                        stdout=subprocess.PIPE, start_new_session=True, universal_newlines=True)
        self.pid = self.process.pid
        # Bound and listening once it says so (it exits, and the line is empty, when the port is taken).
        assert self.process.stdout.readline().strip() == 'listening', 'the squatter could not bind port %d' % port
        self.requests = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.requests.append(json.loads(line))

    def authorizations(self):
        """The Authorization headers it was sent (None for a request without one)."""
        return [request['authorization'] for request in self.requests]

    def close(self):
        self.process.kill()
        self.process.wait()
        self._reader.join(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
