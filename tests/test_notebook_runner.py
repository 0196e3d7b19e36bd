"""The papermill runner: parameters from params/*.yaml, misspelt ones fail, outputs
stripped; -p overrides; where a run writes (the committed profiles publish, anything
else goes to build/explore); the findings checker."""
from __future__ import annotations

import json
import re

import nbformat
import pytest
import yaml

from scalable_softmax import paths
from scalable_softmax.repro.fagan.reporting import Findings, finding
from scalable_softmax.repro.machinery import runner as notebooks

FULL = "full:\n  epochs: 50\n  seed: 0\n"


def _write_notebook(folder, name):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import math"),
        nbformat.v4.new_code_cell("epochs = 50\nseed = 0\noutput_root = ''",
                                  metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("result = epochs * 2"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, folder / f"{name}.ipynb")


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    monkeypatch.setattr(paths, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(paths, "PARAMS", tmp_path / "params")
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    _write_notebook(tmp_path / "notebooks", "99-demo")
    return tmp_path


def test_prepare_injects_the_profile_parameters(project):
    (project / "params" / "99-demo.yaml").write_text(FULL + "smoke:\n  epochs: 2\n")
    out = notebooks.prepare("99-demo", "smoke")
    nb = json.loads(out.read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "epochs = 2" in "".join(injected[0]["source"])
    assert not list(out.parent.glob(".*tmp*")), "temporary file left behind"


def test_misspelt_parameter_fails(project):
    (project / "params" / "99-demo.yaml").write_text(FULL + "smoke:\n  epoch: 2\n")
    with pytest.raises(notebooks.NotebookParameterError, match=r"\['epoch'\]"):
        notebooks.prepare("99-demo", "smoke")


def test_unknown_profile_and_missing_notebook_are_errors(project):
    (project / "params" / "99-demo.yaml").write_text("quick:\n  epochs: 2\n")
    with pytest.raises(ValueError, match="unknown section"):
        notebooks.load_params("99-demo", "smoke")
    with pytest.raises(FileNotFoundError, match="99-demo"):
        notebooks.notebook_path("98-missing")


def test_source_notebooks_are_committed_without_outputs():
    for path in sorted(paths.NOTEBOOKS.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs"), f"{path.name} has outputs: strip them"
                assert cell.get("execution_count") is None, f"{path.name} has execution counts"


def test_every_notebook_has_a_parameters_cell_and_settings():
    for path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")):
        nb = json.loads(path.read_text())
        tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: exactly one cell must be tagged 'parameters'"
        assert (paths.PARAMS / f"{path.stem}.yaml").exists(), f"params/{path.stem}.yaml missing"
        notebooks.check_params(path.stem, notebooks.load_params(path.stem, "smoke"))


def test_provenance_lists_durations_and_notebook_02_time_breakdown(project):
    executed = project / "build" / "executed" / "full"
    executed.mkdir(parents=True)
    (executed / "durations.yaml").write_text("02-dataset-run: 812.5\n06-paper-tables: 306.0\n")
    out = project / "tables" / "PROVENANCE.md"
    out.parent.mkdir()
    notebooks.write_provenance("full", out=out)
    text = out.read_text()
    assert "| 02-dataset-run | 812.5 |" in text and "| total | 1118.5 |" in text
    assert "time goes" not in text            # no breakdown written yet
    (out.parent / "02-dataset-run-time.md").write_text(
        "# title\n\npreamble\n\n| method | training |\n|---|---|\n| U-max | 1.5 |\n")
    notebooks.write_provenance("full", out=out)
    text = out.read_text()
    assert "Where notebook 02's time goes" in text and "| U-max | 1.5 |" in text
    assert "# title" not in text
    (executed / "durations.yaml").write_text("02-dataset-run: 812.5\n12-peers: 100.0\n")
    text = notebooks.write_provenance("full", out=out).read_text()
    assert "| total | 912.5 |" in text and "without 12-peers) | 812.5 |" in text
    assert "the extensions (`make reproduce-extra`) | 100.0 |" in text


def test_provenance_extensions_are_the_makefiles():
    makefile = (paths.ROOT / "Makefile").read_text()
    names = next(line for line in makefile.splitlines() if line.startswith("EXTRA_NAMES"))
    assert set(names.split(":=")[1].split()) == set(notebooks.EXTENSIONS)


def test_every_full_profile_is_the_notebooks_parameters_cell():
    """params/NAME.yaml's full profile lists every parameter with the notebook's default
    (so an edited and saved notebook is recognised as exploring, not as the full run)."""
    for path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")):
        notebooks.check_full_profile(path.stem)
        assert notebooks.profile_of(path.stem, notebooks.declared_parameters(path.stem)) \
            == "full", path.stem
        smoke = notebooks.effective_params(path.stem, "smoke")
        assert notebooks.profile_of(path.stem, smoke) == "smoke", path.stem
        if "runner.profile_outputs(" in path.read_text():
            assert "output_root" not in notebooks.load_params(path.stem, "smoke"), \
                f"{path.stem}: the smoke profile's outputs go to build/smoke by themselves"
        else:       # a notebook that chooses its folders itself must send smoke runs away
            assert notebooks.load_params(path.stem, "smoke").get("output_root"), path.stem


def test_full_profile_must_match_the_notebook(project):
    (project / "params" / "99-demo.yaml").write_text("full:\n  epochs: 40\n")
    with pytest.raises(notebooks.NotebookParameterError,
                       match=r"missing: \['seed'\].*epochs: params file 40, notebook 50"):
        notebooks.check_full_profile("99-demo")
    with pytest.raises(notebooks.NotebookParameterError, match="every parameter"):
        notebooks.prepare("99-demo", "full")


@pytest.mark.parametrize("text, value", [
    ("3", 3), ("1e-3", 0.001), ("-2.5E+2", -250.0), ("[bibtex, mnist]", ["bibtex", "mnist"]),
    ("{bibtex: 15}", {"bibtex": 15}), ("null", None), ("true", True), ("paper", "paper"),
    ("[1e-3, 10]", [0.001, 10])])
def test_override_values_are_read_as_yaml(text, value):
    got = notebooks.parse_value(text)
    assert got == value and type(got) is type(value)


def test_overrides_are_checked_against_the_parameters_cell(project, capsys):
    (project / "params" / "99-demo.yaml").write_text(FULL + "smoke:\n  epochs: 2\n")
    with pytest.raises(notebooks.NotebookParameterError, match=r"-p epoch: .*\['epoch'\]"):
        notebooks.effective_params("99-demo", "full", {"epoch": 3})
    with pytest.raises(notebooks.NotebookParameterError, match="-p epochs 'many'.*number"):
        notebooks.effective_params("99-demo", "full", {"epochs": "many"})
    # full, then the profile, then the overrides
    assert notebooks.effective_params("99-demo", "smoke", {"seed": 4}) == \
        {"epochs": 2, "seed": 4}
    # the command line: a clear error, exit status 2, the parameter named
    assert notebooks.main(["check", "99-demo", "-p", "epoch", "3"]) == 2
    assert "'epoch'" in capsys.readouterr().err
    _write_notebook(project / "notebooks", "98-other")
    assert notebooks.main(["run", "99-demo", "98-other", "-p", "epochs", "3"]) == 2  # one
    assert "one notebook" in capsys.readouterr().err
    assert notebooks.main(["check", "99-demo", "-p", "epochs", "3"]) == 0


def test_a_list_parameter_needs_a_yaml_list(project):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("datasets = ['a', 'b']\nrate = 'paper'",
                                          metadata={"tags": ["parameters"]})]
    nbformat.write(nb, project / "notebooks" / "98-list.ipynb")
    with pytest.raises(notebooks.NotebookParameterError, match=r"YAML list, e\.g\. -p datasets "
                                                               r"'\[c\]'"):
        notebooks.effective_params("98-list", "full", {"datasets": "c"})
    # a string default may take a number (e.g. notebook 07's learning_rate = "paper")
    (project / "params" / "98-list.yaml").write_text("full:\n  datasets: [a, b]\n  rate: paper\n")
    assert notebooks.effective_params("98-list", "full", {"rate": 0.1})["rate"] == 0.1


def test_where_a_run_writes(project):
    (project / "params" / "99-demo.yaml").write_text(FULL + "smoke:\n  epochs: 2\n")
    full = {"epochs": 50, "seed": 0, "output_root": ""}
    smoke = {"epochs": 2, "seed": 0, "output_root": ""}
    mine = {"epochs": 50, "seed": 7, "output_root": ""}
    assert notebooks.profile_of("99-demo", full) == "full"
    assert notebooks.profile_of("99-demo", {**full, "epochs": 50.0}) == "full"   # 50 == 50.0
    assert notebooks.profile_of("99-demo", smoke) == "smoke"
    assert notebooks.profile_of("99-demo", mine) is None
    # the full profile writes the record only in the publish step (make reproduce)
    assert notebooks.output_root_for("99-demo", full) == \
        project / "build" / "explore" / "99-demo" / "full"
    assert notebooks.output_root_for("99-demo", full, publish=True) == project
    assert notebooks.output_root_for("99-demo", smoke) == project / "build" / "smoke"
    explore = notebooks.output_root_for("99-demo", mine)
    assert explore.parent == project / "build" / "explore" / "99-demo"
    assert re.fullmatch(r"[0-9a-f]{12}", explore.name)
    # the same parameters, the same folder; other values, another one
    assert notebooks.output_root_for("99-demo", dict(mine)) == explore
    assert notebooks.output_root_for("99-demo", {**mine, "seed": 8}) != explore
    # an explicit output_root is honoured, but only the publish step writes the record
    assert notebooks.output_root_for("99-demo", {**mine, "output_root": "build/mine"}) == \
        (project / "build" / "mine").resolve()
    with pytest.raises(notebooks.NotebookParameterError, match="only make reproduce"):
        notebooks.output_root_for("99-demo", {**mine, "output_root": "."})
    with pytest.raises(notebooks.NotebookParameterError, match="only make reproduce"):
        notebooks.output_root_for("99-demo", {**full, "output_root": "."})
    with pytest.raises(notebooks.NotebookParameterError, match="inside the repository"):
        notebooks.output_root_for("99-demo", {**mine, "output_root": "/tmp/elsewhere"})
    # the executed copy of an exploring run sits beside its outputs, never in build/executed
    assert notebooks.executed_path("99-demo", "full", {"seed": 7}) == explore / "99-demo.ipynb"
    assert notebooks.executed_path("99-demo", "smoke") == \
        project / "build" / "executed" / "smoke" / "99-demo.ipynb"
    assert notebooks.executed_path("99-demo", "full") == \
        project / "build" / "explore" / "99-demo" / "full" / "99-demo.ipynb"
    assert notebooks.executed_path("99-demo", "full", publish=True) == \
        project / "build" / "executed" / "full" / "99-demo.ipynb"


def test_profile_outputs_inside_a_notebook(project, capsys, monkeypatch):
    (project / "params" / "99-demo.yaml").write_text(FULL + "smoke:\n  epochs: 2\n")
    # Run All in JupyterLab of the full profile: under build/explore, never tables/
    out = notebooks.profile_outputs("99-demo", {"epochs": 50, "seed": 0, "output_root": ""})
    assert out.profile == "full"
    assert out.tables == project / "build" / "explore" / "99-demo" / "full" / "tables"
    said = capsys.readouterr().out
    assert out.figures.is_dir() and "profile: full" in said and "only make reproduce" in said
    assert len(said.strip().splitlines()) == 1 and not (project / "tables").exists()
    # the publish step (the runner's --publish sets the variable and a stage)
    monkeypatch.setenv(notebooks.PUBLISH_ENV, "1")
    monkeypatch.setenv("SOFTMAX_STAGE_DIR", str(project / "build" / "tmp" / "x"))
    out = notebooks.profile_outputs("99-demo", {"epochs": 50, "seed": 0, "output_root": ""})
    assert out.tables == project / "tables" and "publishing" in capsys.readouterr().out
    monkeypatch.delenv(notebooks.PUBLISH_ENV)
    monkeypatch.delenv("SOFTMAX_STAGE_DIR")
    out = notebooks.profile_outputs("99-demo", {"epochs": 2, "seed": 5, "output_root": ""})
    assert out.exploring and out.root.parent == project / "build" / "explore" / "99-demo"
    assert out.tables.is_dir() and out.figures.is_dir()
    said = capsys.readouterr().out
    assert "seed = 5 (committed: 0)" in said and "not touched" in said   # nearest: smoke
    assert "epochs" not in said.split("\n")[0]
    record = yaml.safe_load((out.root / "params.yaml").read_text())
    assert record["nearest_profile"] == "smoke" and record["parameters"]["seed"] == 5
    assert record["differs"] == {"seed": {"value": 5, "committed": 0}}
    assert out.input_root == project / "build" / "smoke"
    with pytest.raises(FileNotFoundError, match=r"notebook 03-x.*--profile smoke"):
        out.input("tables/03-x.csv", "03-x", make_smoke=False)
    # a missing smoke-profile input is made by running its producer's smoke profile
    calls = []
    monkeypatch.setattr(notebooks, "_run_producer",
                        lambda name, profile: calls.append((name, profile)))
    with pytest.raises(FileNotFoundError):
        out.input("tables/03-x.csv", "03-x")
    assert calls == [("03-x", "smoke")]
    (project / "build" / "smoke" / "tables").mkdir(parents=True)
    (project / "build" / "smoke" / "tables" / "03-x.csv").write_text("a\n")
    assert out.input("tables/03-x.csv", "03-x").read_text() == "a\n"
    with pytest.raises(notebooks.NotebookParameterError, match="seed"):
        notebooks.profile_outputs("99-demo", {"epochs": 3})


def test_findings_are_asserted_only_under_a_committed_profile(capsys):
    for profile in ("full", "smoke"):
        f = Findings(profile)
        assert f(True, "holds")
        with pytest.raises(AssertionError, match=f"committed {profile} profile: it fails"):
            f(False, "it fails")
    f = Findings(None)                                # exploring: reported, not asserted
    assert f(True, "holds") and not f([1, 0], "not all hold")
    assert "finding does not hold under these parameters: not all hold" in capsys.readouterr().out
    assert "1 hold; not holding here: not all hold" in f.summary()
    f = Findings("smoke")                              # a finding only the full run reaches
    assert not f(False, "needs the full data", under="full")
    with pytest.raises(AssertionError):
        Findings("full")(False, "needs the full data", under="full")
    assert finding(True, "x") and not finding(False, "y", strict=False)
    with pytest.raises(AssertionError):
        finding(False, "z")


def test_run_with_an_override_never_publishes(project):
    (project / "params" / "99-demo.yaml").write_text(FULL + "smoke:\n  epochs: 2\n")
    out = notebooks.run("99-demo", "full", overrides={"epochs": 3}, timeout=120)
    assert out.parent.parent == project / "build" / "explore" / "99-demo"
    nb = json.loads(out.read_text())
    injected = "".join(next(c for c in nb["cells"] if "injected-parameters"
                            in c["metadata"].get("tags", []))["source"])
    assert "epochs = 3" in injected and "seed = 0" in injected
    assert not (project / "build" / "executed" / "full" / "durations.yaml").exists()
    assert not (project / "tables").exists() and not (project / "figures").exists()


def _setup_and_report(threads):
    import numba

    from scalable_softmax.repro.machinery import runs as experiments

    experiments.worker_setup(threads)

    return numba.get_num_threads(), experiments._WATCHDOG["started"]


def test_worker_setup_in_a_loky_worker():
    """Notebook 10's data sets run in loky workers: each gets the asked numba threads
    and the watchdog that ends it with the notebook's kernel."""
    from joblib import Parallel, delayed

    out = Parallel(n_jobs=2, backend="loky")(delayed(_setup_and_report)(1) for _ in range(2))
    assert out == [(1, True), (1, True)]


def test_full_run_without_publish_leaves_the_record_alone(project):
    (project / "params" / "99-demo.yaml").write_text(FULL + "smoke:\n  epochs: 2\n")
    out = notebooks.run("99-demo", "full", timeout=120)
    assert out == project / "build" / "explore" / "99-demo" / "full" / "99-demo.ipynb"
    assert not (project / "tables").exists() and not (project / "figures").exists()
    assert not (project / "notebooks" / "executed").exists()
    assert not (project / "build" / "executed" / "full" / "durations.yaml").exists()


def test_publish_writes_a_stable_executed_copy(project):
    (project / "params" / "99-demo.yaml").write_text(FULL + "smoke:\n  epochs: 2\n")
    with pytest.raises(notebooks.NotebookParameterError, match="--publish"):
        notebooks.run("99-demo", "smoke", publish=True)
    log = notebooks.run("99-demo", "full", timeout=120, publish=True)
    assert log == project / "build" / "executed" / "full" / "99-demo.ipynb"
    record = project / "notebooks" / "executed" / "99-demo.ipynb"
    first = record.read_text()
    nb = json.loads(first)
    assert nb["metadata"]["papermill"]["output_path"] == "notebooks/executed/99-demo.ipynb"
    assert "start_time" not in nb["metadata"]["papermill"] and "widgets" not in nb["metadata"]
    counts = [c["execution_count"] for c in nb["cells"] if c["cell_type"] == "code"]
    assert counts == list(range(1, len(counts) + 1))
    assert all("execution" not in c["metadata"] and "papermill" not in c["metadata"]
               for c in nb["cells"])
    assert "durations.yaml" in {p.name for p in log.parent.iterdir()}
    # the same result, the same file
    notebooks.run("99-demo", "full", timeout=120, publish=True)
    assert record.read_text() == first
    # the Makefile's sources are notebooks/NN-*.ipynb only: executed copies are not sources
    assert notebooks.known_notebooks() == ["99-demo"]


def test_the_runner_needs_a_known_name(project, capsys):
    (project / "params" / "99-demo.yaml").write_text(FULL)
    assert notebooks.main(["run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "name a notebook or 'all'" in err and "99-demo" in err
    assert notebooks.main(["run", "98-nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: no notebook '98-nope'; the notebooks are: 99-demo (or all)"
    assert notebooks.main(["run", "99-demo", "--publish", "--profile", "smoke"]) == 2
    assert notebooks.main(["run", "99-demo", "--publish", "-p", "seed", "1"]) == 2


ALLOWED = """allowed:
  epochs: {type: int, min: 1}
  seed: {type: int, min: 0}
  datasets: {type: list, min_length: 1, each: {one_of: [bibtex, mnist]}}
"""


@pytest.mark.parametrize("override, said", [
    ({"epochs": -1}, "parameter epochs = -1: 99-demo allows an integer >= 1"),
    ({"epochs": 2.5}, "parameter epochs = 2.5: 99-demo allows an integer >= 1"),
    ({"datasets": ["bibtx"]}, "parameter datasets = ['bibtx'] ('bibtx' is not allowed): "
                              "99-demo allows a list with at least 1 item(s) each item "
                              "one of bibtex, mnist"),
    ({"datasets": []}, "parameter datasets = []"),
])
def test_values_are_checked_before_any_work(project, capsys, override, said):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("epochs = 50\nseed = 0\ndatasets = ['bibtex']",
                                          metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("raise RuntimeError('must not run')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, project / "notebooks" / "99-demo.ipynb")
    (project / "params" / "99-demo.yaml").write_text(
        FULL + "  datasets: [bibtex]\nsmoke:\n  epochs: 2\n" + ALLOWED)
    notebooks.check_full_profile("99-demo")
    with pytest.raises(notebooks.NotebookParameterError) as err:
        notebooks.run("99-demo", "smoke", overrides=override)
    assert str(err.value).startswith(said) and "\n" not in str(err.value)
    args = [a for k, v in override.items() for a in ("-p", k, json.dumps(v))]
    assert notebooks.main(["run", "99-demo", "--profile", "smoke", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err
    assert not list(project.rglob("*.failed.ipynb"))
    assert not (project / "build" / "explore").exists()


def test_a_committed_profile_must_follow_the_allowed_values(project):
    (project / "params" / "99-demo.yaml").write_text(
        FULL + "smoke:\n  epochs: 0\nallowed:\n  epochs: {type: int, min: 1}\n")
    with pytest.raises(notebooks.NotebookParameterError, match="epochs = 0"):
        notebooks.check_full_profile("99-demo")
    (project / "params" / "99-demo.yaml").write_text(
        FULL + "allowed:\n  epochs: {type: integer}\n")
    with pytest.raises(ValueError, match="type 'integer' is not one of"):
        notebooks.load_allowed("99-demo")


def test_every_params_file_says_what_its_values_may_be():
    """Each notebook's params file has an allowed: section; its profiles follow it."""
    for path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")):
        assert notebooks.load_allowed(path.stem), f"params/{path.stem}.yaml: no allowed: section"
        notebooks.check_full_profile(path.stem)


def test_staged_paths_print_as_their_destination(tmp_path, monkeypatch):
    from scalable_softmax.repro.machinery import outputs

    monkeypatch.setenv(outputs.ENV, str(tmp_path / "stage"))
    dest = tmp_path / "repo" / "tables" / "t.csv"
    staged = outputs.staged_path(dest)
    assert str(staged).startswith(str(tmp_path / "stage"))
    assert str(staged.relative_to(tmp_path / "repo")) == "tables/t.csv"


def test_race_cells_may_run_twice_their_training_budget():
    """Notebooks 12 and 14 run their whole race in one cell: its timeout must cover at
    least twice the race's training budget under params/race.yaml (every tuning run to
    ``tune_fraction`` of its cap, every seeded run to its cap), which the runner's
    default of an hour did not for notebook 12."""
    from scalable_softmax.repro.race import methods as race_methods

    race = yaml.safe_load((paths.ROOT / "params" / "race.yaml").read_text())["full"]
    for name, key in (("12-peers", "peers"), ("14-crossover", "crossover")):
        sec = race[key]
        caps = sum(sec["caps"].values()) if isinstance(sec["caps"], dict) else sum(sec["caps"])
        rated = [m for m in sec["methods"] if m in race_methods.RATE_METHODS]
        candidates = sum(len(race["grids"][m]) * len(race["structures"].get(m, [{}]))
                         for m in rated)
        budget = (candidates * race["tune_fraction"] * caps
                  + len(race["seeds"]) * len(sec["methods"]) * caps)
        assert notebooks.cell_timeout(name) >= 2 * budget, (name, budget)
    assert notebooks.cell_timeout("02-dataset-run") == notebooks.DEFAULT_TIMEOUT
