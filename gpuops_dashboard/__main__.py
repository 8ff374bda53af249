"""python -m gpuops_dashboard: serve the reference ops page (what `make dashboard` runs).

Listens on 127.0.0.1 only and answers only requests whose Host header is an allowed name (the loopback
names with its port, or --allowed-host / DASHBOARD_ALLOWED_HOSTS). The token for whatever runs anything comes
from DASHBOARD_TOKEN (taken out of the environment at once, so no ansible-playbook inherits it), or is
generated and written to STATE_DIR/token (0600): it is never printed. Everything the dashboard writes is
0600 in 0700 folders (umask 077). A redeploy may name as its patch only a file in --patch-dir /
DASHBOARD_PATCH_DIRS (default: the collection's files/).
"""
import argparse
import os
import secrets
import sys

import uvicorn

from gpuops_dashboard.app import create_app
from gpuops_dashboard.extra_vars import DEFAULT_PATCH_DIRS, patch_folders
from gpuops_dashboard.redeploy import REPO


def private_folder(path):
    """Make `path` (and its parents) and close it to everyone but this user."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def take_token(state_dir, environ=None):
    """(token, where it came from). DASHBOARD_TOKEN is removed from `environ` (os.environ): ansible-runner hands
    this process's environment to ansible-playbook and writes it to every run's artifacts (env, command)."""
    environ = os.environ if environ is None else environ
    token = environ.pop('DASHBOARD_TOKEN', None)
    if token:
        return token, 'DASHBOARD_TOKEN'
    path = os.path.join(state_dir, 'token')
    token = secrets.token_urlsafe(24)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, 'w') as handle:
        handle.write(token + '\n')
    os.chmod(path, 0o600)
    return token, path


def allowed_hosts(port, extra):
    """The loopback names at this port, and the operator's own (a reverse proxy's name, say)."""
    names = ['127.0.0.1:%d' % port, 'localhost:%d' % port, '[::1]:%d' % port]
    for entry in extra:
        names.extend(name.strip() for name in entry.split(',') if name.strip())
    return names


def build(argv=None):
    """(app, args, where the token came from): everything main() does but serve."""
    parser = argparse.ArgumentParser(prog='python -m gpuops_dashboard', description=__doc__.splitlines()[0])
    parser.add_argument('--inventory', default='inventory/lab', help='inventory to redeploy (default: the lab)')
    parser.add_argument('--port', type=int, default=int(os.environ.get('DASHBOARD_PORT', '8765')))
    parser.add_argument('--state-dir', default=os.path.join(REPO, '.cache', 'dashboard'),
                        help='where the SQLite database, the runs\' private data dirs and a generated token live')
    parser.add_argument('--allowed-host', action='append',
                        default=[os.environ['DASHBOARD_ALLOWED_HOSTS']] if os.environ.get('DASHBOARD_ALLOWED_HOSTS')
                        else [],
                        help='a Host header value to answer besides 127.0.0.1, localhost and [::1] at --port '
                             '("name" for any port, "name:port"; repeat, or comma-separate in '
                             'DASHBOARD_ALLOWED_HOSTS), e.g. the name a TLS reverse proxy forwards')
    parser.add_argument('--patch-dir', action='append',
                        default=[folder for folder in os.environ.get('DASHBOARD_PATCH_DIRS', '').split(':') if folder],
                        help='a folder whose files a redeploy may name as sglang_patch_file (repeat, or colon-separate '
                             'in DASHBOARD_PATCH_DIRS; default: the collection\'s files/); a patch file is the '
                             'controller file a run copies to every GPU host')
    args = parser.parse_args(argv)
    try:
        patch_dirs = patch_folders(args.patch_dir or DEFAULT_PATCH_DIRS)
    except ValueError as error:
        parser.error(str(error))
    # Files this process and its ansible-playbook children make are theirs alone (the database, its WAL, the
    # runs' artifacts); explicit modes below cover what existed before.
    os.umask(0o077)
    private_folder(args.state_dir)
    runs = private_folder(os.path.join(args.state_dir, 'runs'))
    token, source = take_token(args.state_dir)
    app = create_app(args.inventory, os.path.join(args.state_dir, 'dashboard.sqlite3'), runs, token,
                     allowed_hosts=allowed_hosts(args.port, args.allowed_host), patch_dirs=patch_dirs)
    return app, args, source


def main(argv=None):
    app, args, source = build(argv)
    print('gpuops.sglang dashboard on http://127.0.0.1:%d/ (inventory %s); the token: %s'
          % (args.port, args.inventory, 'from DASHBOARD_TOKEN' if source == 'DASHBOARD_TOKEN'
             else 'generated, in %s (0600)' % source), flush=True)
    uvicorn.run(app, host='127.0.0.1', port=args.port, log_level='warning')
    return 0


if __name__ == '__main__':
    sys.exit(main())
