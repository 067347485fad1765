

def test_an_80_column_table_cuts_no_interval_nor_name() -> None:
    """At 80 columns (what a pipe gets) the rate intervals and the policy names stay whole: the runs column
    goes first, then the headers take two lines (fresh-user report: '(0.082-0…', 'mixed-ch…')."""
    import subprocess
    import sys

    env = {**__import__("os").environ, "COLUMNS": "80"}
    out = subprocess.run([sys.executable, "-m", "pdmux_cli", "capacity", "tests/fixtures/azure_conv_50.csv"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    table = out.stdout.split("max rate: highest")[0]
    assert "…" not in table
    assert "mixed-chunk 512" in table and "(0.65-0.65)" in table
    assert max(len(line) for line in table.splitlines()[1:]) <= 80
