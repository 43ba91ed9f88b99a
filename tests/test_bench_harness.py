"""bench/harness.py, bench/jobs.py and bench/machine.py: what every bench
script relies on, checked without running a benchmark (no MXNet, no MPI)."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import harness  # noqa: E402
import jobs  # noqa: E402
import machine  # noqa: E402


def recording(order, name, value):
    def way():
        order.append(name)
        return value
    return way


def test_interleave_runs_the_ways_in_turn_and_drops_the_warmup():
    order = []
    ways = {"ref": recording(order, "ref", 1), "new": recording(order, "new", 2)}
    rounds = []
    samples = harness.interleave(ways, 3, warmup=1, after_round=lambda i, got: rounds.append((i, got)))
    assert order == ["ref", "new"] * 4
    assert samples == {"ref": [1, 1, 1], "new": [2, 2, 2]}
    assert rounds == [(i, {"ref": 1, "new": 2}) for i in range(3)]


def test_interleave_rotates_which_way_goes_first():
    order = []
    ways = {name: recording(order, name, name) for name in "abc"}
    harness.interleave(ways, 4, rotate=True)
    assert order == list("abc" "bca" "cab" "abc")


def test_spread_and_medians():
    samples = {"one": [3.0], "many": [5.0, 1.0, 4.0, 2.0, 3.0]}
    assert harness.medians(samples) == {"one": 3.0, "many": 3.0}
    spread = harness.spread(samples)
    assert spread["one"] == {"min": 3.0, "q1": 3.0, "median": 3.0, "q3": 3.0, "max": 3.0}
    assert spread["many"] == {"min": 1.0, "q1": 2.0, "median": 3.0, "q3": 4.0, "max": 5.0}
    assert harness.median_or_none([None, 2.0, 4.0]) == 3.0
    assert harness.median_or_none([None]) is None


def test_timed_runs_before_off_the_clock():
    calls = []
    seconds = harness.timed(lambda: calls.append("fn"), before=lambda: calls.append("before"),
                            wait=lambda: calls.append("wait"))()
    assert calls == ["before", "fn", "wait"]
    assert seconds >= 0


def test_arguments_share_the_flags():
    parser = harness.arguments("doc", rounds=3, iters=(10, "calls per size"), output="x.json")
    args = parser.parse_args([])
    assert (args.rounds, args.iters, args.output) == (3, 10, os.path.join(harness.RESULTS, "x.json"))
    assert parser.parse_args(["--rounds", "1", "--output", "/tmp/y.json"]).output == "/tmp/y.json"
    assert "calls per size (default 10)" in parser.format_help()


def test_write_result_adds_the_machine_facts(tmp_path, capsys):
    path = harness.write_result(str(tmp_path / "r.json"), {"median_s": 1.0, "machine": {"rank_threads": 1}})
    with open(path) as f:
        written = json.load(f)
    assert written["median_s"] == 1.0
    facts = written["machine"]
    assert facts["rank_threads"] == 1 and facts["cores"] == os.cpu_count()
    assert {"cpu_model", "load_average", "python", "mxnet", "mpi", "git_commit", "date"} <= set(facts)
    assert harness.read_result(path) == written
    assert harness.read_result(str(tmp_path / "missing.json")) is None
    assert f"wrote {path}" in capsys.readouterr().out


def test_a_job_hands_its_result_to_the_driver(capsys):
    jobs.print_result({"a": [1, 2]})
    assert jobs.result_in("noise\n" + capsys.readouterr().out, "job") == {"a": [1, 2]}
    with pytest.raises(SystemExit, match="no RESULT line"):
        jobs.result_in("nothing here", "job")
    assert jobs.run_job(jobs.this_script(__file__, "--print-result")) == {"from": "child"}
    with pytest.raises(SystemExit, match="failed"):
        jobs.run([sys.executable, "-c", "raise SystemExit(3)"], what="a failing job")


def test_quiet_only_and_load_span():
    assert machine.quiet_only(["a", "b", "c"], [0.1, 0.5, 0.0], 0.2) == ["a", "c"]
    with machine.load_span() as load:
        assert len(load) == 1
    assert len(load) == 2


if __name__ == "__main__" and sys.argv[1:] == ["--print-result"]:
    jobs.print_result({"from": "child"})  # the job test_a_job_hands_its_result_to_the_driver starts


def test_the_readme_and_the_landing_page_show_the_headline_figures_the_results_give():
    """Their tables are what bench/headline.py renders from bench/results/:
    a figure changed by hand, or results re-measured without re-rendering
    (python bench/headline.py), fails here."""
    import headline

    expected = headline.table()
    assert len(expected) > 6, expected  # a row per result file: they are committed
    for page in headline.PAGES:
        with open(page) as f:
            assert headline.rendered_in(f.read()) == expected, f"{page}: run python bench/headline.py"


def test_a_target_is_marked_met_or_missed_by_its_operator():
    import run_all

    assert [run_all.target_met(t, m) for t, m in (("<= 1.15", "0.672"), (">= 0.97", "0.953"), ("> 1.0", "1.0"),
                                                   ("<= 0.1", "n/a"))] == ["yes", "**missed**", "**missed**",
                                                                           "not measured"]
