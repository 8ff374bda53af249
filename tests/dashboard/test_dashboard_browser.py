"""The page in a real headless browser (Debian's chromium, driven by Playwright): hosts listed, a
redeploy of the lab started with the token, progress arriving live, the finished run drawn as a
per-host timeline. The screenshot goes to $DASHBOARD_SCREENSHOT (docs/dashboard.png was made so),
else to the test's temporary folder.

The lab is shared: run under `flock /tmp/gpuops-lab.lock`.
"""
import os

import pytest

sync_api = pytest.importorskip('playwright.sync_api')

# Each wait is bounded; a whole redeploy of the lab takes about 20 s.
RUN_TIMEOUT_MS = 300 * 1000


def test_page_starts_a_redeploy_shows_progress_live_and_draws_the_timeline(dashboard, page, tmp_path, orphan_in_gpu1):
    page.goto(dashboard.url + '/')
    page.wait_for_selector('.host[data-host="gpu1"]')
    page.wait_for_selector('.host[data-host="gpu2"]')
    assert 'serving' in page.inner_text('.host[data-host="gpu2"]')

    page.fill('#token', 'not-the-token')
    page.click('#start')
    # Locator waits, not wait_for_function: the page's Content-Security-Policy (script-src 'self') forbids
    # the eval a string predicate needs, as it would forbid an injected script.
    sync_api.expect(page.locator('#status')).to_contain_text('401')

    page.fill('#token', dashboard.token)
    page.check('#force')
    page.click('#start')
    # Progress arrives while the run goes: the live phase of each host, and the event list.
    page.wait_for_selector('#live .phase[data-host="gpu1"]', timeout=RUN_TIMEOUT_MS)
    page.locator('#progress li').nth(4).wait_for(timeout=RUN_TIMEOUT_MS)
    assert page.is_enabled('#cancel')
    # The finished run is drawn: one row per host, its phases as bars, the outage and "healthy".
    page.wait_for_selector('#timelines .run svg.timeline', timeout=RUN_TIMEOUT_MS)
    assert page.inner_text('#status').endswith('successful')
    run = page.query_selector('#timelines .run')
    assert run.get_attribute('data-status') == 'successful'
    for host in ('gpu1', 'gpu2'):
        bars = [bar.get_attribute('data-phase')
                for bar in run.query_selector_all('g.host[data-host="%s"] rect.phase' % host)]
        # The patch step shows only where the dry-run found the patch not applied yet (a fresh lab). A single-node
        # server's start releases its GPUs in its own module run unless the stop found strays (gpu1's orphan):
        # gpu2 has no gpu_release bar of its own.
        released = ['gpu_release'] if host == 'gpu1' else []
        window = [phase for phase in bars if phase in ('stop', 'gpu_release', 'patch', 'start', 'confirm')]
        assert window in (['stop'] + released + ['start', 'confirm'],
                          ['stop'] + released + ['patch', 'start', 'confirm']), bars
        assert run.query_selector('g.host[data-host="%s"] circle.healthy' % host)
    # The orphan beside gpu1's server made the container kill run.
    assert run.query_selector('g.host[data-host="gpu1"] rect.phase[data-phase="kill"]')
    sync_api.expect(page.locator('.host .dot.up')).to_have_count(2)
    shot = os.environ.get('DASHBOARD_SCREENSHOT') or str(tmp_path / 'dashboard.png')
    page.screenshot(path=shot, full_page=True)
    assert os.path.getsize(shot) > 10000
