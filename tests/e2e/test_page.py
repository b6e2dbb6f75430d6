"""The buyer's page (edge/page/, docs/page.md) in a real headless Chromium, served by the
local edge in front of a whole local stack (API, queue feeder with the persister and the
draw clock, the edge's publisher): a race sale, a draw sale from entry to audit, and a
lost answer recovered. Screenshots of each state go to artifacts/page/ (not committed)."""

from __future__ import annotations

import http.server
import json
import os
import re
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import urllib3
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from seckill.infra.db import Credentials, connect
from seckill_demo.stack import LocalStack
from seckill_local.checkout import ROOT
from seckill_local.lambdas import local_parameters
from tests.helpers import iso, new_user, seckill_voucher_body, signed

pytestmark = pytest.mark.e2e

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ARTIFACTS = ROOT / "artifacts" / "page"
SECKILL_DRAW = ROOT / ".venv" / "bin" / "seckill-draw"
WAIT = 30  # seconds a page may take to show what the sale did
TITLE = "Spring sale: 100 off"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, creds: Credentials) -> Iterator[LocalStack]:
    """The runner's processes behind the local edge, as `make demo` starts them."""
    env_vars = {"Parameters": local_parameters(os.environ["REDIS_URL"], creds)}
    local = LocalStack(tmp_path_factory.mktemp("page"), env_vars, containers=1, visibility_timeout=2, edge=True)
    try:
        local.start()
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    """Debian's Chromium, headless, through Debian's chromedriver: nothing downloaded."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, f"{missing} missing: apt-get install chromium chromium-driver (make browser)"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=420,1100"):
        options.add_argument(argument)
    # Background windows keep their timers: each window is one buyer waiting on the sale.
    options.add_argument("--disable-background-timer-throttling")
    options.add_argument("--disable-renderer-backgrounding")
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
def browser(driver: WebDriver) -> Iterator[WebDriver]:
    """The browser for one test; the buyers' windows it opens are closed after it (their
    pages would poll the sale on)."""
    first = driver.window_handles[0]
    yield driver
    for handle in driver.window_handles:
        if handle != first:
            driver.switch_to.window(handle)
            driver.close()
    driver.switch_to.window(first)


class Admin:
    """The shop's side: IAM-signed calls on the API's own endpoint (the edge refuses them)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.http = urllib3.PoolManager(retries=False, timeout=30)

    def create(self, shop_id: int, **fields: Any) -> int:
        url, data = f"{self.api}/voucher/seckill", json.dumps(seckill_voucher_body(shop_id, **fields)).encode()
        headers = signed("POST", url, data, {"content-type": "application/json"})
        created = self.http.request("POST", url, body=data, headers=headers)
        assert created.status == 201, created.data
        return int(json.loads(created.data)["data"])

    def stop(self, voucher_id: int) -> None:
        url = f"{self.api}/voucher/seckill/{voucher_id}/stop"
        assert self.http.request("POST", url, headers=signed("POST", url)).status == 200


class Buyer:
    """One buyer's browser window on the page."""

    def __init__(self, driver: WebDriver, name: str) -> None:
        self.driver, self.name = driver, name
        driver.switch_to.new_window("window")
        self.handle = driver.current_window_handle

    def focus(self) -> WebDriver:
        if self.driver.current_window_handle != self.handle:
            self.driver.switch_to.window(self.handle)
        return self.driver

    def open(self, base: str, shop_id: int, voucher_id: int, token: str) -> None:
        """Sign in as a buyer does: the form, typed, submitted with the keyboard."""
        driver = self.focus()
        driver.get(f"{base}/page/index.html?shop={shop_id}&voucher={voucher_id}")
        self.keep_requests()
        field = driver.find_element(By.ID, "token")
        field.send_keys(token)
        field.submit()
        self.until(lambda: "Loading" not in self.text("state"), "the sale loaded")

    def reload(self) -> None:
        """Reload the page, as a buyer does: the tab's sign-in (and entry) stay in it."""
        self.focus().refresh()
        self.keep_requests()
        self.until(lambda: "Loading" not in self.text("state"), "the sale loaded again")

    def keep_requests(self) -> None:
        """Room for every request of this document in its Resource Timing entries (250 by
        default, after which they are dropped)."""
        self.focus().execute_script("performance.setResourceTimingBufferSize(100000)")

    def requests(self, path_end: str) -> int:
        """How many requests this document made to a path ending so (its Resource Timing
        entries: every fetch, whatever its method)."""
        names = self.focus().execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
        return sum(urlsplit(name).path.endswith(path_end) for name in names)

    def text(self, element: str) -> str:
        return str(self.focus().find_element(By.ID, element).text)

    def attribute(self, element: str, name: str) -> str | None:
        value = self.focus().find_element(By.ID, element).get_attribute(name)
        return None if value is None else str(value)

    def enabled(self, element: str) -> bool:
        return bool(self.focus().find_element(By.ID, element).is_enabled())

    def click(self, element: str) -> None:
        self.focus().find_element(By.ID, element).click()

    def keyboard(self, element: str) -> None:
        """Without a mouse: from the sale's heading (where signing in leaves the focus), Tab to it, Enter."""
        driver = self.focus()
        driver.execute_script("arguments[0].focus()", driver.find_element(By.ID, "sale-heading"))
        target = driver.find_element(By.ID, element)
        for _ in range(20):
            if driver.switch_to.active_element == target:
                target.send_keys(Keys.ENTER)
                return
            driver.switch_to.active_element.send_keys(Keys.TAB)
        raise AssertionError(f"{self.name}: #{element} cannot be reached with the Tab key")

    def until(self, condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        try:
            WebDriverWait(self.focus(), timeout, poll_frequency=0.2).until(lambda _: condition())
        except TimeoutException:
            raise AssertionError(f"{self.name}: {what}; the page says {self.text('answer')!r}") from None

    def shows(self, element: str, words: str, timeout: float = WAIT) -> None:
        self.until(lambda: words in self.text(element), f"#{element} to show {words!r}", timeout)

    def screenshot(self, name: str, section: str = "sale") -> None:
        """The window, scrolled to ``section``, into artifacts/page/."""
        driver = self.focus()
        driver.execute_script("arguments[0].scrollIntoView()", driver.find_element(By.ID, section))
        driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))

    def fits(self, width: int) -> bool:
        """Readable at ``width`` CSS pixels: nothing wider than the window (no sideways scroll)."""
        driver = self.focus()
        driver.set_window_size(width, 1100)
        return bool(driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"))


def soon(seconds: float) -> str:
    return iso(datetime.now(UTC) + timedelta(seconds=seconds))


def test_a_race_sale_wins_refuses_a_second_order_and_says_sold_out(
    stack: LocalStack, browser: WebDriver, mint: Callable[[int], str]
) -> None:
    assert stack.edge is not None
    admin, shop = Admin(stack.api_url), new_user()
    voucher = admin.create(shop, title=TITLE, stock=2, beginTime=soon(10), endTime=soon(300))
    winner, second, late = new_user(), new_user(), new_user()
    first = Buyer(browser, "winner")
    first.open(stack.edge.url, shop, voucher, mint(winner))
    first.shows("state", "Opens in")
    assert not first.enabled("press")
    assert "opens in" in first.text("press")
    assert re.search(r"clock is \d+\.\d s (ahead of|behind) this device", first.text("clock"))
    first.screenshot("race-1-before-the-opening")
    # The winner in a second window too (two tabs of one person): its press is a duplicate.
    again, other, last = Buyer(browser, "winner again"), Buyer(browser, "second"), Buyer(browser, "late")
    for page, user in ((again, winner), (other, second), (last, late)):
        page.open(stack.edge.url, shop, voucher, mint(user))
    first.until(lambda: first.enabled("press"), "the press enabled at the opening")
    first.click("press")
    first.shows("answer", "You got one")
    first.shows("order-status", "CONFIRMED")
    first.shows("order-payby", "left")
    first.screenshot("race-2-won", "buy")
    again.until(lambda: again.enabled("press"), "the press enabled")
    again.click("press")
    again.shows("answer", "already hold an order")
    assert not again.enabled("press")
    again.screenshot("race-3-duplicate-order", "buy")
    other.click("press")
    other.shows("order-status", "CONFIRMED")
    last.click("press")
    last.shows("answer", "Sold out")
    assert not last.enabled("press")  # it cannot succeed now: no second press for nothing
    last.screenshot("race-4-sold-out", "buy")


def verify(edge: str, voucher_id: int, user_id: int, ticket: str) -> dict[str, Any]:
    """`seckill-draw verify` on the same sale, through the same edge."""
    command = [str(SECKILL_DRAW), "verify", "--voucher", str(voucher_id), "--user", str(user_id)]
    command += ["--ticket", ticket, "--endpoint", edge, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    audit: dict[str, Any] = json.loads(done.stdout)
    audit["exit"] = done.returncode
    return audit


def agrees(page: Buyer, audit: dict[str, Any]) -> None:
    """The page's audit says what the command says: the same verdict, admitted at the same move."""
    assert page.attribute("audit", "data-ok") == str(audit["ok"]).lower()
    assert (page.attribute("audit", "data-admitted-at") or None) == audit["admitted_at"]


def test_a_draw_sale_from_entry_to_audit(
    stack: LocalStack, browser: WebDriver, creds: Credentials, mint: Callable[[int], str]
) -> None:
    """Two enter before the close, one unit: the first move admits one of them, who wins; the
    other waits, not admitted; a third enters late. No page asks the entry route but its POST.
    Once stopped, each page audits the draw and agrees with seckill-draw verify; with the stored
    seed changed, the audit fails in words."""
    assert stack.edge is not None
    admin, shop = Admin(stack.api_url), new_user()
    # 25 s from the close to the opening: a page reads the record at the close (within 5 s)
    # and 10 s later, so it knows of the close's move before the opening either way. No wave
    # before the sale is stopped (the first, at the opening + 120 s, would be decided while
    # the unit may not be bought yet).
    voucher = admin.create(
        shop, title=TITLE, stock=1, beginTime=soon(40), endTime=soon(300),
        admission="draw", admitFactor=1, drawCloseSeconds=25, waveSeconds=120,
    )  # fmt: skip
    users = {"early": new_user(), "also early": new_user(), "late": new_user()}
    pages = {name: Buyer(browser, name) for name in users}
    # The page asks the entry route only when Enter is pressed (a POST): never a GET.
    entries = dict.fromkeys(pages.values(), 0)
    for name in ("early", "also early"):
        page = pages[name]
        page.open(stack.edge.url, shop, voucher, mint(users[name]))
        page.shows("draw-next", "Enter before the draw closes")
        if name == "early":
            page.screenshot("draw-1-before-entering")
        assert page.requests("/entry") == 0
        page.click("enter")
        entries[page] += 1
        page.shows("ticket", "0")
        page.shows("draw-next", "You are in the draw")
    pages["early"].screenshot("draw-2-entered", "draw")
    late = pages["late"]
    late.open(stack.edge.url, shop, voucher, mint(users["late"]))
    late.shows("draw-next", "The draw has closed")
    # Closed by the service's clock too (the page's may be ahead by its margin): the close's move.
    late.until(lambda: "none yet" not in late.text("cursor"), "the close's move in the record")
    assert late.requests("/entry") == 0
    late.click("enter")
    late.shows("ticket", "(late entry)")
    assert late.requests("/entry") == 1
    # Reloaded, the page has its entry from the tab, and asks nothing of the entry route.
    late.reload()
    late.shows("ticket", "(late entry)")
    assert not late.enabled("enter")
    # The first move, at the close, admits one of the two early entrants (their tickets decide).
    early = [pages["early"], pages["also early"]]
    first = early[0]
    first.until(lambda: any("You are admitted" in p.text("draw-next") for p in early), "the first move")
    winner = next(p for p in early if "You are admitted" in p.text("draw-next"))
    waiting = next(p for p in early if p is not winner)
    assert not winner.enabled("press")  # admitted, but the sale has not opened
    winner.screenshot("draw-3-admitted", "draw")
    winner.until(lambda: winner.enabled("press"), "the press enabled at the opening", timeout=WAIT + 25)
    winner.click("press")
    winner.shows("order-status", "CONFIRMED")
    winner.screenshot("draw-4-won", "buy")
    for page in (waiting, late):
        page.shows("draw-next", "Not admitted yet")
        assert not page.enabled("press")
        assert page.text("press") == "Buy (not admitted yet)"
        assert page.text("chance") == "waiting"
        assert re.fullmatch(r"about \d+", page.text("ahead"))
    assert winner.text("chance") == "admitted"
    waiting.screenshot("draw-5-not-admitted", "draw")
    late.screenshot("draw-6-late-entrant", "draw")
    # Stopped: the seed is out, and every page checks the draw by itself.
    admin.stop(voucher)
    names = {pages[name]: name for name in users}
    for page in (winner, waiting, late):
        page.shows("audit-verdict", "The draw checks out")
        audit = verify(stack.edge.url, voucher, users[names[page]], page.text("ticket").split()[0])
        assert audit["exit"] == 0, audit
        agrees(page, audit)
    assert "You were admitted at" in winner.text("audit-verdict")
    assert "You were not admitted" in waiting.text("audit-verdict")
    assert "late entry number 1 of 1" in late.text("audit-checks")
    assert {page.name: page.requests("/entry") for page in entries} == {p.name: n for p, n in entries.items()}
    assert {page.text("chance") for page in entries} == {"over"}
    winner.screenshot("draw-7-audit-passed", "audit")
    # A record whose seed is not the one committed to (changed where it is kept).
    connection = connect(creds)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE tb_draw SET seed = %s WHERE voucher_id = %s", (secrets.token_bytes(32), voucher))
    connection.commit()
    connection.close()
    winner.click("audit-run")
    winner.shows("audit-verdict", "The draw does NOT check out: The revealed seed is NOT the one committed to")
    assert "is NOT the one the seed gives you" in winner.text("audit-checks")
    winner.screenshot("draw-8-audit-failed", "audit")
    assert winner.fits(320)  # the longest page there is, at the narrowest phone's width
    audit = verify(stack.edge.url, voucher, users[names[winner]], winner.text("ticket").split()[0])
    assert audit["exit"] == 1
    agrees(winner, audit)


class LosingProxy(http.server.ThreadingHTTPServer):
    """The way between the browser and the edge, which loses the answer to the first press:
    the press reaches the edge and the API, which take the order; the browser gets a gateway's
    502 page instead of the 202 (as from a function that died after queueing the order)."""

    def __init__(self, upstream: str, press: str) -> None:
        self.upstream, self.press = upstream, press
        self.http = urllib3.PoolManager(retries=False, timeout=30)
        self.lost: list[int] = []  # the statuses of the answers lost
        super().__init__(("127.0.0.1", 0), Relay)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Relay(http.server.BaseHTTPRequestHandler):
    server: LosingProxy

    def relay(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in {"host", "connection"}}
        answer = self.server.http.request(
            self.command, self.server.upstream + self.path, body=body, headers=headers, redirect=False
        )
        if self.command == "POST" and self.path == self.server.press and not self.server.lost:
            self.server.lost.append(answer.status)
            self.send_response(502)
            page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            if name.lower() not in {"connection", "transfer-encoding", "content-length", "date", "server"}:
                self.send_header(name, value)
        self.send_header("content-length", str(len(answer.data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.data)

    def do_GET(self) -> None:
        self.relay()

    def do_POST(self) -> None:
        self.relay()

    def do_HEAD(self) -> None:
        self.relay()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test's output is its assertions (and no token is ever logged)."""


def test_a_lost_answer_is_recovered_through_my_order(
    stack: LocalStack, browser: WebDriver, mint: Callable[[int], str]
) -> None:
    """Needs GET /voucher-order/seckill/{voucherId}, "my order on this voucher"."""
    assert stack.edge is not None
    admin, shop = Admin(stack.api_url), new_user()
    voucher = admin.create(shop, title=TITLE, stock=5, beginTime=soon(-60), endTime=soon(300))
    proxy = LosingProxy(stack.edge.url, f"/voucher-order/seckill/{voucher}")
    try:
        buyer = Buyer(browser, "unlucky")
        buyer.open(proxy.url, shop, voucher, mint(new_user()))
        buyer.until(lambda: buyer.enabled("press"), "the press enabled")
        buyer.keyboard("press")
        buyer.shows("answer", "You hold an order on this voucher")
        assert proxy.lost == [202]  # the order was taken; its answer never reached the page
        buyer.shows("order-status", "CONFIRMED")
        assert not buyer.enabled("press")
        buyer.screenshot("lost-answer-recovered", "buy")
    finally:
        proxy.shutdown()
        proxy.server_close()
