"""python -m gpuops_dashboard: serve the reference ops page (what `make dashboard` runs).

Listens on 127.0.0.1 only. The token for POST requests comes from DASHBOARD_TOKEN, or is generated and
printed at start.
"""
import argparse
import os
import secrets
import sys

import uvicorn

from gpuops_dashboard.app import create_app
from gpuops_dashboard.redeploy import REPO


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m gpuops_dashboard', description=__doc__.splitlines()[0])
    parser.add_argument('--inventory', default='inventory/lab', help='inventory to redeploy (default: the lab)')
    parser.add_argument('--port', type=int, default=int(os.environ.get('DASHBOARD_PORT', '8765')))
    parser.add_argument('--state-dir', default=os.path.join(REPO, '.cache', 'dashboard'),
                        help='where the SQLite database and the runs\' private data dirs live')
    args = parser.parse_args(argv)
    os.makedirs(os.path.join(args.state_dir, 'runs'), exist_ok=True)
    token = os.environ.get('DASHBOARD_TOKEN')
    if not token:
        token = secrets.token_urlsafe(24)
        print('DASHBOARD_TOKEN not set; this run\'s token: %s' % token, flush=True)
    app = create_app(args.inventory, os.path.join(args.state_dir, 'dashboard.sqlite3'),
                     os.path.join(args.state_dir, 'runs'), token)
    print('gpuops.sglang dashboard on http://127.0.0.1:%d/ (inventory %s)' % (args.port, args.inventory), flush=True)
    uvicorn.run(app, host='127.0.0.1', port=args.port, log_level='warning')
    return 0


if __name__ == '__main__':
    sys.exit(main())
