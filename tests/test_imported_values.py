"""Values another file gives the importer: a settings dict, a model moved by a helper, a layer
class moved in place by the importer's __init__, and Python's sum() over tensors of two stages."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mpcheck import cli

CASES = Path(__file__).parent / "fixtures" / "cases"


def lint(capsys: pytest.CaptureFixture[str], *args: str) -> list[tuple[str, int, str]]:
    cli.main(["--jobs", "1", "--output-format", "json", "--no-cache", *args])
    return sorted((Path(d["path"]).name, d["line"], d["code"]) for d in json.loads(capsys.readouterr().out))


def write(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


def copy_case(name: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fixture case's files in `root`, the working directory."""
    write(root, {p.name: p.read_text() for p in (CASES / name).glob("*.py")})
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def settings_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return copy_case("G_settings_dict_of_another_file_pkg_bad", tmp_path, monkeypatch)


def test_a_settings_dict_of_another_file_places_the_model_it_builds(settings_case, capsys):
    assert lint(capsys, ".") == [("train.py", 16, "MP008")]


def test_the_settings_dict_read_directly_names_its_devices(settings_case, capsys):
    # The importer names no device word of its own: the dict's text, spread over lines, is what it borrows.
    (settings_case / "direct.py").write_text(
        "import torch\n\nfrom settings import SETTINGS\n\n"
        'enc = torch.zeros(3).to(SETTINGS["placement"]["encoder"])\n'
        'dec = torch.zeros(3).to(SETTINGS["placement"]["decoder"])\n'
        "both = enc + dec\n"
    )
    assert ("direct.py", 7, "MP001") in lint(capsys, ".")


def test_a_settings_dict_that_names_one_device_gives_no_finding(settings_case, capsys):
    settings = settings_case / "settings.py"
    settings.write_text(settings.read_text().replace('"cuda:1"', '"cuda:0"'))
    assert lint(capsys, ".") == []


def test_an_entry_the_dict_does_not_have_is_not_a_device(settings_case, capsys):
    settings = settings_case / "settings.py"
    settings.write_text(settings.read_text().replace('"decoder": "cuda:1"', '"head": "cuda:1"'))
    assert lint(capsys, ".") == []


def test_a_helper_that_moves_a_split_model_whole_is_run_with_the_importers_model(tmp_path, monkeypatch, capsys):
    """The helper's `net.to("cuda")` collapses the split (MP007, in its file); the importer's call of
    the model with a host batch is not a second finding: the model's forward moves its input itself."""
    copy_case("G_restore_helper_moves_split_pkg_bad", tmp_path, monkeypatch)
    assert lint(capsys, ".") == [("checkpoint.py", 7, "MP007")]


def test_a_helper_that_moves_an_unknown_module_still_places_it(tmp_path, monkeypatch, capsys):
    """The same helper given a module whose forward does not move its input: the host batch is a bug."""
    write(
        tmp_path,
        {
            "checkpoint.py": """\
                def restore(net):
                    return net.to("cuda:1").eval()
                """,
            "infer.py": """\
                import torch
                import torch.nn as nn

                from checkpoint import restore

                model = restore(nn.Linear(4, 2))
                out = model(torch.rand(2, 4))
                """,
        },
    )
    monkeypatch.chdir(tmp_path)
    assert lint(capsys, ".") == [("infer.py", 7, "MP001")]


LAYERS = """\
    import torch
    import torch.nn as nn


    class Scaled(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.table = torch.linspace(0.5, 1.5, dim)  # a plain attribute: .to() leaves it on the CPU

        def forward(self, x):
            return x * self.table.to(x.device)


    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.scale = Scaled(dim)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            return self.proj(self.scale(x))
    """


def test_a_class_of_another_file_moved_in_init_needs_its_input_where_it_went(tmp_path, monkeypatch, capsys):
    """`Block(dim).to(dev)` in the importer's __init__ moves the instance in place: where its forward needs
    its input follows the move (its summary's first stage, read on the CPU table, no longer counts)."""
    write(
        tmp_path,
        {
            "layers.py": LAYERS,
            "model.py": """\
                import torch
                import torch.nn as nn

                from layers import Block


                class Net(nn.Module):
                    def __init__(self, dim=16):
                        super().__init__()
                        self.first = Block(dim).to("cuda:0")
                        self.second = Block(dim).to("cuda:1")

                    def forward(self, x):
                        h = self.first(x.to("cuda:0"))
                        return self.second(h)


                out = Net()(torch.randn(2, 16))
                """,
        },
    )
    monkeypatch.chdir(tmp_path)
    # h on cuda:0 meets the second block, on cuda:1; the blocks' forward, run in layers.py on instances
    # moved so, copies the plain table to the input's GPU on every call (MP011)
    assert lint(capsys, ".") == [("layers.py", 11, "MP011"), ("model.py", 15, "MP001")]
    model = tmp_path / "model.py"
    model.write_text(model.read_text().replace("self.second(h)", 'self.second(h.to("cuda:1"))'))
    assert lint(capsys, ".") == [("layers.py", 11, "MP011")]


def test_python_sum_of_tensors_on_one_device_or_of_numbers_is_clean(tmp_path, monkeypatch, capsys):
    write(
        tmp_path,
        {
            "sums.py": """\
                import torch

                a = torch.ones(2, device="cuda:0")
                b = torch.ones(2, device="cuda:1")
                same = sum([a, a * 2])
                moved = sum(t.to("cuda:0") for t in (a, b))
                counts = sum(t.numel() for t in (a, b))
                started = sum([a, a], torch.zeros(2, device="cuda:0"))
                mixed = sum((a, b))
                """
        },
    )
    monkeypatch.chdir(tmp_path)
    assert lint(capsys, ".") == [("sums.py", 9, "MP001")]


@pytest.fixture
def layer_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return copy_case("A_plain_table_of_a_layer_file_pkg_bad", tmp_path, monkeypatch)


def test_a_layer_moved_whole_by_another_file_runs_its_forward_there(layer_case, capsys):
    """The network file calls `self.lower(x)` on a `Gated(width).to("cuda:0")`: the layer file runs
    Gated.forward on an instance built and moved so, where the plain table stays on the CPU."""
    assert lint(capsys, ".") == [("layers.py", 13, "MP001")]
    assert lint(capsys, "layers.py") == []  # alone, no caller tells where it goes


def test_a_layer_changed_after_it_was_built_is_not_followed(layer_case, capsys):
    """`self.lower.gate = ...` in the network file: the lower layer is no longer as built, and only the
    upper one's call tells the layer file where it runs."""
    net = layer_case / "net.py"
    net.write_text(
        net.read_text().replace(
            '        self.upper = Gated(width).to("cuda:1")\n',
            '        self.upper = Gated(width).to("cuda:1")\n        self.lower.gate = self.lower.gate.to("cuda:0")\n',
        )
    )
    cli.main(["--jobs", "1", "--output-format", "json", "--no-cache", "."])
    found = json.loads(capsys.readouterr().out)
    assert [(Path(d["path"]).name, d["line"], d["code"]) for d in found] == [("layers.py", 13, "MP001")]
    assert "self.upper(" in found[0]["message"] and "cuda:1" in found[0]["message"]


def test_a_layer_moved_with_the_network_that_holds_it(layer_case, capsys):
    """Built unplaced inside the network, then the network moved whole: the layer moved with it."""
    net = layer_case / "net.py"
    text = (
        net.read_text()
        .replace('Gated(width).to("cuda:0")', "Gated(width)")
        .replace('Gated(width).to("cuda:1")', "Gated(width)")
    )
    text = text.replace('x.to("cuda:0")', "x").replace('h.to("cuda:1")', "h")
    text = text.replace("net = TwoGPUNet()", 'net = TwoGPUNet().to("cuda:1")')
    net.write_text(text.replace("torch.randn(4, 64)", 'torch.randn(4, 64, device="cuda:1")'))
    assert lint(capsys, ".") == [("layers.py", 13, "MP001")]
    net.write_text(net.read_text().replace('TwoGPUNet().to("cuda:1")', "TwoGPUNet()"))
    assert lint(capsys, ".") == []  # never placed: where its parts go is not known here


def test_layers_held_in_a_list_and_called_in_a_loop(layer_case, capsys):
    net = layer_case / "net.py"
    text = net.read_text().replace(
        '        self.lower = Gated(width).to("cuda:0")\n        self.upper = Gated(width).to("cuda:1")\n',
        '        self.blocks = nn.ModuleList([Gated(width).to(f"cuda:{i}") for i in range(2)])\n',
    )
    loop = "        h = x\n        for block in self.blocks:\n            h = block(h.to(next(block.parameters()).device))\n        return h\n"
    text = text.replace('        h = self.lower(x.to("cuda:0"))\n        return self.upper(h.to("cuda:1"))\n', loop)
    net.write_text(text)
    assert lint(capsys, ".") == [("layers.py", 13, "MP001")]
    # Iterated with something else (zip): which item is called is not followed, so nothing is said.
    net.write_text(text.replace("for block in self.blocks:", 'for block, _ in zip(self.blocks, "ab"):'))
    assert lint(capsys, ".") == []


def test_devices_imported_by_name_count_for_a_file_another_rule_lets_through(tmp_path, monkeypatch, capsys):
    # model.py names no GPU itself, but `num_gpus` is one of MP015's words: the pre-filter let it through for
    # MP015 alone, and the device constants it imports were not borrowed, so its MP001 was lost.
    write(
        tmp_path,
        {
            "config.py": 'import torch\n\nfirst = torch.device("cuda:0")\nsecond = "cuda:1"\n',
            "model.py": """
            import torch.nn as nn

            from config import first, second

            num_gpus = 2


            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.a = nn.Linear(16, 16).to(first)
                    self.b = nn.Linear(16, 4).to(second)

                def forward(self, x):
                    return self.b(self.a(x))
            """,
        },
    )
    monkeypatch.chdir(tmp_path)
    assert lint(capsys, ".") == [("model.py", 16, "MP001")]
