"""How the CLI lays out results: a table never runs past the console, whatever it holds."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from pgfunnel.cli.main import _results_table
from rich.console import Console


def _result(rank: int, citekey: str) -> SimpleNamespace:
    return SimpleNamespace(final_rank=rank, citekey=citekey, lexical_rank=rank, dense_rank=None,
                           fused_rank=rank, rerank_rank=rank,
                           text="a long chunk text that cannot fit on one line " * 5)


@pytest.mark.parametrize("width", [80, 100, 200])
@pytest.mark.parametrize("show_rerank", [False, True])
@pytest.mark.parametrize("citekey", ["short", "library/some-rather-long/path-of-a-page"])
def test_results_table_fits_the_console(width: int, show_rerank: bool, citekey: str) -> None:
    console = Console(width=width, file=None, record=True, force_terminal=False)
    with console.capture() as captured:
        console.print(_results_table("q", [_result(1, citekey), _result(12, "b")],
                                     show_rerank=show_rerank, width=width))
    lines = [line for line in captured.get().splitlines()[1:] if line.strip()]
    assert lines
    for line in lines:
        # the right border is there: nothing was cropped
        assert len(line.rstrip()) <= width and line.rstrip()[-1] in "┓┃┩│┘", line
    assert "a long chunk" in captured.get()


def test_version_flag() -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    import pgfunnel

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"pgfunnel {pgfunnel.__version__}"
