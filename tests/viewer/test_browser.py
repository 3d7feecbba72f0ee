"""The viewer in a real headless Chromium, over the real demo server (`uvicorn adapter_critic.asgi:app` with a SQLite
run store in a temp dir), its runs made through the official `openai` SDK (issue 14).

Every wait is on the page's state (a selector appearing), never a sleep. Screenshots go to `test-artifacts/viewer/`.
"""

from __future__ import annotations

import itertools
import re

from playwright.sync_api import Browser, Locator, Page, expect

from .conftest import ask, row, screenshot

# Text a model might echo back: it must show as characters and never run.
HOSTILE = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'


def focus_row(page: Page, run_id: str) -> None:
    """Move the list's keyboard focus down (j, then ↓) until it is on the run's row."""
    page.keyboard.press("j")
    for _ in range(60):
        if page.evaluate("document.activeElement.dataset.id") == run_id:
            return
        page.keyboard.press("ArrowDown")
    raise AssertionError(f"the keyboard never reached {run_id}")


def sides(diff: Locator) -> tuple[str, str]:
    """The two texts a rendered diff stands for: without its insertions, and without its deletions."""
    script = "(pre, skip) => [...pre.childNodes].filter(n => n.nodeName !== skip).map(n => n.textContent).join('')"
    return diff.evaluate(script, "INS"), diff.evaluate(script, "DEL")


def test_runs_appear_live_and_a_critic_run_shows_its_stages(demo: str, page: Page) -> None:
    page.goto(f"{demo}/v1/ui")
    expect(page.locator("#runs")).to_be_visible()
    # Made after the page loaded: they must appear without a reload.
    direct_id, _ = ask(demo, "demo-direct", "What is 2 + 2?")
    critic_id, critic = ask(demo, "demo-critic", "What is 2 + 2?")
    expect(row(page, critic_id)).to_be_visible()
    expect(row(page, direct_id)).to_be_visible()
    ids = page.locator("tr.run").evaluate_all("rows => rows.map(row => row.dataset.id)")
    assert ids.index(critic_id) < ids.index(direct_id)  # newest first
    critic_row = row(page, critic_id)
    expect(critic_row.locator("td.model")).to_have_text("demo-critic")
    expect(critic_row.locator("td.mode")).to_have_text("critic")
    expect(critic_row.locator(".status")).to_have_text("ok")
    expect(critic_row.locator("td.num").first).to_have_text(f"{critic['usage']['total_tokens']:,}")
    screenshot(page, "runs-list")

    critic_row.click()
    expect(page).to_have_url(re.compile(rf"#/runs/{critic_id}$"))
    detail = page.locator("#run-detail")
    expect(detail).to_be_visible()
    intermediate = critic["adapter_critic"]["intermediate"]
    expect(page.locator("#critique pre")).to_have_text(intermediate["critic"])
    diff = page.locator("#draft-final pre.diff")
    expect(diff).to_be_visible()
    # The diff holds the draft (unchanged and deleted pieces) and the final (unchanged and inserted pieces).
    draft_side, final_side = sides(diff)
    assert draft_side == intermediate["api_draft"]
    assert final_side == intermediate["final"] == critic["choices"][0]["message"]["content"]
    assert diff.locator("ins").count() > 0
    expect(page.locator("#answer pre")).to_have_text(intermediate["final"])
    lanes = page.locator("#timeline li.lane")
    expect(lanes).to_have_count(3)
    assert lanes.evaluate_all("lanes => lanes.map(l => l.dataset.stage)") == ["api_draft", "critic", "api_final"]
    # Stages run one after another here: each bar starts where (or after) the previous one ends.
    boxes = page.locator("#timeline .bar").evaluate_all(
        "bars => bars.map(b => { const r = b.getBoundingClientRect(); return [r.left, r.right]; })"
    )
    assert all(later[0] >= earlier[1] - 1 for earlier, later in itertools.pairwise(boxes))
    screenshot(page, "run-detail-critic", full_page=False)
    page.locator("#timeline button.lane-name", has_text="critic").click()
    critic_stage = page.locator('details.stage[data-stage="critic"]')
    expect(critic_stage).to_have_attribute("open", "")
    expect(critic_stage.locator("ol.messages li").first).to_be_visible()
    tokens = page.locator("#tokens tbody tr").last
    expect(tokens.locator("td").nth(2)).to_have_text(f"{critic['usage']['total_tokens']:,}")
    screenshot(page, "run-detail-critic-stage")

    # A shareable URL: the same run opens in a new tab from its link alone.
    other = page.context.new_page()
    other.goto(f"{demo}/v1/ui#/runs/{critic_id}")
    expect(other.locator("#run-detail")).to_have_attribute("data-run-id", critic_id)
    other.close()


def test_two_runs_compared_side_by_side(demo: str, page: Page) -> None:
    direct_id, direct = ask(demo, "demo-direct", "Name a prime number.")
    critic_id, critic = ask(demo, "demo-critic", "Name a prime number.")
    page.goto(f"{demo}/v1/ui")
    # From the keyboard: move to a row, mark it (x), move to the other, mark it, compare (c).
    expect(row(page, critic_id)).to_be_visible()
    focus_row(page, critic_id)
    page.keyboard.press("x")
    focus_row(page, direct_id)
    page.keyboard.press("x")
    page.keyboard.press("c")
    expect(page).to_have_url(re.compile(rf"#/compare/{critic_id}/{direct_id}$"))
    expect(page.locator('.side[data-side="A"]')).to_have_attribute("data-run-id", critic_id)
    expect(page.locator('.side[data-side="B"]')).to_have_attribute("data-run-id", direct_id)
    answers = [critic["choices"][0]["message"]["content"], direct["choices"][0]["message"]["content"]]
    expect(page.locator('.side[data-side="A"] pre.text')).to_have_text(answers[0])
    expect(page.locator('.side[data-side="B"] pre.text')).to_have_text(answers[1])
    diff = page.locator("#answer-diff pre.diff")
    expect(diff).to_be_visible()
    assert diff.locator("del").count() + diff.locator("ins").count() > 0
    assert sides(diff) == (answers[0], answers[1])
    screenshot(page, "compare")


def test_model_output_is_shown_as_text_and_never_run(demo: str, page: Page) -> None:
    # The demo model echoes the user's text into its answer, as a model might repeat what it was given.
    run_id, completion = ask(demo, "demo-critic", f"Repeat this: {HOSTILE}")
    assert "<script>" in completion["choices"][0]["message"]["content"]
    page.goto(f"{demo}/v1/ui#/runs/{run_id}")
    expect(page.locator("#answer pre")).to_contain_text(HOSTILE)
    page.locator('details.stage[data-stage="api_draft"] summary').click()
    expect(page.locator('details.stage[data-stage="api_draft"] ol.messages')).to_contain_text(HOSTILE)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main script, main img").count() == 0
    # The browser enforces the page's Trusted Types policy: no script on it can write HTML from a string at all.
    refused = page.evaluate(
        "() => { try { document.body.innerHTML = '<b>x</b>'; return null; } catch (e) { return e.name; } }"
    )
    assert refused == "TypeError"
    screenshot(page, "hostile-output-as-text")


def test_the_list_filters_and_pages(demo: str, page: Page) -> None:
    ids = [ask(demo, "demo-adapter", f"Question {n}")[0] for n in range(3)]
    direct_id, _ = ask(demo, "demo-direct", "Question 4")
    page.goto(f"{demo}/v1/ui#/runs?mode=adapter")
    expect(row(page, ids[-1])).to_be_visible()
    modes = page.locator("tr.run td.mode").all_text_contents()
    assert modes and set(modes) == {"adapter"}
    page.select_option("#filter-mode", "direct")
    expect(page).to_have_url(re.compile(r"#/runs\?mode=direct$"))
    expect(row(page, ids[-1])).to_have_count(0)
    expect(row(page, direct_id)).to_be_visible()
    assert set(page.locator("tr.run td.mode").all_text_contents()) == {"direct"}
    page.fill("#search", ids[0])
    page.press("#search", "Enter")
    expect(page.locator("#run-detail")).to_have_attribute("data-run-id", ids[0])
    expect(page.locator("#draft-final ins").first).to_be_visible()  # the adapter's edit, highlighted


def test_pages_follow_the_cursor(demo: str, page: Page) -> None:
    for n in range(6):  # more than one page of 5
        ask(demo, "demo-direct", f"Paging {n}")
    page.goto(f"{demo}/v1/ui#/runs?mode=direct&limit=5")
    expect(page.locator("tr.run")).to_have_count(5)
    first_page = page.locator("tr.run").evaluate_all("rows => rows.map(r => r.dataset.id)")
    page.click("#older")
    expect(page.locator("#newer")).to_be_enabled()
    expect(page.locator(f'tr.run[data-id="{first_page[0]}"]')).to_have_count(0)
    second_page = page.locator("tr.run").evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert second_page and not set(second_page) & set(first_page)
    page.click("#newer")
    expect(page.locator(f'tr.run[data-id="{first_page[0]}"]')).to_be_visible()


def test_dark_mode(demo: str, browser: Browser) -> None:
    run_id, _ = ask(demo, "demo-critic", "Dark or light?")
    context = browser.new_context(color_scheme="dark", viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.goto(f"{demo}/v1/ui#/runs/{run_id}")
    expect(tab.locator("#run-detail")).to_be_visible()
    dark = tab.evaluate("getComputedStyle(document.body).backgroundColor")
    screenshot(tab, "run-detail-dark")
    tab.click("#theme")  # auto -> light
    expect(tab.locator("#theme")).to_have_text("Theme: light")
    light = tab.evaluate("getComputedStyle(document.body).backgroundColor")
    context.close()
    assert dark == "rgb(21, 24, 29)"
    assert light == "rgb(255, 255, 255)"


DIFF_CASES = [
    ("", ""),
    ("same text", "same text"),
    ("The quick brown fox jumps", "The quick red fox leaps high"),
    ("line one\nline two\n", "line one\nline 2\nline three\n"),
    ("", "all new"),
    ("all gone", ""),
    ("naïve café, 東京 <b>", "naive cafe, 東京 <i>"),
    ("word " * 3000, "word " * 1500 + "other " + "word " * 1500),
]


def test_the_diff_stands_for_both_texts(demo: str, page: Page) -> None:
    """Joined without its insertions a diff is the old text, without its deletions the new one; changes are marked."""
    page.goto(f"{demo}/v1/ui")
    results = page.evaluate(
        """async (cases) => {
            const root = document.querySelector('meta[name="adapter-critic-root"]').content;
            const { diffWords } = await import(`${root}/ui/diff.js`);
            return cases.map(([a, b]) => diffWords(a, b));
        }""",
        DIFF_CASES,
    )
    for (a, b), ops in zip(DIFF_CASES, results, strict=True):
        assert "".join(text for op, text in ops if op != "+") == a
        assert "".join(text for op, text in ops if op != "-") == b
        assert all(op == "=" for op, _ in ops) == (a == b)
    assert results[2] == [
        ["=", "The quick "],
        ["-", "brown"],
        ["+", "red"],
        ["=", " fox "],
        ["-", "jumps"],
        ["+", "leaps high"],
    ]
    assert [op for op, _ in results[7]] == ["=", "+", "="]


def test_concurrent_stages_overlap_on_the_timeline(demo: str, page: Page) -> None:
    """A panel's lenses and best-of-n's candidates run at once: their bars overlap, beside what each one said."""
    panel_id, panel = ask(demo, "demo-panel", "Is 7 prime?")
    page.goto(f"{demo}/v1/ui#/runs/{panel_id}")
    lenses = panel["adapter_critic"]["intermediate"]["lenses"]
    assert len(lenses) > 1
    lens_bars = page.locator("#timeline li.lane[data-stage^='lens:'] .bar")
    expect(lens_bars).to_have_count(len(lenses))
    spans = lens_bars.evaluate_all(
        "bars => bars.map(b => { const r = b.getBoundingClientRect(); return [r.left, r.right]; })"
    )
    assert max(left for left, _ in spans) < min(right for _, right in spans)  # one moment inside every lens's bar
    assert all("bar-overlap" in (name or "") for name in lens_bars.evaluate_all("bars => bars.map(b => b.className)"))
    for name, critique in lenses.items():
        expect(page.locator(f'#critique .lens[data-lens="{name}"] pre')).to_have_text(critique)
    expect(page.locator("#critique .coordinator pre")).to_have_text(
        panel["adapter_critic"]["intermediate"]["coordinator"]
    )
    screenshot(page, "run-detail-panel")

    best_id, best = ask(demo, "demo-best-of-3", "Is 7 prime?")
    page.goto(f"{demo}/v1/ui#/runs/{best_id}")
    intermediate = best["adapter_critic"]["intermediate"]
    candidate_bars = page.locator("#timeline li.lane[data-stage^='candidate:'] .bar")
    expect(candidate_bars).to_have_count(len(intermediate["candidates"]))
    spans = candidate_bars.evaluate_all(
        "bars => bars.map(b => { const r = b.getBoundingClientRect(); return [r.left, r.right]; })"
    )
    assert max(left for left, _ in spans) < min(right for _, right in spans)
    chosen = page.locator("#candidates li.chosen")
    expect(chosen).to_have_attribute("data-candidate", str(intermediate["chosen"] + 1))
    expect(chosen.locator("pre")).to_have_text(intermediate["candidates"][intermediate["chosen"]])
    expect(page.locator("#judgments ol.verdicts > li")).to_have_count(len(intermediate["judgments"]))
    screenshot(page, "run-detail-best-of-n")


def test_mixture_and_verification_runs_show_their_layers_and_questions(demo: str, page: Page) -> None:
    moa_id, moa = ask(demo, "demo-mixture-of-agents", "Is 7 prime?")
    page.goto(f"{demo}/v1/ui#/runs/{moa_id}")
    layers = moa["adapter_critic"]["intermediate"]["layers"]
    expect(page.locator("#layers .layer")).to_have_count(len(layers))
    for depth, answers in enumerate(layers, 1):
        for index, text in enumerate(answers, 1):
            expect(page.locator(f'#layers li[data-proposer="{depth}.{index}"] pre')).to_have_text(text)
    proposer_bars = page.locator("#timeline li.lane[data-stage^='proposer:1.'] .bar")
    expect(proposer_bars).to_have_count(len(layers[0]))
    screenshot(page, "run-detail-mixture-of-agents")

    cove_id, cove = ask(demo, "demo-chain-of-verification", "Is 7 prime?")
    page.goto(f"{demo}/v1/ui#/runs/{cove_id}")
    checks = cove["adapter_critic"]["intermediate"]["verifications"]
    items = page.locator("#verifications ol.verifications > li")
    expect(items).to_have_count(len(checks))
    for index, check in enumerate(checks, 1):
        item = page.locator(f'#verifications li[data-question="{index}"]')
        expect(item.locator("h4")).to_have_text(check["question"])
        expect(item.locator("pre")).to_have_text(check["answer"])
    baseline, final = sides(page.locator("#draft-final pre.diff").first)
    assert (baseline, final) == (
        cove["adapter_critic"]["intermediate"]["baseline"],
        cove["choices"][0]["message"]["content"],
    )
    screenshot(page, "run-detail-chain-of-verification")
