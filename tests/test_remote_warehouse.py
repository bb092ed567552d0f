"""A warehouse on object storage (`--warehouse s3://bucket/prefix`), served by moto's S3 server on
127.0.0.1: ingest, aggregate, reports and `sql` give what they give on a local warehouse, a read
publishes nothing, and a publish killed at any point leaves the state before it whole."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3_server():
    """moto's server on a free loopback port, its address once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # waits for the server to answer, polling (bounded generously)
        try:
            urllib.request.urlopen(address, timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail("moto's S3 server did not start")
            time.sleep(0.1)
    yield address
    server.kill()
    server.wait()


@pytest.fixture
def bucket(s3_server, monkeypatch, request):
    import boto3

    for name, value in {"AWS_ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    name = f"lm-{request.node.name[:20].lower().replace('_', '-')}-{os.getpid()}"
    client = boto3.client("s3")
    client.create_bucket(Bucket=name)
    return client, name


def head(client, bucket: str) -> str:
    return json.loads(client.get_object(Bucket=bucket, Key="team/HEAD.json")["Body"].read())["manifest"]


def test_a_warehouse_on_object_storage_answers_as_a_local_one(bucket, corpus, tmp_path):
    client, name = bucket
    url = f"s3://{name}/team"
    local = tmp_path / "local"
    for warehouse in (["--warehouse", url], ["--warehouse", str(local)]):
        run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet", *warehouse)
        run_cli("aggregate", "--quiet", *warehouse)
    for command in (["report", "summary", "--json"], ["report", "tail", "--json"], ["report", "confidence", "--json"],
                    ["sql", "select run_set_id, count(*) as runs from runs group by 1 order by 1", "--format", "json"],
                    ["sql", "select file, document from forgeloop_documents order by run_set_id, file", "--format", "json"]):
        remote = run_cli(*command, "--warehouse", url)
        assert remote.stdout == run_cli(*command, "--warehouse", str(local)).stdout, command
    assert json.loads(run_cli("sql", "select count(*) as n from runs", "--format", "json", "--warehouse", url).stdout) == [
        {"n": 525}]
    # what it said names the warehouse by its URL, not the scratch mirror
    again = run_cli("aggregate", "--warehouse", url)
    assert f"unchanged since the last aggregate -> {url}/aggregate" in again.stdout
    shown = json.dumps(json.loads(run_cli("aggregate", "--full", "--json", "--warehouse", url).stdout))
    assert f'"{url}/aggregate/' in shown and "loopmeter-mirror-" not in shown
    # whole: its tables, files and publish (no catalog is kept on object storage, none is missing)
    assert run_cli("check", "--json", "--warehouse", url).returncode == 0
    checked = run_cli("check", "--warehouse", url).stderr
    assert checked.startswith(f"{url}: ") and "journal: all whole" in checked, checked
    refused = run_cli("catalog", "--warehouse", url, check=1).stderr
    assert f"{url}: a warehouse on object storage keeps no loopmeter.duckdb" in refused
    # nothing of the local machine's catalog, and the objects are named by their digests
    manifest = json.loads(client.get_object(Bucket=name, Key=f"team/{head(client, name)}")["Body"].read())
    assert "loopmeter.duckdb" not in manifest["files"] and ".state/catalog.json" not in manifest["files"]
    assert set(manifest["tables"]) >= {"runs", "forgeloop_comparisons", "forgeloop_documents"}
    digest, size = manifest["files"][".loopmeter"]
    body = client.get_object(Bucket=name, Key=f"team/objects/{digest}")["Body"].read()
    assert len(body) == size and body.startswith(b'{"loopmeter": "warehouse"')


def test_a_read_publishes_nothing_and_a_killed_publish_leaves_the_state_before_it(bucket, corpus, tmp_path):
    client, name = bucket
    url = f"s3://{name}/team"
    results = corpus / "results"
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url)
    before = head(client, name)
    run_cli("report", "summary", "--warehouse", url, check=None)
    run_cli("sql", "select 1", "--warehouse", url)
    assert head(client, name) == before
    for point in ("remote:objects-put", "remote:manifest-written"):
        killed = run_cli("aggregate", "--warehouse", url, env={"LOOPMETER_CRASH_AT": point, "TMPDIR": str(tmp_path)},
                         check=None)  # the killed command's scratch mirror is left in tmp_path
        assert killed.returncode == -9, killed.stderr
        assert head(client, name) == before
        # the old state reads whole: runs, and no aggregate yet
        assert run_cli("sql", "select count(*) as n from runs", "--format", "json", "--warehouse", url).stdout.strip() == (
            '[{"n":525}]')
        missing = run_cli("report", "summary", "--warehouse", url, check=None)
        assert missing.returncode != 0 and "aggregate" in missing.stderr
    run_cli("aggregate", "--quiet", "--warehouse", url)
    assert head(client, name) != before


def test_a_damaged_object_or_manifest_is_refused_in_one_line(bucket, corpus):
    client, name = bucket
    url = f"s3://{name}/team"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet",
            "--warehouse", url)
    manifest_key = f"team/{head(client, name)}"
    manifest = json.loads(client.get_object(Bucket=name, Key=manifest_key)["Body"].read())
    digest, _ = manifest["files"][".loopmeter"]
    client.put_object(Bucket=name, Key=f"team/objects/{digest}", Body=b'{"loopmeter": "warehouse", "format": 9}')
    damaged = run_cli("sql", "select 1", "--warehouse", url, check=1)
    assert f"{url}/objects/{digest}: its bytes are not those the manifest names" in damaged.stderr
    assert len(damaged.stderr.strip().splitlines()) == 1
    manifest["files"]["../../outside.txt"] = [digest, 3]
    client.put_object(Bucket=name, Key=manifest_key, Body=json.dumps(manifest).encode())
    hostile = run_cli("sql", "select 1", "--warehouse", url, check=1)
    assert "file '../../outside.txt': not a plain relative path" in hostile.stderr
    deep = b"[" * 200_000 + b"]" * 200_000  # beyond Python's JSON parser (a RecursionError, not a ValueError)
    client.put_object(Bucket=name, Key=manifest_key, Body=deep)
    nested = run_cli("sql", "select 1", "--warehouse", url, check=1)
    (line,) = nested.stderr.splitlines()
    assert line.startswith(f"loopmeter: error: {url}/{manifest_key.split('/', 1)[1]}: ") and "Recursion" not in line
    client.put_object(Bucket=name, Key="team/HEAD.json", Body=b"[" * 2000 + b"]" * 2000)
    nested = run_cli("sql", "select 1", "--warehouse", url, check=1)
    assert nested.stderr == f"loopmeter: error: {url}/HEAD.json: not a loopmeter warehouse's pointer\n"
    refused = run_cli("sql", "select 1", "--warehouse", f"gs://{name}/team", check=2)  # a wrong command line
    assert "only s3:// is supported" in refused.stderr


def test_a_bucket_that_does_not_exist_is_told_before_any_work(bucket, corpus, tmp_path):
    """A writer is told before it reads its input, a reader instead of "not a loopmeter warehouse";
    nothing is made anywhere."""
    _, name = bucket
    url = f"s3://{name}-absent/team"
    told = (f"loopmeter: error: {url}: the bucket {name}-absent does not exist (or these credentials cannot see it); "
            "loopmeter makes no bucket: create it, or name another\n")
    for command in (["ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet"],
                    ["sql", "select 1"], ["report", "tail"]):
        result = run_cli(*command, "--warehouse", url, check=1, cwd=tmp_path)
        assert result.stderr == told, command
        assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_a_prefix_holding_others_objects_is_no_warehouse_and_is_left_as_it_was(bucket, corpus, tmp_path):
    """As a local folder holding files: a prefix with objects and no HEAD.json is refused, by a writer
    before it reads its input; nothing is put there. A prefix holding only a cut-short first publish
    (objects, no HEAD) is a warehouse's."""
    client, name = bucket
    client.put_object(Bucket=name, Key="team/data/file1.csv", Body=b"a,b\n")
    url = f"s3://{name}/team"
    told = (f"loopmeter: error: {url} holds objects and is not a loopmeter warehouse (no HEAD.json: data); give "
            "--warehouse a new or empty prefix\n")
    for command in (["ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet"],
                    ["sql", "select 1"]):
        assert run_cli(*command, "--warehouse", url, check=1, cwd=tmp_path).stderr == told, command
    assert [entry["Key"] for entry in client.list_objects_v2(Bucket=name)["Contents"]] == ["team/data/file1.csv"]
    client.put_object(Bucket=name, Key="other/objects/" + "0" * 64, Body=b"unused")
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet",
            "--warehouse", f"s3://{name}/other")


@pytest.mark.parametrize("given, told", [
    ("s3://{b}/../{b}-other/pwn", "part `..`"), ("s3://{b}/x/../y", "part `..`"), ("s3://{b}/%2e%2e/esc", "part `..`"),
    ("s3://{b}/a%2Fb", "encoded `/` (%2F)"), ("s3://{b}/w#frag", "a `#` would end"),
    ("s3://", "s3://bucket/prefix"), ("S3:/", "s3://bucket/prefix"), ("s3:{b}/w", "s3://bucket/prefix"),
    ("s3://user:secret@{b}/w", "not a bucket's name"), ("s3://{b}:9000/w", "not a bucket's name"),
    ("s3://{b}/./w", "part `.`"), ("s3://{b}//w", "empty part (//)"),
])
@pytest.mark.parametrize("where", ["--warehouse", "$LOOPMETER_WAREHOUSE"])
def test_a_url_that_would_name_another_place_is_refused_before_any_work(bucket, corpus, tmp_path, given, told, where):
    """A server takes `a/../b` for `b` (in this bucket or another) and a `#` ends the path: such a prefix, or
    an `s3:` that is no URL, is refused in one line naming where it came from, as a wrong command line
    (exit 2), from the option as typed or the variable alike; nothing is written in any bucket or folder."""
    client, name = bucket
    client.create_bucket(Bucket=f"{name}-other")
    url = given.format(b=name)
    option, env = (["--warehouse", url], None) if where == "--warehouse" else ([], {"LOOPMETER_WAREHOUSE": url})
    result = run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"),
                     "--quiet", *option, env=env, check=2, cwd=tmp_path)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"loopmeter: error: {where} ") and told in line and "secret" not in line, result.stderr
    for bucket_name in (name, f"{name}-other"):
        assert client.list_objects_v2(Bucket=bucket_name).get("KeyCount", 0) == 0
    assert list(tmp_path.iterdir()) == []


def test_a_prefix_with_a_space_or_any_letter_is_that_prefix(bucket, corpus):
    client, name = bucket
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet",
            "--warehouse", f"s3://{name}/a team/über")
    keys = [item["Key"] for item in client.list_objects_v2(Bucket=name)["Contents"]]
    assert "a team/über/HEAD.json" in keys, keys[:5]
    again = run_cli("sql", "select count(*) AS n from runs", "--format", "csv", "--warehouse", f"s3://{name}/a%20team/%C3%BCber")
    assert again.stdout == "n\n525\n"


def test_an_object_cache_spares_the_fetches_of_the_objects_it_holds_whole_and_only_those(
        bucket, corpus, tmp_path, monkeypatch):
    """With LOOPMETER_OBJECT_CACHE, a command fetches only what the cache does not hold exactly (a
    copy changed, or replaced by a link to the very bytes elsewhere, is fetched again), answers as
    without it, and leaves the cache holding the objects of the state it ends with."""
    from loopmeter.storage import remote as remote_module

    client, name = bucket
    url = f"s3://{name}/team"
    fetched: list[str] = []
    fetch = remote_module.Remote.fetch
    monkeypatch.setattr(remote_module.Remote, "fetch",
                        lambda self, digest, size, target: fetched.append(digest) or fetch(self, digest, size, target))
    cache = tmp_path / "cache"
    summary = ("report", "summary", "--json", "--warehouse", url)
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet",
            "--warehouse", url, env={"LOOPMETER_OBJECT_CACHE": str(cache)})
    assert fetched == []  # an empty warehouse: nothing to fetch; what was put is kept
    run_cli("aggregate", "--quiet", "--warehouse", url, env={"LOOPMETER_OBJECT_CACHE": str(cache)})
    assert fetched == []

    def objects() -> dict[str, int]:
        manifest = json.loads(client.get_object(Bucket=name, Key=f"team/{head(client, name)}")["Body"].read())
        return {digest: size for digest, size in manifest["files"].values()}

    (folder,) = cache.iterdir()
    assert {path.name for path in folder.iterdir()} == set(objects())  # the superseded state's objects removed
    uncached = run_cli(*summary).stdout
    assert len(fetched) == len(objects())
    fetched.clear()
    assert run_cli(*summary, env={"LOOPMETER_OBJECT_CACHE": str(cache)}).stdout == uncached
    assert fetched == []

    changed, linked = sorted(objects(), key=lambda digest: -objects()[digest])[:2]
    data = bytearray((folder / changed).read_bytes())
    data[len(data) // 2] ^= 1
    (folder / changed).write_bytes(data)
    elsewhere = tmp_path / "elsewhere"
    os.replace(folder / linked, elsewhere)
    (folder / linked).symlink_to(elsewhere)  # the very bytes, but through a link: not taken
    assert run_cli(*summary, env={"LOOPMETER_OBJECT_CACHE": str(cache)}).stdout == uncached
    assert sorted(fetched) == sorted([changed, linked])
    assert not (folder / linked).is_symlink() and (folder / changed).read_bytes() != bytes(data)
    fetched.clear()
    assert run_cli(*summary, env={"LOOPMETER_OBJECT_CACHE": str(cache)}).stdout == uncached
    assert fetched == []


def test_an_object_cache_folder_that_is_a_link_or_open_to_others_is_not_used(bucket, corpus, tmp_path):
    """The folder of a warehouse in a shared cache could be put there by someone else: a link to a
    folder of theirs choosing, or a folder they may write. Neither is written to or emptied; the
    command warns in one line, fetches without the cache and answers as without it."""
    client, name = bucket
    url = f"s3://{name}/team"
    cache = tmp_path / "cache"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet",
            "--warehouse", url, env={"LOOPMETER_OBJECT_CACHE": str(cache)})
    (folder,) = cache.iterdir()
    assert folder.stat().st_mode & 0o777 == 0o700
    uncached = run_cli("sql", "select count(*) as n from runs", "--format", "json", "--warehouse", url).stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ("a" * 64)).write_text("theirs")
    (elsewhere / ".notes.tmp").write_text("theirs")
    os.rename(folder, tmp_path / "kept")
    folder.symlink_to(elsewhere)
    linked = run_cli("sql", "select count(*) as n from runs", "--format", "json", "--warehouse", url,
                     env={"LOOPMETER_OBJECT_CACHE": str(cache)})
    assert linked.stdout == uncached and "is not a folder; the objects are fetched without the cache" in linked.stderr
    assert sorted(path.name for path in elsewhere.iterdir()) == [".notes.tmp", "a" * 64]
    folder.unlink()
    os.mkfifo(folder)  # nor a FIFO (never opened for reading: nothing hangs)
    fifo = run_cli("sql", "select count(*) as n from runs", "--format", "json", "--warehouse", url,
                   env={"LOOPMETER_OBJECT_CACHE": str(cache)})
    assert fifo.stdout == uncached and "is not a folder; the objects are fetched without the cache" in fifo.stderr
    folder.unlink()
    os.rename(tmp_path / "kept", folder)
    folder.chmod(0o777)
    opened = run_cli("sql", "select count(*) as n from runs", "--format", "json", "--warehouse", url,
                     env={"LOOPMETER_OBJECT_CACHE": str(cache)})
    assert opened.stdout == uncached and "is not this user's alone" in opened.stderr


def test_run_all_and_report_html_name_no_file_the_mirror_held(bucket, corpus, tmp_path):
    """What is published to object storage is tables, documents and state: `run-all` there writes no page
    and says so, names the warehouse and documents by their URL (never the scratch mirror it ran on), and
    `report html` there asks for a local --out."""
    _, name = bucket
    url = f"s3://{name}/team"
    done = run_cli("run-all", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--json", "--quiet",
                   "--warehouse", url, cwd=tmp_path)
    outcome = json.loads(done.stdout)
    assert outcome["report"] is None and outcome["warehouse"] == url and outcome["aggregate"] == f"{url}/aggregate"
    assert any(step.startswith("report html: not written") for step in outcome["steps"])
    assert "loopmeter-mirror" not in done.stdout + done.stderr
    people = run_cli("run-all", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--warehouse", url,
                     cwd=tmp_path)
    assert f"warehouse:    {url}  (Parquet tables)\n" in people.stdout  # no loopmeter.duckdb is kept there
    asked = run_cli("report", "html", "--warehouse", url, check=2, cwd=tmp_path)
    assert asked.stderr == (f"loopmeter: error: {url} is on object storage, which keeps no page: give --out FILE (a local "
                            "file) for the report\n")
    written = run_cli("report", "html", "--out", str(tmp_path / "page.html"), "--json", "--warehouse", url)
    assert json.loads(written.stdout)["written"] == str(tmp_path / "page.html") and (tmp_path / "page.html").stat().st_size


def test_a_head_write_whose_answer_is_lost_is_told_as_unknown(bucket, corpus, monkeypatch):
    """The store took HEAD and the answer was lost on the way back (the connection dropped): the command
    cannot know which state is there, and says so instead of "as it was"."""
    from loopmeter.storage import remote as remote_module

    _, name = bucket
    url = f"s3://{name}/team"
    write = remote_module.Remote._write

    def answer_lost(self, key, data):
        write(self, key, data)
        if key == remote_module.HEAD:
            raise OSError("When completing multiple part upload: AWS Error NETWORK_CONNECTION: Empty reply from server")

    monkeypatch.setattr(remote_module.Remote, "_write", answer_lost)
    result = run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"),
                     "--quiet", "--warehouse", url, check=1)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"loopmeter: error: {url}: publishing to it: writing HEAD.json failed (") and \
        "whether this command's state was published is not known" in line and "as it was" not in line
    monkeypatch.setattr(remote_module.Remote, "_write", write)
    counted = run_cli("sql", "select count(*) AS n from runs", "--format", "csv", "--warehouse", url)
    assert counted.stdout == "n\n525\n"  # this time it had landed


def test_sigterm_on_object_storage_removes_the_mirror_and_publishes_nothing(bucket, corpus, tmp_path):
    """Stopped by SIGTERM (as a service manager or `kill` stops it) after its objects are put: exit 143,
    HEAD as it was, and the scratch mirror removed from the temporary folder rather than left there."""
    client, name = bucket
    url = f"s3://{name}/team"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
            "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url)
    before = head(client, name)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    environment = {name: value for name, value in os.environ.items()} | {
        "TMPDIR": str(scratch), "LOOPMETER_CRASH_AT": "remote:objects-put", "LOOPMETER_CRASH_SIGNAL": "TERM"}
    stopped = subprocess.run([sys.executable, "-m", "loopmeter", "ingest", "forgeloop", str(corpus / "results"),
                              "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url],
                             capture_output=True, text=True, env=environment, timeout=300)
    assert stopped.returncode == 143, stopped.stderr
    assert head(client, name) == before
    assert list(scratch.iterdir()) == []


def test_an_upload_cut_short_or_an_object_of_another_size_is_never_taken_for_the_file(bucket, corpus, tmp_path):
    """An upload stopped before its bytes are sent is kept apart from `objects/`, and an object planted
    under a file's digest with other bytes (another size) is written over: the next commands read
    the warehouse whole."""
    import hashlib

    client, name = bucket
    url = f"s3://{name}/team"
    local = tmp_path / "local"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
            "--scenarios", str(corpus / "scenarios"), "--quiet", warehouse=local)
    marker = hashlib.sha256((local / ".loopmeter").read_bytes()).hexdigest()
    client.put_object(Bucket=name, Key=f"team/objects/{marker}", Body=b"junk")
    stopped = run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
                      "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url, check=143,
                      env={"LOOPMETER_CRASH_AT": "remote:uploading", "LOOPMETER_CRASH_SIGNAL": "TERM"})
    assert stopped.stderr.startswith("loopmeter: terminated (SIGTERM)")
    objects = client.list_objects_v2(Bucket=name, Prefix="team/objects/").get("Contents", [])
    assert [(item["Key"], item["Size"]) for item in objects] == [(f"team/objects/{marker}", 4)]
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
            "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url)
    counted = "SELECT count(*) AS runs, sum(total_tokens) AS tokens FROM runs"
    assert run_cli("sql", counted, "--warehouse", url).stdout == run_cli("sql", counted, warehouse=local).stdout
    assert run_cli("check", "--warehouse", url).returncode == 0


def test_ctrl_c_as_the_mirror_is_removed_after_a_publish_removes_it_whole_and_ends_as_done(bucket, corpus, tmp_path):
    """A Ctrl-C that comes once the command's state is published, as its scratch mirror is removed: the
    mirror is removed whole (not left in the temporary folder) and the command ends as done, exit 0."""
    client, name = bucket
    url = f"s3://{name}/team"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
                   "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url,
                   env={"TMPDIR": str(scratch), "LOOPMETER_CRASH_AT": "remote:removing-mirror",
                        "LOOPMETER_CRASH_SIGNAL": "INT"})
    assert done.stderr == "" and done.stdout.startswith("105 run files: 105 accepted")
    assert head(client, name).startswith("manifests/")
    assert list(scratch.iterdir()) == []


def a_state_naming_a_journal(client, name: str, url: str, corpus) -> None:
    """A warehouse at `url` whose current manifest names a publishing journal (loopmeter never publishes one)."""
    import hashlib

    run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
            "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url)
    manifest_key = f"team/{head(client, name)}"
    manifest = json.loads(client.get_object(Bucket=name, Key=manifest_key)["Body"].read())
    journal = b'{"tables": {}, "folders": []}'
    digest = hashlib.sha256(journal).hexdigest()
    client.put_object(Bucket=name, Key=f"team/objects/{digest}", Body=journal)
    manifest["files"][".state/publishing.json"] = [digest, len(journal)]
    client.put_object(Bucket=name, Key=manifest_key, Body=json.dumps(manifest).encode())


def test_a_reader_finishing_a_journal_a_forged_state_names_publishes_nothing(bucket, corpus):
    """A reader finishes the journal in its mirror, as on a local warehouse, and publishes nothing (a read
    never writes the bucket); the next writer's state holds no journal."""
    client, name = bucket
    url = f"s3://{name}/team"
    a_state_naming_a_journal(client, name, url, corpus)
    keys = sorted(item["Key"] for item in client.list_objects_v2(Bucket=name, Prefix="team/")["Contents"])
    run_cli("sql", "select count(*) from runs", "--warehouse", url)
    run_cli("report", "tail", "--warehouse", url, check=None)
    assert sorted(item["Key"] for item in client.list_objects_v2(Bucket=name, Prefix="team/")["Contents"]) == keys
    run_cli("aggregate", "--quiet", "--warehouse", url)
    published = json.loads(client.get_object(Bucket=name, Key=f"team/{head(client, name)}")["Body"].read())
    assert published["files"] and ".state/publishing.json" not in published["files"]


def test_a_repair_on_object_storage_names_no_catalog(bucket, corpus):
    """`check --repair` there rebuilds what it can and says nothing of a loopmeter.duckdb, which object
    storage does not keep."""
    client, name = bucket
    url = f"s3://{name}/team"
    a_state_naming_a_journal(client, name, url, corpus)
    repaired = json.loads(run_cli("check", "--repair", "--json", "--warehouse", url).stdout)
    assert repaired["ok"] and repaired["repaired"] and not any("catalog" in line for line in repaired["repaired"]), repaired
    published = json.loads(client.get_object(Bucket=name, Key=f"team/{head(client, name)}")["Body"].read())
    assert ".state/publishing.json" not in published["files"]


def test_an_object_of_the_file_s_size_with_other_bytes_is_written_over(bucket, corpus, tmp_path):
    import hashlib

    client, name = bucket
    url = f"s3://{name}/team"
    local = tmp_path / "local"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
            "--scenarios", str(corpus / "scenarios"), "--quiet", warehouse=local)
    marker = (local / ".loopmeter").read_bytes()
    client.put_object(Bucket=name, Key=f"team/objects/{hashlib.sha256(marker).hexdigest()}", Body=b"Z" * len(marker))
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
            "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url)
    assert run_cli("check", "--warehouse", url).returncode == 0


def test_a_mirror_under_a_temporary_folder_reached_through_a_link_publishes(bucket, corpus, tmp_path):
    """$TMPDIR through a symbolic link (as on macOS): the warehouse's root, resolved as it is opened, is
    the mirror's; the command publishes and names the URL, never the scratch folder."""
    client, name = bucket
    url = f"s3://{name}/team"
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    done = run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
                   "--scenarios", str(corpus / "scenarios"), "--warehouse", url, env={"TMPDIR": str(tmp_path / "linked")},
                   process=True)
    assert done.stdout.rstrip().endswith(f"-> {url}") and "loopmeter-mirror" not in done.stdout + done.stderr
    assert head(client, name).startswith("manifests/")
    assert list((tmp_path / "real").iterdir()) == []


def test_ctrl_c_once_head_is_written_says_the_state_was_published(bucket, corpus):
    client, name = bucket
    url = f"s3://{name}/team"
    stopped = run_cli("ingest", "forgeloop", str(corpus / "results"), "--run-set", "codex-quality-repeat5-20260831",
                      "--scenarios", str(corpus / "scenarios"), "--quiet", "--warehouse", url, check=130,
                      env={"LOOPMETER_CRASH_AT": "remote:head-written", "LOOPMETER_CRASH_SIGNAL": "INT"})
    assert stopped.stderr.splitlines()[-1] == (f"loopmeter: interrupted once its new state was published: {url} holds "
                                               "this command's tables")
    assert head(client, name).startswith("manifests/")
