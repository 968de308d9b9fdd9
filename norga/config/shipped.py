"""The shipped configs: the repository's ``configs/`` folder, installed with norga as package data (``norga/shipped``).

A shipped config is named by its path below that folder without ``.yaml``, folders separated by ``/``: ``smoke``,
``cifar100_norga``, ``smoke/l2p``, ``bench/evidence/l2p``, ``reproduce/paper``. A name may also be written with
``.yaml`` and with the leading ``configs/`` (its path in the repository), so ``configs/smoke.yaml`` names ``smoke``.

Resolution (``--config``, a manifest's ``config:``, ``--manifest``): a path to an existing file is that file;
otherwise the shipped config of that name. A shipped config's ``base:`` is relative to its file, so it resolves
among the shipped configs.

    shipped_root()                        # the folder: norga/shipped (installed) or configs/ (a checkout)
    config_file("smoke")                  # the Path load_config reads
    shipped_names()                       # every name, sorted
    copy_config("smoke/l2p", Path("my"))  # my/l2p.yaml and its base my/smoke.yaml, for editing

The folder is read as a folder of the ``norga`` package (``importlib.resources.files("norga") / "shipped"``),
not imported as a module: ``configs/`` has no ``__init__.py``, so in an editable install ``norga.shipped`` is not
importable and the checkout's ``configs/`` beside the package is the folder. Torch-free; :mod:`.loading` uses it.
"""
from __future__ import annotations

import difflib
import re
from importlib.resources import files
from pathlib import Path, PurePosixPath
from typing import List, Optional, Union

import yaml

from .fields import ConfigError

PACKAGE_FOLDER = "shipped"  # norga/shipped in an installed norga (setup.py maps it onto configs/)
CHECKOUT_FOLDER = "configs"  # beside the norga package in a source checkout
SUFFIX = ".yaml"
_BASE_LINE = re.compile(r"^base:[ \t]*(?P<value>[^#\n]*?)[ \t]*(?P<comment>#.*)?$", re.M)


def shipped_root() -> Path:
    """The folder of the shipped configs: the package data ``norga/shipped`` of an installed norga, else the
    ``configs/`` folder beside the ``norga`` package (a source checkout or an editable install: the norga
    imported decides, so a worktree on PYTHONPATH reads its own configs)."""
    package = files("norga")
    if isinstance(package, Path):
        for root in (package / PACKAGE_FOLDER, package.parent / CHECKOUT_FOLDER):
            if root.is_dir():
                return root.resolve()
    raise ConfigError(f"the shipped configs are missing from this installation of norga ({package}/{PACKAGE_FOLDER} "
                      "is not a folder); reinstall it with pip install --force-reinstall norga")


def shipped_names(root: Optional[Path] = None) -> List[str]:
    """Every shipped config's name, sorted: the top-level configs first, then folder by folder."""
    root = root or shipped_root()
    names = [path.relative_to(root).with_suffix("").as_posix() for path in root.rglob(f"*{SUFFIX}")]
    return sorted(names, key=lambda name: ("/" in name, name))


def name_of(text: str) -> Optional[str]:
    """``text`` as a shipped name (without a leading ``configs/`` and a trailing ``.yaml``), None if it cannot
    be one (absolute, empty, or with ``.``/``..`` parts)."""
    name = text.strip().replace("\\", "/")
    name = name[len(CHECKOUT_FOLDER) + 1:] if name.startswith(CHECKOUT_FOLDER + "/") else name
    name = name[:-len(SUFFIX)] if name.endswith(SUFFIX) else name
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or any(part in (".", "..") for part in parts) or "//" in name:
        return None
    return name


def shipped_path(text: str) -> Optional[Path]:
    """The file of the shipped config named ``text`` (see :func:`name_of`), or None when there is none."""
    name = name_of(str(text))
    if name is None:
        return None
    path = shipped_root() / f"{name}{SUFFIX}"
    return path if path.is_file() else None


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is a file of the shipped configs."""
    return shipped_name(path) is not None


def shipped_name(path: Path) -> Optional[str]:
    """The name of the shipped config whose file is ``path``, None for any other file."""
    try:
        relative = Path(path).resolve().relative_to(shipped_root())
    except ValueError:
        return None
    return relative.with_suffix("").as_posix() if relative.suffix == SUFFIX else None


def close_matches(text: str) -> str:
    """'; close matches: a, b' (shipped names near ``text``), or '' when none is near."""
    names = shipped_names()
    name = name_of(str(text)) or str(text)
    same_leaf = [n for n in names if n.rsplit("/", 1)[-1] == name.rsplit("/", 1)[-1] and n != name]
    near = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
    found = list(dict.fromkeys(near + same_leaf))[:6]
    return f"; close matches: {', '.join(found)}" if found else ""


def unknown_name(text: str, files_too: bool = True) -> ConfigError:
    """The one error for a name that is no shipped config (``files_too``: nor an existing file)."""
    if files_too:
        return ConfigError(f"config file not found: {text} (neither a file nor the name of a shipped config"
                           f"{close_matches(text)}; norga configs lists the shipped configs)")
    return ConfigError(f"no shipped config is named {text}{close_matches(text)} (norga configs lists them)")


def config_file(given: Union[str, Path]) -> Path:
    """The file ``--config GIVEN`` reads: ``given`` if it is an existing file, else the shipped config so named.

    A folder that is no shipped name is returned as is (reading it says it is a folder); anything else raises
    :class:`ConfigError` listing close matches among the shipped names.
    """
    if not str(given).strip():
        raise ConfigError("the config path is empty; give a YAML file or the name of a shipped config (norga configs "
                          "lists them)")
    path = Path(given)
    if path.is_file():
        return path
    shipped = shipped_path(str(given))
    if shipped is not None:
        return shipped
    if path.exists():
        return path
    raise unknown_name(str(given))


def shadow_note(given: Union[str, Path]) -> Optional[str]:
    """A ``note:`` line when ``--config GIVEN`` reads a shipped config while a file ``GIVEN.yaml`` exists here too
    (the user may have meant it: the shipped one is read, as documented, and the note says so); else None."""
    text = str(given)
    if not text.strip() or Path(text).is_file() or text.endswith(SUFFIX):
        return None
    shipped, local = shipped_path(text), Path(text + SUFFIX)
    if shipped is None or not local.is_file() or local.resolve() == shipped.resolve():
        return None
    return (f"note: --config {text} reads the shipped config {shipped}, not the file {local} here; give --config "
            f"{local} to read that one")


def description(path: Path) -> str:
    """One line about a config: its ``description:`` if it has one, else the first sentence of its leading
    comment (at most 110 characters)."""
    text = path.read_text(encoding="utf-8")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        raw = None
    if isinstance(raw, dict) and isinstance(raw.get("description"), str):
        line = " ".join(raw["description"].split())
    else:
        comment = []
        for row in text.splitlines():
            if not row.startswith("#"):
                break
            comment.append(row.lstrip("#").strip())
        joined = " ".join(part for part in comment if part)
        sentence = re.match(r"(.+?[.!?])(?=\s+[A-Z(`\"']|\s*$)", joined)
        line = sentence.group(1) if sentence else joined
    return line if len(line) <= 110 else line[:107].rstrip() + "..."


def base_chain(path: Path) -> List[Path]:
    """``path`` and the files of its ``base:`` chain, the file itself first (each base relative to its file)."""
    chain = [Path(path).resolve()]
    while True:
        raw = yaml.safe_load(chain[-1].read_text(encoding="utf-8"))
        base = raw.get("base") if isinstance(raw, dict) else None
        if not isinstance(base, str):
            return chain
        nxt = (chain[-1].parent / base).resolve()
        if nxt in chain or not nxt.is_file():
            raise ConfigError(f"{chain[-1]}: base {base!r} is {'a loop' if nxt in chain else 'missing'}")
        chain.append(nxt)


def copy_config(text: str, folder: Path, force: bool = False) -> List[Path]:
    """Copy the shipped config named ``text`` and its ``base:`` chain into ``folder`` for editing; the written
    files, the named config first.

    The files land side by side under their own file names; each ``base:`` line is rewritten to the copied
    base's file name (everything else byte for byte), so the copy loads exactly as the shipped config does.
    Every file goes through the write guard (:func:`norga.outputs.write_output`): a file of the user's, or a
    copy edited since, is never replaced; an unchanged earlier copy is replaced only with ``force``. All
    targets are checked before the first is written.
    """
    from ..outputs import write_output

    source = shipped_path(text)
    if source is None:
        raise unknown_name(text, files_too=False)
    chain = base_chain(source)
    targets = [Path(folder) / path.name for path in chain]
    clashes = sorted({t.name for t in targets if sum(u.name == t.name for u in targets) > 1})
    if clashes:
        raise ConfigError(f"{text}: its base chain has two files named {', '.join(clashes)}; copy them by hand "
                          f"from {shipped_root()}")
    texts = [path.read_text(encoding="utf-8") for path in chain]
    texts = [_with_base(t, chain[i + 1].name, chain[i]) if i + 1 < len(chain) else t for i, t in enumerate(texts)]
    _check_copy_targets(targets, force)
    for target, data in zip(targets, texts):
        write_output(target, data.encode("utf-8"), COPY_OPTION)
    return targets


COPY_OPTION = "DIR"  # how norga configs copy names its folder argument in messages


def _check_copy_targets(targets: List[Path], force: bool) -> None:
    """Refuse (one line) a target the guard would not replace, or, without ``force``, an earlier copy."""
    from ..outputs import check_output

    for target in targets:
        check_output(target, COPY_OPTION)  # a user's file or an edited copy: refused, with or without --force
    existing = [str(t) for t in targets if t.exists()]
    if existing and not force:
        verb = "exists" if len(existing) == 1 else "exist"
        raise ConfigError(f"{', '.join(existing)} already {verb} (an earlier norga configs copy, unchanged); add "
                          "--force to replace it, or choose another folder")


def _with_base(text: str, base: str, path: Path) -> str:
    """``text`` with its ``base:`` value replaced by ``base``; checked: only the base changes."""
    new = _BASE_LINE.sub(lambda m: f"base: {base}" + (f"  {m['comment']}" if m["comment"] else ""), text, count=1)
    before, after = yaml.safe_load(text), yaml.safe_load(new)
    if after.pop("base", None) != base or {k: v for k, v in before.items() if k != "base"} != after:
        raise ConfigError(f"{path}: cannot rewrite its base: line for the copy; copy the files by hand")
    return new
