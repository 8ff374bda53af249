"""Every changelog fragment is YAML that antsibull-changelog can read: known sections, each a list of strings.

A plain YAML scalar holding ': ' (a colon and a space) ends the scalar early and the fragment no longer
parses; `make matrix-sanity` lints the fragments with antsibull-changelog, this catches it in `make test`.
"""
import glob
import os

import pytest
import yaml

from helpers.ansible_run import REPO

SECTIONS = {'release_summary', 'breaking_changes', 'major_changes', 'minor_changes', 'deprecated_features',
            'removed_features', 'security_fixes', 'bugfixes', 'known_issues', 'trivial'}
FRAGMENTS = sorted(glob.glob(os.path.join(REPO, 'changelogs', 'fragments', '*.yml')))


def test_there_are_fragments():
    assert FRAGMENTS


@pytest.mark.parametrize('path', FRAGMENTS, ids=[os.path.basename(path) for path in FRAGMENTS])
def test_a_fragment_has_known_sections_each_a_list_of_strings(path):
    with open(path) as handle:
        fragment = yaml.safe_load(handle)
    assert isinstance(fragment, dict) and fragment, path
    assert set(fragment) <= SECTIONS, set(fragment) - SECTIONS
    for section, entries in fragment.items():
        if section == 'release_summary':
            assert isinstance(entries, str)
            continue
        assert isinstance(entries, list) and entries, section
        assert all(isinstance(entry, str) and entry.strip() for entry in entries), section
