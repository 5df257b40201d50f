"""The cache of clean results: what it stores, where, and everything that must invalidate it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DEPRECATED, DEPRECATED_FIXED

from mpfix.codemods import all_rules
from mpfix import cache as cache_mod
from mpfix import policy as policies
from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all

CLEAN = "import tensorflow as tf\n\n\ndef double(x):\n    return x * 2\n"


def _job(mode: Mode = Mode.CHECK, **options) -> Job:
    return Job(rule_codes=tuple(r.code for r in all_rules()), options=Options(keras="3", **options), mode=mode)


@pytest.fixture(autouse=True)
def _no_cache_override(monkeypatch):
    monkeypatch.delenv(cache_mod.ENV_CACHE_DIR, raising=False)


def _files(project: Path, contents: dict[str, str]) -> list[Path]:
    paths = []
    for name, text in contents.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return paths


def test_clean_files_and_check_findings_are_served_from_the_cache(project: Path):
    files = _files(project, {"clean.py": CLEAN, "bad.py": DEPRECATED})
    first = process_all(files, _job(), jobs=1)
    assert [r.cached for r in first] == [False, False]
    second = process_all(files, _job(), jobs=1)
    assert [r.cached for r in second] == [True, True]
    assert [(f.code, f.line, f.column, f.message, f.fix_safety, f.filename) for f in second[1].findings] == [
        (f.code, f.line, f.column, f.message, f.fix_safety, f.filename) for f in first[1].findings]
    # Fixing needs the syntax tree: diff and apply never answer a file with findings from the cache.
    (diffed,) = process_all(files[1:], _job(Mode.DIFF), jobs=1)
    assert not diffed.cached and diffed.fixed is not None


def test_cached_findings_keep_their_edits_for_json_output(project: Path):
    files = _files(project, {"bad.py": DEPRECATED})
    job = Job(rule_codes=_job().rule_codes, options=_job().options, mode=Mode.CHECK, want_edits=True)
    (first,) = process_all(files, job, jobs=1)
    (second,) = process_all(files, job, jobs=1)
    assert second.cached and second.original == DEPRECATED
    assert [f.edits for f in second.findings] == [f.edits for f in first.findings] != [[], []]
    # The text format's entry (no edits) is a different one: not served with empty edits to json.
    (plain,) = process_all(files, _job(), jobs=1)
    assert not plain.cached


def test_a_damaged_findings_cache_is_recomputed(project: Path):
    files = _files(project, {"bad.py": DEPRECATED})
    process_all(files, _job(), jobs=1)
    for f in (project / ".mpfix_cache").rglob("*.findings.json"):
        f.write_text("{not json")
    (result,) = process_all(files, _job(), jobs=1)
    assert not result.cached and [f.code for f in result.findings] == ["MP306", "MP307"]


def test_cache_lives_in_the_project_root_with_a_gitignore(project: Path):
    files = _files(project, {"pkg/sub/clean.py": CLEAN})
    process_all(files, _job(), jobs=1)
    folder = project / ".mpfix_cache"
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    entries = [p for p in folder.rglob("*") if p.is_file() and p.name != ".gitignore"]
    assert len(entries) == 1 and entries[0].parent.name == cache_mod.__version__
    assert not list(folder.rglob(".tmp-*"))  # written atomically: no temp file left


def test_cache_folder_is_the_cwd_when_there_is_no_project(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loose = tmp_path / "loose"
    assert not any((p / m).exists() for p in tmp_path.parents for m in ("pyproject.toml", ".git"))
    assert cache_mod.cache_dir_for([loose / "a.py"]) == tmp_path / ".mpfix_cache"
    monkeypatch.setenv(cache_mod.ENV_CACHE_DIR, str(tmp_path / "elsewhere"))
    assert cache_mod.cache_dir_for([loose / "a.py"]) == tmp_path / "elsewhere"


def test_changed_content_is_not_served_from_the_cache(project: Path):
    (path,) = _files(project, {"a.py": CLEAN})
    process_all([path], _job(), jobs=1)
    path.write_text(DEPRECATED)
    (result,) = process_all([path], _job(), jobs=1)
    assert not result.cached and [f.code for f in result.findings] == ["MP306", "MP307"]


@pytest.mark.parametrize("change", ["rules", "options", "ignored", "code"])
def test_settings_are_part_of_the_key(project: Path, monkeypatch, change: str):
    (path,) = _files(project, {"a.py": CLEAN})
    process_all([path], _job(), jobs=1)
    job, ignored = _job(), {}
    if change == "rules":
        job = Job(rule_codes=("MP306",), options=job.options, mode=job.mode)
    elif change == "options":
        job = _job(unsafe_fixes=True)
    elif change == "ignored":
        ignored = {path: ("MP3",)}
    else:  # an edited rule module changes the fingerprint, even at the same version
        real = cache_mod._code_fingerprint
        monkeypatch.setattr(cache_mod, "_code_fingerprint", lambda: [*real(), ("codemods/new_rule.py", 1, 2)])
    (result,) = process_all([path], job, ignored, jobs=1)
    assert not result.cached


def test_the_mode_is_not_part_of_the_key(project: Path):
    # A file with no findings has nothing to fix: check, diff and apply agree on it.
    (path,) = _files(project, {"a.py": CLEAN})
    process_all([path], _job(Mode.CHECK), jobs=1)
    assert process_all([path], _job(Mode.APPLY), jobs=1)[0].cached


def test_what_apply_wrote_is_known_clean(project: Path):
    (path,) = _files(project, {"a.py": DEPRECATED})
    (applied,) = process_all([path], _job(Mode.APPLY), jobs=1)
    assert applied.written and path.read_text() == DEPRECATED_FIXED
    (checked,) = process_all([path], _job(Mode.CHECK), jobs=1)
    assert checked.cached and not checked.findings


def _float16_example() -> tuple[str, str]:
    """A rule's own example that it flags only where float16 is reachable (policy from the project)."""
    for rule in all_rules():
        if not rule.requires_float16:
            continue
        for example in rule.INVALID:
            if example.policy == "mixed_float16" and example.keras in (None, 3) and "mixed_" not in example.code:
                return rule.code, example.code
    raise AssertionError("no float16-only rule has an example that relies on the project's policy")


def test_a_policy_change_elsewhere_in_the_project_invalidates_clean_entries(project: Path):
    code, text = _float16_example()
    (layer,) = _files(project, {"model/layers.py": text})
    policies.policy_in_project.cache_clear()
    (first,) = process_all([layer], _job(), jobs=1)
    assert first.clean  # float16 unreachable: the rule does not run
    assert process_all([layer], _job(), jobs=1)[0].cached
    _files(project, {"train.py": 'import tensorflow as tf\nfrom model import layers\n'
                                 'tf.keras.mixed_precision.set_global_policy("mixed_float16")\n'})
    policies.policy_in_project.cache_clear()  # a new mpfix process
    (second,) = process_all([layer], _job(), jobs=1)
    assert not second.cached and code in [f.code for f in second.findings]


def test_the_stored_key_is_one_a_lookup_tries_and_clean_files_skip_the_triggers(project: Path, monkeypatch):
    import mpfix.codemods.base as codemods_base

    code, layer_text = _float16_example()
    train = 'import tensorflow as tf\nfrom model import layers\ntf.keras.mixed_precision.set_global_policy("mixed_float16")\n'
    files = _files(project, {"clean.py": CLEAN, "model/layers.py": layer_text, "train.py": train})
    policies.policy_in_project.cache_clear()
    keyer = cache_mod._keyer_for(_job())
    for path in files:
        data = path.read_bytes()
        tried = list(keyer.lookup_keys(path, data))
        assert keyer.key(path, data) in tried and len(set(tried)) == len(tried)
    # Without a float16 trigger the key does not depend on the project: the first one tried.
    assert keyer.key(files[0], files[0].read_bytes()) == next(keyer.lookup_keys(files[0], files[0].read_bytes()))
    assert keyer.key(files[1], layer_text.encode()) != next(keyer.lookup_keys(files[1], layer_text.encode()))

    first = process_all(files, _job(), jobs=1)
    assert code in [f.code for f in first[1].findings]
    scanned = []
    real = codemods_base.triggered
    monkeypatch.setattr(codemods_base, "triggered", lambda triggers, data: scanned.append(data) or real(triggers, data))
    second = process_all(files, _job(), jobs=1)
    assert [r.cached for r in second] == [True, True, True]
    assert [f.code for f in second[1].findings] == [f.code for f in first[1].findings]
    assert files[0].read_bytes() not in scanned  # answered by its first key
    assert layer_text.encode() in scanned  # its key holds the project's policy


def test_no_cache_neither_reads_nor_writes(project: Path):
    (path,) = _files(project, {"a.py": CLEAN})
    process_all([path], _job(), jobs=1, cache=False)
    assert not (project / ".mpfix_cache").exists()
    process_all([path], _job(), jobs=1)
    assert not process_all([path], _job(), jobs=1, cache=False)[0].cached


def test_interactive_runs_do_not_use_the_cache(project: Path):
    (path,) = _files(project, {"a.py": CLEAN})
    process_all([path], _job(), jobs=1)
    (result,) = process_all([path], _job(Mode.APPLY), jobs=1, accept=lambda *a: True)
    assert not result.cached


def test_a_damaged_cache_file_is_ignored_and_replaced(project: Path):
    (path,) = _files(project, {"a.py": CLEAN})
    process_all([path], _job(), jobs=1)
    (entry,) = [p for p in (project / ".mpfix_cache").rglob("*") if p.is_file() and p.name != ".gitignore"]
    entry.write_bytes(b"garbage of the wrong length")
    assert not process_all([path], _job(), jobs=1)[0].cached
    assert process_all([path], _job(), jobs=1)[0].cached


def test_an_unwritable_cache_folder_only_costs_time(project: Path):
    (path,) = _files(project, {"a.py": CLEAN})
    (project / ".mpfix_cache").write_text("a file where the folder should be")
    (result,) = process_all([path], _job(), jobs=1)
    assert result.clean and not result.cached
    assert (project / ".mpfix_cache").read_text() == "a file where the folder should be"


def test_cache_size_is_bounded(project: Path, monkeypatch):
    monkeypatch.setattr(cache_mod, "MAX_ENTRIES", 3)
    files = _files(project, {f"m{i}.py": CLEAN + f"x = {i}\n" for i in range(5)})
    process_all(files, _job(), jobs=1)
    (entry,) = [p for p in (project / ".mpfix_cache").rglob("*") if p.is_file() and p.name != ".gitignore"]
    def entries() -> int:
        return (len(entry.read_bytes()) - len(cache_mod._MAGIC)) // 16

    assert entries() == 5  # what one run uses is always kept
    # Over the bound, only the entries this run used are kept, not the union with older ones.
    process_all(files[:2], _job(), jobs=1)
    assert entries() == 2
    (project / "m0.py").write_text(CLEAN + "x = 'edited'\n")
    process_all(files[:1], _job(), jobs=1)
    assert entries() == 3  # within the bound: old entries stay


def test_a_new_tensorflow_pin_invalidates_results_with_the_keras_target_configured(project: Path):
    # keras = 3 is configured, yet the declared TensorFlow still decides MP306 (reduce_retracing is TF 2.9+).
    from mpfix import declared

    relax = "import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n"
    files = _files(project, {"train.py": relax})
    (first,) = process_all(files, _job(), jobs=1)
    assert [f.code for f in first.findings] == ["MP306"]
    (project / "requirements.txt").write_text("tensorflow==2.8.*\n")
    declared.clear()  # a new process
    (second,) = process_all(files, _job(), jobs=1)
    assert not second.cached
    assert [f.code for f in second.findings] == []
