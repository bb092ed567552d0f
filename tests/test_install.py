"""loopmeter installed as people install tools, then run from a directory of the user's own: a wheel
built from a clean copy of the source (through its sdist, as `python -m build` does) installed into a
fresh virtual environment, and `pipx install` of the source tree. Nothing is built in the working tree."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT
from loopmeter.operations.everything import SAMPLE_PLANS

pytestmark = pytest.mark.slow  # installs, real clients, browsers: the whole suite runs them, `-m "not slow"` does not

MODES = 3  # direct, forgeloopBalanced, forgeloopAdaptive: runs of each per scenario


def clean_copy(destination: Path) -> Path:
    """The source as a clone would hold it: the files git tracks or would track (ignored ones, such as
    .venv/, build/, *.egg-info and data/warehouse/, left out), copied from the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout
    for name in filter(None, listed.split(b"\0")):
        source = ROOT / os.fsdecode(name)
        if not source.is_file():  # tracked but deleted in the working tree
            continue
        target = destination / os.fsdecode(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    return destination


def user_environment(**extra: str) -> dict[str, str]:
    """A user's shell: none of this test run's warehouse, module path or virtual environment."""
    hidden = {"LOOPMETER_WAREHOUSE", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_USER"}
    environment = {name: value for name, value in os.environ.items() if name not in hidden}
    environment.update(extra)
    return environment


def run(command: list, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], cwd=cwd, env=env or user_environment(),
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (f"{' '.join(map(str, command))} exited {result.returncode}\n"
                                    f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}")
    return result


def source_names(source: Path) -> tuple[set[str], set[str]]:
    """The package's modules (paths under pipeline/) and the named queries' file names, in the source."""
    modules = {str(path.relative_to(source)) for path in (source / "pipeline").rglob("*.py")}
    queries = {path.name for path in (source / "queries").glob("*.sql")}
    return modules, queries


def check_installed_loopmeter(loopmeter: Path, python: Path, prefix: Path, work: Path, source: Path) -> None:
    """`loopmeter demo`, a report, the named queries and one of them run from `work`, by the
    loopmeter installed under `prefix`: the package and its queries come from there, the data
    lands in `work/data/`."""
    work.mkdir()
    where = run([python, "-c", "import loopmeter, loopmeter.config as c; print(loopmeter.__file__); print(c.queries_dir())"],
                cwd=work).stdout.splitlines()
    package, queries = (Path(line).resolve() for line in where)
    assert package.is_relative_to(prefix.resolve()) and queries.is_relative_to(prefix.resolve()), where
    assert queries.is_dir() and queries == package.parent / "queries"
    # the distribution installs one top-level package, `loopmeter`: no `pipeline` beside it
    assert run([python, "-c", "import importlib.util as u; print(u.find_spec('pipeline'))"], cwd=work).stdout.strip() == "None"

    demo = run([loopmeter, "demo"], cwd=work)
    assert f"warehouse:    {work.resolve() / 'data' / 'warehouse'}" in demo.stdout
    assert f"HTML report:  {work.resolve() / 'data' / 'warehouse' / 'report.html'}" in demo.stdout
    assert SAMPLE_PLANS[0][0] in demo.stdout  # the demo shows its tail-tier run set
    warehouse = work / "data" / "warehouse"
    assert (warehouse / "loopmeter.duckdb").is_file() and "<svg" in (warehouse / "report.html").read_text()
    scenarios = sorted(path.stem for path in (work / "data" / "sample" / "forgeloop" / "scenarios").glob("*.json"))
    assert len(scenarios) == 6
    assert len(list((work / "data" / "sample" / "forgeloop" / "raw").rglob("*.json"))) == sum(
        runs for _, runs, _ in SAMPLE_PLANS) * len(scenarios) * MODES

    tail = json.loads(run([loopmeter, "report", "tail", "--json"], cwd=work).stdout)
    assert {run_set["runSetId"]: run_set["runCount"] for run_set in tail["runSets"]} == {
        run_set: runs * len(scenarios) * MODES for run_set, runs, _ in SAMPLE_PLANS}

    listed = json.loads(run([loopmeter, "queries", "--json"], cwd=work).stdout)
    assert {query["name"] for query in listed} == {name.removesuffix(".sql") for name in source_names(source)[1]}
    assert all(query["summary"] for query in listed)

    run_set = SAMPLE_PLANS[0][0]
    pairs = json.loads(run([loopmeter, "sql", "--query", "forgeloop_pairs", "--param", f"run_set={run_set}",
                            "--format", "json"], cwd=work).stdout)
    assert pairs and {row["run_set_id"] for row in pairs} == {run_set}
    assert sorted({row["scenario_id"] for row in pairs}) == scenarios
    assert {row["mode"] for row in pairs} == {"forgeloopBalanced", "forgeloopAdaptive"}
    assert all(row["direct_tokens"] > 0 for row in pairs if row["token_pair"])


@pytest.fixture
def place(tmp_path) -> Iterator[Path]:
    """tmp_path; what a test installed (hundreds of MB an environment) is removed after it."""
    yield tmp_path
    for name in ("source", "dist", "venv", "pipx"):
        shutil.rmtree(tmp_path / name, ignore_errors=True)


def check_built(source: Path, sdist: Path, wheel: Path) -> None:
    """The sdist holds what the wheel is built from, and the wheel every module and named query
    (a subpackage or a query left out of either would be missing from an installed loopmeter)."""
    modules, queries = source_names(source)
    assert {"pipeline/commands/__init__.py", "pipeline/forge/__init__.py", "pipeline/forgeloop/__init__.py"} <= modules
    assert "forgeloop_pairs.sql" in queries
    with tarfile.open(sdist) as archive:
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        in_sdist = {name.removeprefix(top) for name in archive.getnames()}
    assert modules | {f"queries/{name}" for name in queries} | {"pyproject.toml", "README.md"} <= in_sdist
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    # the source folder pipeline/ is the package loopmeter/ in the wheel
    installed = {"loopmeter/" + module.removeprefix("pipeline/") for module in modules}
    assert installed | {f"loopmeter/queries/{name}" for name in queries} <= in_wheel
    assert not {name for name in in_wheel if name.startswith("pipeline/")}
    assert not {name for name in in_wheel if name.startswith(("tests/", "bench/", "queries/", "data/"))}


def test_the_wheel_built_from_a_clean_copy_works_in_a_fresh_environment_from_any_directory(place):
    # `python -m build` makes the sdist, then the wheel from the sdist (in a folder of its own)
    source = clean_copy(place / "source")
    run([sys.executable, "-m", "build", "--outdir", place / "dist", source], cwd=place)
    (sdist,), (wheel,) = list((place / "dist").glob("*.tar.gz")), list((place / "dist").glob("*.whl"))
    check_built(source, sdist, wheel)

    environment = place / "venv"
    run([sys.executable, "-m", "venv", environment], cwd=place)
    python = environment / "bin" / "python"
    # a fresh environment: not the test run's, and without its site-packages
    assert run([python, "-c", "import sys; print(sys.prefix != sys.base_prefix)"], cwd=place).stdout.strip() == "True"
    assert run([python, "-c", "import importlib.util as u; print(u.find_spec('pipeline'), u.find_spec('pytest'))"],
               cwd=place).stdout.strip() == "None None"
    run([python, "-m", "pip", "install", "--quiet", wheel], cwd=place)
    check_installed_loopmeter(environment / "bin" / "loopmeter", python, environment, place / "work", source)


def test_pipx_install_of_the_source_tree_works_from_any_directory(place):
    # pip builds a source tree in place (build/, *.egg-info): pipx gets a clean copy, not the working tree
    source = clean_copy(place / "source")
    home, bin_dir = place / "pipx", place / "bin"
    environment = user_environment(PIPX_HOME=str(home), PIPX_BIN_DIR=str(bin_dir), PIPX_MAN_DIR=str(place / "man"))
    run([sys.executable, "-m", "pipx", "install", source], cwd=place, env=environment)
    loopmeter = bin_dir / "loopmeter"
    assert loopmeter.is_symlink() and loopmeter.resolve().is_relative_to(home.resolve())
    check_installed_loopmeter(loopmeter, home / "venvs" / "loopmeter" / "bin" / "python", home, place / "work", source)
