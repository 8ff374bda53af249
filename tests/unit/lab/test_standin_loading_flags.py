"""The stand-in takes SGLang's loading options (issue 45) as 0.5.23's parser does, and reports them where SGLang's
/server_info does (every resolved argument), so the lab starts with them and the redeploy's check reads them."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..', 'lab', 'standin'))
from sglang_standin import launch_server  # noqa: E402  (the stand-in is not an installed package)


def resolved(*flags):
    return launch_server.resolve(launch_server.build_parser().parse_args(['--model-path', '/models/m'] + list(flags)))


def test_the_loading_options_default_as_sglangs():
    settings = resolved()
    assert (settings['weight_loader_prefetch_checkpoints'], settings['weight_loader_prefetch_num_threads'],
            settings['startup_weight_load_mode']) == (False, 4, 'serial')


def test_the_loading_options_given_are_reported():
    settings = resolved('--weight-loader-prefetch-checkpoints', '--weight-loader-prefetch-num-threads', '8',
                        '--startup-weight-load-mode', 'overlap')
    assert (settings['weight_loader_prefetch_checkpoints'], settings['weight_loader_prefetch_num_threads'],
            settings['startup_weight_load_mode']) == (True, 8, 'overlap')


def test_a_load_mode_sglang_does_not_know_stops_the_start():
    with pytest.raises(SystemExit) as stopped:
        resolved('--startup-weight-load-mode', 'parallel')
    assert stopped.value.code == 2
