"""Stand-in for the get-pip script ansible-test downloads, which these machines cannot reach.

ansible-test looks for ~/.ansible/test/cache/get_pip_24_2.py before fetching it;
run-ansible-test.sh puts this file there. It bootstraps pip with ensurepip in a
separate process (in-process ensurepip sets PIP_CONFIG_FILE=/dev/null, which would
hide the machine's pip configuration from every later pip call) and then runs
pip install with the arguments ansible-test gave.
"""
import subprocess
import sys

DROPPED = {'--no-setuptools', '--no-wheel'}

subprocess.check_call([sys.executable, '-m', 'ensurepip', '--upgrade'])
sys.exit(subprocess.call([sys.executable, '-m', 'pip', 'install']
                         + [arg for arg in sys.argv[1:] if arg not in DROPPED]))
