"""``norga list``: what the registries hold (methods, gates, benchmarks, backbone presets, statistics kinds)."""
from __future__ import annotations

import re
from typing import List


def registry_lines() -> List[str]:
    """What ``norga list`` prints: registered gates, methods, benchmarks, presets, statistics kinds."""
    import dataclasses

    from ..data import BENCHMARKS
    from ..methods import METHOD_CONFIGS
    from ..methods.hideprompt_config import StatsConfig
    from ..gates.modules import GATES
    from ..models.backbone import BACKBONE_PRESETS

    def options(cls) -> str:
        parts = []
        for f in dataclasses.fields(cls):
            choices = f.metadata.get("choices")
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            parts.append(f"{f.name} ({' | '.join(map(str, choices))}; default {default})" if choices
                         else f"{f.name} (default {default})")
        return ", ".join(parts) or "no options"

    kinds = next(f for f in dataclasses.fields(StatsConfig) if f.name == "kind").metadata["choices"]
    lines = ["methods (method.name):"]
    lines += [f"  {name}: {first_sentence(cls.__doc__ or '')}" for name, cls in sorted(METHOD_CONFIGS.items())]
    lines.append("gates (method.gate: {name: ..., options}), for prefix methods:")
    lines += [f"  {name}: {options(cls.Options)}" for name, cls in sorted(GATES.items())]
    lines.append(f"benchmarks (data.name): {', '.join(sorted(BENCHMARKS))}")
    lines.append("backbone presets (model.preset):")
    lines += [f"  {name}: {p.model_name}" for name, p in sorted(BACKBONE_PRESETS.items())]
    lines.append(f"statistics kinds of hideprompt (method.stats.kind): {', '.join(kinds)}")
    return lines


def first_sentence(doc: str) -> str:
    """The whole first sentence of a docstring (its first paragraph up to a full stop), on one line."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split()).replace("``", "")
    found = re.match(r"(.+?[.!?])(?=\s+[A-Z]|$)", paragraph)
    return found.group(1) if found else paragraph
