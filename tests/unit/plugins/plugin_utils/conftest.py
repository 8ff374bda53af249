import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from role_settings import NEEDED, role_defaults  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture
def settings():
    """A consistent configuration: the defaults and the two required models."""
    return dict(role_defaults(), **NEEDED)
