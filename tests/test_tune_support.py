"""What the tests of ``norga tune`` share (no tests here): tiny specs on the smoke config, reading a study back."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import List, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "configs" / "smoke.yaml"
# the smoke config made tiny: SimpleCIL (no training), 12 synthetic classes in 2 tasks, few images
TINY = ["method={name: simplecil}", "data.num_tasks=2", "data.classes_per_task=6", "data.transforms=backbone",
        "data.options={num_classes: 12, train_per_class: 8, test_per_class: 4}"]
NOISE_SPACE = {"method.metric": {"type": "categorical", "choices": ["cosine", "euclidean"]},
               "data.options.noise": {"type": "float", "low": 0.02, "high": 0.2, "log": True}}


def write_spec(folder: Path, name: str = "spec", trials: int = 2, space: Optional[dict] = None,
               protocol=None, extra_set: Optional[List[str]] = None, **more) -> Path:
    """A spec file in ``folder`` tuning the tiny smoke config (first_task protocol unless given)."""
    spec = {"config": str(SMOKE), "set": TINY + list(extra_set or []), "space": space or NOISE_SPACE,
            "protocol": protocol or {"name": "first_task", "fraction": 0.25}, "budget": {"trials": trials},
            "seeds": {"tune": [0], "final": [1, 2]}, "pruner": "none", **more}
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def trial_table(out: Path, name: str = "trials.csv") -> List[dict]:
    with open(Path(out) / name) as f:
        return list(csv.DictReader(f))


def study_trials(out: Path, study: str = "spec"):
    """The trials of the study in ``out/study.db`` (optuna FrozenTrials)."""
    import optuna

    return optuna.load_study(study_name=study, storage=f"sqlite:///{Path(out) / 'study.db'}").get_trials()


def tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}
