"""The fast /metrics reader gives exactly prometheus_client's families on real vLLM pages and on
the edge cases of the format, and observe's parse of any page (in the subset or not, well
formed or not) is what it was with prometheus_client alone: the same samples, or the same
error."""

from __future__ import annotations

import math
import random
import tracemalloc
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.processes import http_post, running
from harness.stack import nixl_sim, proxy
from observe.build import tracked
from observe.metrics.samples import Scrape, parse
from observe.metrics.text_format import Unsupported, read

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "vllm"
PAGES = ("prefill_metrics.txt", "decode_metrics.txt", "colocated_metrics.txt")


def reference_parse(text: str, keep=None) -> Scrape:
    """observe.metrics.samples.parse as it was before the fast reader, verbatim."""
    counters: dict = {}
    gauges: dict = {}
    for family in text_string_to_metric_families(text):
        if keep is not None and not keep(family.name):
            continue
        cumulative = family.type in ("counter", "histogram")
        for s in family.samples:
            if math.isnan(s.value):
                continue
            key = (s.name, tuple(sorted(s.labels.items())))
            if cumulative and s.name.endswith(("_total", "_bucket", "_count", "_sum")):
                counters[key] = s.value
            elif not cumulative and family.type != "info":
                gauges[key] = s.value
    return Scrape(counters, gauges)


def exact(value) -> tuple[str, str]:
    """A value compared by type and repr: 3 is not 3.0 here, and NaN equals NaN."""
    return type(value).__name__, repr(value)


def reference_families(text: str) -> list:
    """prometheus_client's families, in the fast reader's shape."""
    return [
        (f.name, f.type, [(s.name, sorted_labels(s.labels), exact(s.value)) for s in f.samples])
        for f in text_string_to_metric_families(text)
    ]


def sorted_labels(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def fast_families(text: str) -> list:
    return [(n, t, [(s, key, exact(v)) for s, key, v in samples]) for n, t, samples in read(text)]


def outcome(fn, text: str, keep=None):
    """What `fn` makes of `text`: its samples in order, typed, or the error it raises."""
    try:
        scrape = fn(text, keep)
    except ArithmeticError:  # a value out of a float's range: parse says ValueError since
        return ValueError  # the observer skips an unreadable page but would stop on this
    except Exception as err:  # comparing errors is the point: any type, same as before
        return type(err)
    return tuple(
        tuple((key, exact(value)) for key, value in part.items())
        for part in (scrape.counters, scrape.gauges)
    )


def same_as_before(text: str) -> None:
    for keep in (None, tracked):
        assert outcome(parse, text, keep) == outcome(reference_parse, text, keep)


@pytest.mark.parametrize("page", PAGES)
def test_real_vllm_pages_read_fast_as_prometheus_client_reads_them(page: str) -> None:
    text = (FIXTURES / page).read_text()
    assert fast_families(text) == reference_families(text)
    same_as_before(text)


@pytest.mark.e2e
def test_the_stand_ins_and_the_proxys_live_pages_read_fast_as_before(tmp_path: Path) -> None:
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer")
    decode = nixl_sim(tmp_path, "decode", "kv_consumer")
    with running(prefill, decode):
        front = proxy(tmp_path, "proxy", "--connector", "nixl", "--mode", "read",
                      "--prefill", prefill.url, "--decode", decode.url)  # fmt: skip
        with running(front):
            for _ in range(3):  # histograms with counts, not only zeros
                body = {"model": "tiny", "prompt": "one two three", "max_tokens": 4}
                status, answer = http_post(front.url + "/v1/completions", body)
                assert status == 200, answer
            pages = [p.metrics() for p in (prefill, decode, front)]
    for text in pages:
        assert fast_families(text) == reference_families(text)
        same_as_before(text)
        assert parse(text, tracked).counters  # the families observe keeps are there


NUMBERS = ("0", "-0", "+7", "007", "1.", ".5", "-2.5e-3", "1E5", "1e999", "9" * 30)
IN_SUBSET = {
    "escapes": 'x{a="q\\"uote",b="back\\\\slash",c="new\\nline",d="not\\\\n"} 1.5\n',
    "braces, commas and spaces in values": 'x{a="} 2",b="{,=}",c=" "} 3\n',
    "specials": (
        "# TYPE h histogram\n"
        'h_bucket{le="0.5"} 1.0\nh_bucket{le="+Inf"} 2.0\nh_count 2.0\nh_sum NaN\n'
        '# TYPE g gauge\ng{k="a"} +Inf\ng{k="b"} -Inf\ng{k="c"} Inf\ng{k="d"} NaN\n'
    ),
    "numbers": "# TYPE g gauge\n" + "".join(f'g{{n="{i}"}} {v}\n' for i, v in enumerate(NUMBERS)),
    "timestamps": '# TYPE c_total counter\nc_total 3 1700000000000\nc_total{a="b"} 4.0 -1.5\n',
    "empty page": "",
    "blank lines, CRLF and padding": "\n\n# TYPE g gauge\r\n  g 1  \r\n\n",
    "empty braces": "x{} 1\n",
    "HELP only, HELP then TYPE": "# HELP u some text\nu 1\n# HELP c help\n# TYPE c counter\nc 2\n",
    "counter named without _total": "# TYPE reqs counter\nreqs 5\nreqs_total 6\n",
    "_created and out-of-family samples": (
        "# TYPE c_total counter\nc_total 1.0\nc_created 17.0\nc_total 2.0\n"
        '# TYPE h histogram\nh_bucket{le="+Inf"} 1\nh_created 5\nh_count 1\n'
    ),
    "TYPE twice for one name": "# TYPE x gauge\nx 1\n# TYPE x counter\nx 2\n",
    "summary, info and others": (
        '# TYPE s summary\ns{quantile="0.5"} 1\ns_count 2\ns_sum 3\n'
        '# TYPE i info\ni{v="1"} 1\n# TYPE ss stateset\nss{ss="a"} 1\n'
        "# TYPE u untyped\nu 1\n# TYPE k unknown\nk 1\n# TYPE gh gaugehistogram\ngh 1\n"
    ),
    "a family twice": "# TYPE g gauge\ng 1\n# TYPE o gauge\no 2\n# TYPE g gauge\ng 3\n",
}


@pytest.mark.parametrize("text", IN_SUBSET.values(), ids=IN_SUBSET.keys())
def test_the_subset_reads_fast_exactly_as_prometheus_client(text: str) -> None:
    assert fast_families(text) == reference_families(text)
    same_as_before(text)


OUTSIDE = {
    "a plain comment": "# a comment\nx 1\n",
    "a tab": "x\t1\n",
    "a trailing comma": 'x{a="b",} 1\n',
    "a space in the braces": 'x{a="b", c="d"} 1\n',
    "an unknown escape": 'x{a="\\t"} 1\n',
    "three numbers": "x 1 2 3\n",
    "a lower-case inf": "x inf\n",
    "a duplicate label": 'x{a="1",a="2"} 1\n',
    "a reserved label": 'x{__name__="y"} 1\n',
    "an unknown type": "# TYPE x widget\nx 1\n",
    "a TYPE without a type": "# TYPE x\nx 1\n",
    "a TYPE of two words": "# TYPE x counter extra\nx 1\n",
    "HELP without a name": "# HELP\n",
    "a _total counter": "# TYPE _total counter\n_total 1\n",
    "no value": "x\n",
    "a bad value": "x one\n",
    "an underscore in a value": "x 1_000\n",
    "a huge timestamp": "x 1 " + "9" * 400 + "\n",
    "an unclosed brace": 'x{a="b" 1\n',
    "an exemplar": 'x_total 1 # {t="a"} 1\n',
}


@pytest.mark.parametrize("text", OUTSIDE.values(), ids=OUTSIDE.keys())
def test_the_rest_goes_to_prometheus_client_with_the_same_result_or_error(text: str) -> None:
    with pytest.raises(Unsupported):
        read(text)
    same_as_before(text)


def test_a_malformed_page_is_refused_as_before() -> None:
    page = (FIXTURES / "decode_metrics.txt").read_text()
    broken = page.replace("vllm:num_requests_running{", "vllm:num_requests_running{{", 1)
    with pytest.raises(ValueError):
        reference_parse(broken, tracked)
    with pytest.raises(ValueError):
        parse(broken, tracked)
    # A malformed line of a family observe does not keep still makes the page unreadable.
    dropped = page.replace("vllm:engine_sleep_state{", "vllm:engine_sleep_state{{", 1)
    assert not tracked("vllm:engine_sleep_state") and dropped != page
    with pytest.raises(ValueError):
        parse(dropped, tracked)


MUTATIONS = (*' \t"\\{},=#_.en+-0\nx', "Inf", "NaN", "\\n", "# TYPE ", " counter", "_total")


def test_mutated_pages_read_as_before() -> None:
    """Random edits of a page: where the fast reader accepts one it agrees with
    prometheus_client, and observe's parse gives what it gave before (samples or error)."""
    lines = (FIXTURES / "decode_metrics.txt").read_text().splitlines(keepends=True)
    rng = random.Random(1234)
    fast = 0
    for _ in range(1500):
        start = rng.randrange(len(lines) - 12)
        page = list("".join(lines[start : start + 12]))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(page))
            if rng.random() < 0.3:
                del page[at]
            else:
                page.insert(at, rng.choice(MUTATIONS))
        text = "".join(page)
        try:
            families = fast_families(text)
        except Unsupported:
            pass
        else:
            fast += 1
            assert families == reference_families(text), text
        same_as_before(text)
    assert 100 < fast < 1400  # both paths were exercised


def test_a_value_too_large_for_a_float_is_an_unreadable_page_not_a_crash():
    """The observer catches ValueError for a page it cannot read; an OverflowError would stop
    it for every deployment."""
    import pytest

    from observe.metrics.samples import parse

    page = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running " + "9" * 400 + "\n"
    with pytest.raises(ValueError, match=r"out of range|could not convert|invalid"):
        parse(page)


def test_the_reader_keeps_no_entry_per_value_a_moving_counter_took():
    """A counter has a new value every scrape: caching each would grow pdctl serve for good."""
    page = "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total {}\n"
    for i in range(5_000):  # the cache as full as it gets
        read(page.format(float(i)))
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(5_000, 25_000):
        read(page.format(float(i)))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    reader = [tracemalloc.Filter(True, "*text_format.py")]
    grown = sum(
        s.size_diff
        for s in after.filter_traces(reader).compare_to(before.filter_traces(reader), "filename")
    )
    # What the window's values left behind: the few thousand a bounded cache keeps (~0.4 MB),
    # not 16,384 (2.8 MB) or one per value.
    assert grown < 1_000_000, grown
