"""Reference: every engine flag the appliance writes or reads, made from the flag table (appliance/compat/
engine_flags.py), the one source the plan, validation and the effective-capabilities reader also use."""

from __future__ import annotations

from appliance.compat.engine_flags import FLAGS, EngineFlag, ExtraArgsRule
from appliance.markdown import table

__all__ = ["flags_page"]

_RULES: dict[ExtraArgsRule, str] = {
    "refused": "refused: set the key",
    "unless-planned": "refused where the plan writes it, yours elsewhere",
    "folded": "folded into `tt.*` (must agree with `tt.*`)",
    "yours": "yours",
}


def flags_page() -> str:
    lines = [
        "# Every engine flag",
        "",
        "Generated at build time from the flag table (`appliance/compat/engine_flags.py`): each vLLM flag the "
        "appliance writes or reads back, the config key its value comes from, how the plan writes it, and whether "
        "`engine.extra_args` may carry it. vLLM keeps the last of a repeated flag, so a flag the plan writes is "
        "refused in `engine.extra_args` (`flag-owned-by-config`, in [Every validation code](codes.md)). A flag not "
        "listed is yours to pass there.",
        "",
    ]
    rows = [(_spellings(f), f"`{f.key}`", f.written, _RULES[f.extra_args]) for f in FLAGS]
    return "\n".join([*lines, table(("flag", "from", "written", "in engine.extra_args"), rows)]) + "\n"


def _spellings(flag: EngineFlag) -> str:
    return " / ".join(f"`{name}`" for name in flag.names)
