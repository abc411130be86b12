"""`python -m inr_client` against the real server: output files, progress, and bad input."""

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from inr_client import Client
from inr_client.cli import main
from tests.servers import ROOT, draw_digit


def cli(server, *args):
    """Run the CLI in this process; return (exit code, stdout)."""
    out = io.StringIO()
    return main(["--url", server.url, *args], out=out), out.getvalue()


def test_the_module_renders_to_a_png_with_a_progress_bar(server, tmp_path):
    out = tmp_path / "big.png"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inr_client",
            "render",
            "--url",
            server.url,
            "--model",
            "astronaut",
            "--width",
            "300",
            "--height",
            "200",
            "--tile",
            "128",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "render" in proc.stderr and "100%" in proc.stderr
    with Image.open(out) as img:
        assert img.size == (300, 200) and img.format == "PNG"
    with Client(server.url) as c:
        np.testing.assert_array_equal(np.asarray(Image.open(out)), c.render("astronaut", 300, 200, tile=128))


@pytest.mark.parametrize("suffix", ["jpg", "webp"])
def test_render_writes_jpeg_and_webp_by_the_output_suffix(server, tmp_path, suffix):
    out = tmp_path / f"view.{suffix}"
    code, _ = cli(
        server,
        "render",
        "--model",
        "astronaut",
        "--width",
        "64",
        "--height",
        "48",
        "--rotate",
        "90",
        "--viewport",
        "0.25,0.25,0.75,0.75",
        "--supersample",
        "2",
        "--no-progress",
        "--out",
        str(out),
    )
    assert code == 0
    with Image.open(out) as img:
        assert img.size == (64, 48)


def test_query_prints_the_colours_as_json(server):
    code, out = cli(server, "query", "--model", "astronaut", "0.5,0.5", "0.1,0.2", "--rotate", "45")
    rgb = json.loads(out)["rgb"]
    assert code == 0 and len(rgb) == 2 and all(len(c) == 3 for c in rgb)


def test_classify_prints_one_line_per_file_with_its_label(server, tmp_path):
    files = []
    for d in (2, 5):
        files.append(tmp_path / f"digit{d}.png")
        draw_digit(d).save(files[-1])
    code, out = cli(server, "classify", "--model", "digits", *map(str, files))
    lines = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and [(Path(f).name, int(label)) for f, label, *_ in lines] == [
        ("digit2.png", 2),
        ("digit5.png", 5),
    ]


def test_models_prints_name_task_status_and_provider(server):
    code, out = cli(server, "models")
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()}
    assert code == 0 and rows["astronaut"][1:3] == ["image", "ready"] and rows["tampered"][2] == "failed"


@pytest.mark.parametrize(
    "args, problem",
    [
        (["--model", "no-such-model"], "no-such-model"),
        (["--model", "digits"], "digits"),
        (["--model", "astronaut", "--viewport", "0.5,0,0.2,1"], "x1 > x0"),
        (["--model", "astronaut", "--viewport", "0,0,1"], "--viewport"),
        (["--model", "astronaut", "--rotate", "nan"], "--rotate"),
        (["--model", "astronaut", "--width", "0"], "--width"),
        (["--model", "astronaut", "--supersample", "99"], "supersample"),
    ],
)
def test_bad_render_input_is_one_line_exit_2_and_leaves_no_file(server, tmp_path, capsys, args, problem):
    argv = ["--width", "40", "--height", "30", "--out", str(tmp_path / "x.png"), *args]  # progress bar on
    try:
        code, _ = cli(server, "render", *argv)
    except SystemExit as e:  # argparse errors exit from inside the parser
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and problem in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("out, problem", [("x.gif", "must end in"), ("missing/x.png", "does not exist")])
def test_a_bad_output_path_is_refused_before_rendering(server, tmp_path, capsys, out, problem):
    code, _ = cli(
        server, "render", "--model", "astronaut", "--width", "8", "--height", "8", "--out", str(tmp_path / out)
    )
    assert code == 2 and problem in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_killed_render_removes_its_partial_file(server, tmp_path):
    """SIGTERM once the first band is on disk: 1 of 256 bands (was 1 of 32, which leaves a fast CPU that
    renders the rest within the 50 ms poll and the signal's delivery less room)."""
    import signal
    import time

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inr_client",
            "--url",
            server.url,
            "render",
            "--model",
            "astronaut",
            "--width",
            "1024",
            "--height",
            "32768",
            "--tile",
            "128",
            "--no-progress",
            "--out",
            str(tmp_path / "big.png"),
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".big.png.part-*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert list(tmp_path.glob(".big.png.part-*")), "the first band never reached the disk"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err == "error: interrupted; nothing was written\n"
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_service_is_one_line_exit_1(tmp_path, capsys):
    code = main(
        [
            "--url",
            "http://127.0.0.1:9",
            "render",
            "--model",
            "m",
            "--width",
            "8",
            "--height",
            "8",
            "--no-progress",
            "--out",
            str(tmp_path / "x.png"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: cannot talk to http://127.0.0.1:9") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_classify_of_a_missing_file_names_it(server, tmp_path, capsys):
    code, _ = cli(server, "classify", "--model", "digits", str(tmp_path / "nope.png"))
    assert code == 2 and "nope.png" in capsys.readouterr().err


def test_the_client_and_its_cli_never_import_torch():
    script = (
        "import sys, inr_client, inr_client.cli; "
        "sys.exit(1 if any(m == 'torch' or m.startswith('torch.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=60).returncode == 0
