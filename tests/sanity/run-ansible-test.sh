#!/bin/bash
# ansible-test sanity on the modules, module_utils and the other plugins.
set -euo pipefail
exec "$(dirname "$0")/../ansible-test.sh" sanity plugins/ --venv "$@"
