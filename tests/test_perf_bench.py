"""bench/perf.py against a server given as the user may write its DSN."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

_BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(_BENCH))
import perf  # noqa: E402


def _key_value(dsn: str) -> str:
    return make_conninfo("", **{k: v for k, v in conninfo_to_dict(dsn).items() if v})


def test_a_database_dsn_keeps_the_server_and_its_options() -> None:
    for server in ("host=/tmp/pg dbname=postgres user=u",
                   "postgresql://u:p@db.example:5433/app?sslmode=require",
                   "postgresql://u@db.example"):
        info = conninfo_to_dict(perf.database_dsn(server, "pgf_perf_x"))
        given = conninfo_to_dict(server)
        assert info["dbname"] == "pgf_perf_x"
        assert {k: v for k, v in info.items() if k != "dbname"} == \
            {k: v for k, v in given.items() if k != "dbname"}


def test_perf_runs_on_a_server_given_as_key_value_pairs(server_dsn: str) -> None:
    server = _key_value(server_dsn)
    assert "://" not in server
    run = perf.bench_size(server, 300, 5, 10, [1])
    assert run["ingest"]["chunks"] == 300
    assert run["latency"]["funnel_search"][1]["min_results"] == 10
    with psycopg.connect(server_dsn) as c:  # its database is dropped again
        assert c.execute("select count(*) from pg_database "
                         "where datname like 'pgf_perf_300_%'").fetchone() == (0,)
    assert "p50 / funnel_search" in perf.to_markdown([run], None)


def test_clients_without_one_still_gives_the_tables(
        server_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the tables and the plot read the one-client run: --clients 2 alone measured every
    # size, then lost it all to a KeyError before writing anything
    out = tmp_path / "out"
    assert perf.main(["--size", "300", "--queries", "5", "--clients", "2", "--no-embed",
                      "--dsn", server_dsn, "--out", str(out)]) == 0
    md = (out / "perf.md").read_text()
    assert "| funnel_search |" in md and (out / "perf_latency.png").is_file()
    # where the files went, on stderr after the tables (it said nothing of them)
    assert f"wrote {out / 'perf.md'}, perf.json and perf_latency.png" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        perf.main(["--size", "300", "--clients", "0", "--dsn", server_dsn, "--out", str(out)])


@pytest.mark.parametrize("args", [["--size", "0"], ["--size", "300", "--size", "-5"],
                                  ["--queries", "0"], ["--k", "0"], ["--k", "1001"]])
def test_a_value_no_run_can_use_is_a_usage_error_before_the_server_starts(
        args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --size 0 created a database, ingested nothing, then died in a TypeError traceback
    # reading the index sizes; the DSN here reaches no server, so only the parser answers
    dsn = f"host={tmp_path / 'nowhere'} dbname=postgres"
    with pytest.raises(SystemExit) as exc:
        perf.main([*args, "--no-embed", "--dsn", dsn, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert f"error: {args[-2]}:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _fake_run(size: int, clients: list[int], scale: float = 1.0) -> dict[str, object]:
    figures = {"p50": 2.0 * scale, "p95": 3.0 * scale, "p99": 4.0 * scale, "qps": 100.0,
               "min_results": 10}
    latency = {peer: {c: {**figures, "p50": figures["p50"] * (i + 1) * c}
                      for c in clients} for i, peer in enumerate(perf.PEERS)}
    return {"size": size, "base": "helpcenter", "k": 10, "queries": 50, "latency": latency,
            "ingest": {"chunks": size, "db_seconds": 1.0, "total_seconds": 2.0},
            "index_bytes": {"posting (table+indexes)": 2**20}}


def test_the_table_shows_the_client_counts_that_were_measured() -> None:
    # --clients 8 was measured and logged, but the table read only 4 clients: its
    # columns said 'QPS x4' and '-' and the 8-client figures were nowhere in perf.md
    md = perf.to_markdown([_fake_run(300, [1, 8])], None)
    header = next(line for line in md.splitlines() if line.startswith("| peer |"))
    assert "QPS x8" in header and "p50 x8 ms" in header and "x4" not in header
    row = next(line for line in md.splitlines() if line.startswith("| funnel_search |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == len(header.strip("|").split("|"))
    # funnel_search is PEERS' 5th: p50 2.0 * 5 * 8 clients
    assert cells[header.strip("|").split("|").index(" p50 x8 ms ")] == "80.0"
    assert "lower is better" in md and "above 1: the peer is slower" in md
    # the number of queries behind each figure (--queries), which the tables did not say
    assert "## 300 chunks (50 queries)" in md
    default = perf.to_markdown([_fake_run(300, [1, 4])], None)
    assert "| QPS x1 | QPS x4 | p50 x4 ms |" in default
    assert "QPS x4" not in perf.to_markdown([_fake_run(300, [1])], None)


def test_the_latency_plot_reads_both_sizes_on_a_log_scale(tmp_path: Path) -> None:
    # linear, the peer's 100k bar flattened every 10k bar to a few pixels
    fig = perf.plot([_fake_run(10_000, [1]), _fake_run(100_000, [1], scale=30.0)], tmp_path)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert "lower is better" in ax.get_title() and "ms" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["10,000 chunks",
                                                                 "100,000 chunks"]
    assert (tmp_path / "perf_latency.png").stat().st_size > 0


def test_help_gives_each_option_s_default(capsys: pytest.CaptureFixture[str]) -> None:
    # --help read '--queries QUERIES' and '--out OUT' with no word of 200 or bench/out
    with pytest.raises(SystemExit) as exc:
        perf.main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for said in ("default 10000 and 100000", "(default: 200)", "(default: 10)",
                 "(default: bench/out)", "(default: helpcenter)", "PGFUNNEL_DSN"):
        assert said in text, said


def test_a_server_it_cannot_reach_is_one_error_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # it was a traceback through psycopg and pgfunnel.db, the cause on its last line
    dsn = f"host={tmp_path / 'nowhere'} dbname=postgres"
    assert perf.main(["--size", "300", "--no-embed", "--dsn", dsn,
                      "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot connect to Postgres at "), err
    assert "Traceback" not in err and "--dsn, else PGFUNNEL_DSN" in err
    assert not (tmp_path / "out").exists()
