"""tests/helpers/lab_instance.lab: a lab/lab that fails says why, with the end of its output."""
import pytest

from helpers import lab_instance


def test_a_failing_lab_command_raises_with_its_output():
    # An unknown verb: lab/lab prints its usage and exits 2 before it touches podman.
    with pytest.raises(AssertionError) as failed:
        lab_instance.lab('no-such-verb')
    assert 'lab/lab no-such-verb exited 2' in str(failed.value) and 'usage: lab/lab up' in str(failed.value)
