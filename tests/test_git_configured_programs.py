"""`harvest survival` runs no program a repository names: each route a repository has to name one
(its config, an included config file, the attributes in its tree, in .git/info/attributes or in a file
its config names, a partial clone's transport) leaves the numbers as they are without it, and the
program never runs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge_fixtures import ROOT, retarget, tree_fingerprint
from loopmeter.forge import samples
from loopmeter.forge.ingest import ingest_forge
from loopmeter.storage import Warehouse

HOOKS = ("pre-commit", "post-checkout", "post-merge", "pre-auto-gc", "post-rewrite", "reference-transaction",
         "post-index-change", "fsmonitor-watchman", "pre-push", "push-to-checkout")


def harvest_user(warehouse: Path, now: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """`loopmeter harvest survival --dry-run --json` in a fresh process, as a user runs it."""
    command = [sys.executable, "-m", "loopmeter", "harvest", "survival", "--include-temp", "--now", str(now),
               "--dry-run", "--json", "--warehouse", str(warehouse)]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)


def numbers(result: subprocess.CompletedProcess) -> tuple:
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    return document["counts"], [(o["rid"], o["data"]) for o in document["outcomes"]]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("configured")
    built = samples.build_git_sample(root / "repos")
    store = samples.write_sqlite(root / "store" / "dataset.sqlite", built.repos, built.events)
    warehouse = Warehouse(root / "warehouse")
    ingest_forge(warehouse, store)
    program = root / "program.sh"
    marker = root / "ran"
    # writes the marker, then answers as a converter would: its input with every line changed
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\n'
                       'if [ -f "$1" ]; then sed "s/^/converted /" "$1"; else sed "s/^/converted /"; fi\nexit 0\n')
    program.chmod(0o755)
    baseline = numbers(harvest_user(warehouse.root, built.now))
    assert baseline[0]["ok"] == 5 and not marker.exists()
    return dict(root=root, built=built, store=store, warehouse=warehouse.root, program=program, marker=marker,
                baseline=baseline, repos=[Path(path) for _, path in built.repos])


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def configured(sample):
    """Each repository's .git/config, info/attributes and tree as they were, restored after the test."""
    saved = [(repo, (repo / ".git" / "config").read_bytes()) for repo in sample["repos"]]
    yield sample
    for repo, config in saved:
        (repo / ".git" / "config").write_bytes(config)
        for extra in (repo / ".git" / "info" / "attributes", repo / ".gitattributes", repo / ".git" / "more.config"):
            extra.unlink(missing_ok=True)
        subprocess.run(["git", "-C", str(repo), "update-ref", "-d", "refs/notes/textconv/conv"], capture_output=True)
    sample["marker"].unlink(missing_ok=True)


def textconv_in_config(repo: Path, program: Path) -> None:
    git(repo, "config", "diff.conv.textconv", str(program))
    git(repo, "config", "diff.conv.cachetextconv", "true")


def in_tree_attributes(repo: Path, line: str) -> None:
    (repo / ".gitattributes").write_text(line + "\n")


def info_attributes(repo: Path, line: str) -> None:
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text(line + "\n")


def textconv_config_and_tree(repo, program):
    textconv_in_config(repo, program)
    in_tree_attributes(repo, "* diff=conv")


def textconv_config_and_info(repo, program):
    textconv_in_config(repo, program)
    info_attributes(repo, "* diff=conv")


def textconv_attributes_file(repo, program):
    textconv_in_config(repo, program)
    attributes = repo / ".git" / "more.config"  # any file: the config names it
    attributes.write_text("* diff=conv\n")
    git(repo, "config", "core.attributesFile", str(attributes))


def textconv_included(repo, program):
    included = repo / ".git" / "more.config"
    included.write_text(f"[diff \"conv\"]\n\ttextconv = {program}\n")
    git(repo, "config", "include.path", str(included))
    info_attributes(repo, "* diff=conv")


def textconv_included_if(repo, program):
    included = repo / ".git" / "more.config"
    included.write_text(f"[diff \"conv\"]\n\ttextconv = {program}\n")
    git(repo, "config", f"includeIf.gitdir:{repo}/.git.path", str(included))
    in_tree_attributes(repo, "* diff=conv")


def filters(repo, program):
    for key in ("smudge", "clean", "process"):
        git(repo, "config", f"filter.f.{key}", str(program))
    git(repo, "config", "filter.f.required", "true")
    in_tree_attributes(repo, "* filter=f")
    info_attributes(repo, "* filter=f")


def external_diff(repo, program):
    git(repo, "config", "diff.external", str(program))
    git(repo, "config", "diff.conv.command", str(program))
    in_tree_attributes(repo, "* diff=conv")


def fsmonitor(repo, program):
    git(repo, "config", "core.fsmonitor", str(program))
    git(repo, "config", "core.fsmonitorHookVersion", "2")


def pager(repo, program):
    git(repo, "config", "core.pager", str(program))
    for name in ("blame", "log", "diff-tree", "ls-tree", "cat-file", "rev-list", "rev-parse"):
        git(repo, "config", f"pager.{name}", str(program))


def hooks(repo, program):
    folder = repo / ".git" / "hooks"
    for name in HOOKS:
        shutil.copy(program, folder / name)
    git(repo, "config", "core.hooksPath", str(folder))


def aliases_and_helpers(repo, program):
    for name in ("blame", "log", "diff-tree", "ls-tree", "cat-file", "rev-list", "rev-parse", "harvest"):
        git(repo, "config", f"alias.{name}", f"!{program}")
    git(repo, "config", "credential.helper", f"!{program}")
    git(repo, "config", "core.sshCommand", str(program))
    git(repo, "config", "core.askPass", str(program))
    git(repo, "config", "gpg.program", str(program))
    git(repo, "config", "log.showSignature", "true")
    git(repo, "config", "blame.ignoreRevsFile", str(repo / ".git" / "more.config"))
    (repo / ".git" / "more.config").write_text("")


ROUTES = {
    "textconv in the repository's config, attributes in its tree": textconv_config_and_tree,
    "textconv in the repository's config, attributes in .git/info/attributes": textconv_config_and_info,
    "textconv, attributes in the file core.attributesFile names": textconv_attributes_file,
    "textconv in a config file include.path pulls in": textconv_included,
    "textconv in a config file includeIf pulls in": textconv_included_if,
    "clean, smudge and process filters": filters,
    "an external diff and a diff driver's command": external_diff,
    "an fsmonitor": fsmonitor,
    "a pager for every command": pager,
    "hooks": hooks,
    "aliases, credential helper, ssh command, askpass, a signature program": aliases_and_helpers,
}


@pytest.mark.slow
@pytest.mark.parametrize("route", list(ROUTES))
def test_no_program_the_repository_names_runs(configured, route):
    for repo in configured["repos"]:
        ROUTES[route](repo, configured["program"])
    before = [tree_fingerprint(repo) for repo in configured["repos"]]
    result = harvest_user(configured["warehouse"], configured["built"].now)
    assert not configured["marker"].exists(), configured["marker"].read_text()
    assert numbers(result) == configured["baseline"]
    assert [tree_fingerprint(repo) for repo in configured["repos"]] == before  # no textconv cache written either


@pytest.mark.slow
def test_the_environment_names_no_program_either(configured):
    program = str(configured["program"])
    env = dict(os.environ, GIT_EXTERNAL_DIFF=program, GIT_PAGER=program, GIT_SSH_COMMAND=program, GIT_ASKPASS=program,
               GIT_CONFIG_COUNT="2", GIT_CONFIG_KEY_0="diff.conv.textconv", GIT_CONFIG_VALUE_0=program,
               GIT_CONFIG_KEY_1="core.fsmonitor", GIT_CONFIG_VALUE_1=program)
    for repo in configured["repos"]:
        in_tree_attributes(repo, "* diff=conv")
    result = harvest_user(configured["warehouse"], configured["built"].now, env=env)
    assert not configured["marker"].exists(), configured["marker"].read_text()
    assert numbers(result) == configured["baseline"]


@pytest.mark.slow
def test_a_partial_clone_fetches_nothing_through_the_transport_it_names(sample, tmp_path):
    """A clone without its blobs: blame would fetch each from the remote through the upload-pack program
    the clone's config names. No fetch happens: the tasks that need a missing blob are git errors."""
    api = sample["repos"][0]
    git(api, "config", "uploadpack.allowFilter", "true")
    try:
        partial = tmp_path / "partial"
        subprocess.run(["git", "clone", "-q", "--bare", "--filter=blob:none", f"file://{api}", str(partial)],
                       check=True, capture_output=True)
    finally:
        git(api, "config", "--unset", "uploadpack.allowFilter")
    git(partial, "config", "remote.origin.uploadpack", str(sample["program"]))
    store = tmp_path / "dataset.sqlite"
    shutil.copy(sample["store"], store)
    warehouse = Warehouse(tmp_path / "warehouse")
    retarget(warehouse, store, "api", partial)
    result = harvest_user(warehouse.root, sample["built"].now)
    assert not sample["marker"].exists(), sample["marker"].read_text()
    assert result.returncode == 3, result.stderr
    counts = json.loads(result.stdout)["counts"]
    assert counts["git_error"] >= 1 and counts.get("ok", 0) < sample["baseline"][0]["ok"]
