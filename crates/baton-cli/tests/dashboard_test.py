"""Drives the `baton serve` dashboard in headless Chromium (run by serve_dashboard.rs).

Usage: python dashboard_test.py URL TOKEN SCREENSHOT_DIR PROFILE_DIR

The service must have TOKEN configured and a default template whose job
prints a line with HTML in it and then waits (until it is cancelled). Prints
one JSON line at the end: {"job": ID, "screenshots": [...]}. Any failed check
raises, and the exit status is non-zero.
"""

import json
import os
import re
import sys
import urllib.request
from urllib.parse import urlsplit

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

URL, TOKEN, SHOTS, PROFILE = sys.argv[1:5]
LIMIT = 60  # seconds: generous, the checks wait for a state, not for a time


def api(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + TOKEN)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=LIMIT) as r:
        return r.status, json.loads(r.read() or b"null")


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--user-data-dir=" + PROFILE,
    ]:
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=opts)


def until(driver, what, cond):
    """Waits until cond(driver) is truthy; fails naming `what`."""
    return WebDriverWait(driver, LIMIT, poll_frequency=0.05).until(
        lambda d: cond(d), message="the page never showed " + what
    )


def one(driver, css):
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0] if found else None


def main():
    driver = browser()
    shots = []
    try:
        driver.get(URL + "/")
        # The page is served without the token; its first API call gets a 401
        # and it asks for the token.
        login = until(driver, "the token form", lambda d: (e := one(d, "#login.show")) and e.is_displayed() and e)
        login.find_element(By.ID, "token").send_keys(TOKEN)
        login.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        until(driver, "the service as ok", lambda d: one(d, "#state.s-ok"))
        assert driver.execute_script("return sessionStorage.getItem('baton-serve-token')") == TOKEN

        status, sub = api("POST", "/v1/jobs", {"prompt": "p1", "group": "dash"})
        assert status == 202, sub
        job = sub["id"]
        row = f'#running tr.job[data-job-id="{job}"][data-status="running"]'
        until(driver, "the job as running", lambda d: one(d, row))
        until(driver, "the job's group", lambda d: one(d, '#groups tr[data-key="dash"]'))
        until(driver, "the service's instance lock", lambda d: one(d, '#locks tr[data-key="serve/instance"]'))

        # Its log, followed while it runs; its HTML stays text.
        one(driver, row).click()
        until(driver, "the job's log", lambda d: "started p1" in d.find_element(By.ID, "log-text").text)
        text = driver.find_element(By.ID, "log-text").text
        assert '<img id="injected" src="x">' in text, text
        assert one(driver, "#injected") is None, "job output was parsed as markup"
        assert driver.find_element(By.ID, "log-state").text == "following…"
        driver.save_screenshot(os.path.join(SHOTS, "dashboard-running.png"))
        shots.append(os.path.join(SHOTS, "dashboard-running.png"))

        one(driver, f'#running button.cancel[data-job-id="{job}"]').click()
        until(driver, "the job as cancelled", lambda d: one(d, f'#recent tr.job[data-job-id="{job}"][data-status="cancelled"]'))
        until(driver, "the job gone from the running list", lambda d: one(d, f'#running tr[data-job-id="{job}"]') is None)
        until(driver, "the end of the followed log", lambda d: d.find_element(By.ID, "log-state").text == "the job has ended")
        status, got = api("GET", "/v1/jobs/" + job)
        assert status == 200 and got["status"] == "cancelled", got
        driver.save_screenshot(os.path.join(SHOTS, "dashboard.png"))
        shots.append(os.path.join(SHOTS, "dashboard.png"))

        # Nothing from other hosts: neither in the document nor loaded.
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(URL))
        for u in re.findall(r"https?://[^\s\"'<>)]+", driver.page_source):
            assert u.startswith(origin), "the page refers to another host: " + u
        loaded = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        for u in loaded:
            assert u.startswith(origin), "the page loaded from another host: " + u

        # A narrow window: the page fits its width (tables scroll inside their cards).
        driver.set_window_size(390, 900)
        until(driver, "a layout as narrow as the window", lambda d: d.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth"))
        driver.save_screenshot(os.path.join(SHOTS, "dashboard-narrow.png"))
        shots.append(os.path.join(SHOTS, "dashboard-narrow.png"))
    except Exception:
        try:
            path = os.path.join(SHOTS, "dashboard-failure.png")
            driver.save_screenshot(path)
            print("screenshot of the failure: " + path, file=sys.stderr)
            print(driver.execute_script("return document.body.innerText"), file=sys.stderr)
        except Exception:  # noqa: BLE001 - the original failure matters more
            pass
        raise
    finally:
        driver.quit()
    print(json.dumps({"job": job, "screenshots": shots}))


if __name__ == "__main__":
    main()
