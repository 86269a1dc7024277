"""`locos-bench explain` end to end on the planted model: the command writes the page and
prints its JSON, in process (`load_model` replaced by the built model). The library-level
checks and the command's refusals are in tests/unit/test_explain.py."""

from __future__ import annotations

import json

from locos_bench import cli, models
from locos_bench.explain.page import page_data
from tests.unit.test_explain import PROMPT, SINK, WINDOW, cli_model, model  # noqa: F401 (fixtures)


def test_an_eager_model_gets_a_note_not_full_attention(monkeypatch, capsys, tmp_path):
    """The streaming mask exists only on the lean attention path: an eager model's page says
    so (the rest of the explanation stands), and the command line prints the note."""
    eager = models.load_model("planted", attention="eager")
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: eager)
    out = tmp_path / "eager.html"
    code = cli.main(["explain", "--model", "planted", "--task", "planted-kv", "--output", str(out), "--top", "2",
                     "--max-new-tokens", "1", "--json"])
    captured = capsys.readouterr()
    s = json.loads(captured.out)["sufficiency"]
    assert code == 0 and page_data(out.read_text())["sufficiency"] == s
    assert set(s) == {"heads", "sink", "window", "unavailable"}
    assert s["unavailable"].startswith("streaming heads need the lean SDPA attention; layer 0 runs eager")
    assert "note: no sufficiency on this page: streaming heads need the lean SDPA attention" in captured.err


def test_cli_streaming_and_steering_flags(cli_model, capsys, tmp_path):
    out = tmp_path / "s.html"
    code = cli.main(["explain", "--model", "planted", "--task", "planted-kv", "--output", str(out), "--json",
                     "--top", "2", "--kv-sink", str(SINK), "--kv-window", str(WINDOW), "--steer-alpha", "2"])
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert code == 0 and data["metric"] == "exact_match"  # planted-kv's headline metric
    top = data["top"][0]
    assert f"(top head L{top[0]}H{top[1]};" in captured.err  # heads print as everywhere else (#36, point 8)
    s = data["sufficiency"]
    assert (s["sink"], s["window"]) == (SINK, WINDOW) and s["top"]["correct"] and not s["floor"]["correct"]
    assert data["steering"]["alpha"] == 2.0


def test_cli_no_sufficiency_leaves_the_entry_out(cli_model, capsys, tmp_path):
    out = tmp_path / "n.html"
    code = cli.main(["explain", "--model", "planted", "--task", "planted-kv", "--output", str(out), "--json",
                     "--top", "2", "--no-sufficiency"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["sufficiency"] is None and page_data(out.read_text())["sufficiency"] is None
    assert data["greedy"] and data["top"]  # the rest of the page stands


def test_cli_task_index_writes_the_page_and_json(cli_model, capsys, tmp_path):
    out = tmp_path / "sub" / "explain.html"
    code = cli.main(["explain", "--model", "planted", "--task", "planted-kv", "--index", "0",
                     "--output", str(out), "--json", "--top", "2"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and page_data(out.read_text()) == printed
    assert printed["task"] == "planted-kv" and len(printed["top"]) == 2


def test_cli_prompt_mode(cli_model, capsys, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(PROMPT)
    out = tmp_path / "p.html"
    code = cli.main(["explain", "--model", "planted", "--prompt", f"@{prompt}", "--answer", "v5",
                     "--needle", "k3 v5", "--distractor", "k7 v2", "--question", "? k3",
                     "--output", str(out), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and out.exists()
    tokens = data["tokens"]
    assert "".join(tokens[s] for s in data["needle"]).strip() == "k3 v5"
    assert "".join(tokens[s] for s in data["distractors"]).strip() == "k7 v2"
    assert data["greedy"].split()[0] == "v5"
