"""The rescue's one-line note of what failed: the same text the role's Jinja wrote before (regex_replace, then
Jinja's own truncate(600)), now one function behind the sglang_failure filter."""
import re

import jinja2
import pytest

from ansible_collections.gpuops.sglang.plugins.filter.sglang_failure import FilterModule
from ansible_collections.gpuops.sglang.plugins.plugin_utils._report import failure_note

LONG = ' '.join('word%03d' % n for n in range(120))  # 959 characters


def jinja_note(task, result):
    """The expression the role's rescues used, evaluated by Jinja (regex_replace as Ansible defines it)."""
    env = jinja2.Environment()
    env.filters['regex_replace'] = lambda value, pattern, replacement: re.sub(pattern, replacement, str(value))
    template = env.from_string("{{ t.name | default('a step') }}: {{ r.msg | default('failed')"
                               " | regex_replace('\\\\s+', ' ') | truncate(600) }}")
    return template.render(t=task, r=result)


@pytest.mark.parametrize('task, result', [
    ({'name': 'Release the GPUs'}, {'msg': 'GPU 0 holds 20619 MiB'}),
    ({'name': 'Release the GPUs'}, {'msg': 'two\n  lines\tand tabs'}),
    ({'name': 'Apply the patch'}, {}),
    ({}, {'msg': 'no name'}),
    ({'name': 'Stop'}, {'msg': LONG}),
    ({'name': 'Stop'}, {'msg': LONG[:603]}),
    ({'name': 'Stop'}, {'msg': LONG[:606]}),
], ids=['plain', 'whitespace', 'no-msg', 'no-name', 'long', 'within-leeway', 'past-leeway'])
def test_the_note_is_what_the_former_jinja_wrote(task, result):
    assert failure_note(task, result) == jinja_note(task, result)


def test_a_long_message_is_cut_at_a_word_with_an_ellipsis():
    note = failure_note({'name': 'Stop'}, {'msg': LONG})
    assert note.endswith('...') and len(note) <= len('Stop: ') + 600
    assert note[len('Stop: '):-3].split(' ')[-1] in LONG.split(' ')


def test_the_filter_is_the_function():
    assert FilterModule().filters()['sglang_failure']({'name': 'x'}, {'msg': 'y'}) == 'x: y'
