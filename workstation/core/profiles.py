"""Engine tuning profiles as data: a base plus named changes (flags and environment).

A profile's effective arguments are its parent's with its own changes applied: a flag
it names replaces the parent's value for that flag; ``--no-<flag>`` removes ``--<flag>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    parent: str | None = None
    platforms: frozenset[str] = field(default_factory=lambda: frozenset({"cpu", "cuda"}))


def split_flags(args: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """``['--a', '1', '--b']`` → ``{'--a': ['1'], '--b': []}`` (order kept)."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for token in args:
        if token.startswith("-") and not _is_number(token):
            flag, eq, value = token.partition("=")
            current = flag
            out[current] = [value] if eq else []
        elif current is None:
            raise ValueError(f"value {token!r} comes before any flag")
        else:
            out[current].append(token)
    return out


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def join_flags(flags: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    for flag, values in flags.items():
        out.append(flag)
        out.extend(values)
    return out


def apply_changes(base: list[str] | tuple[str, ...], changes: list[str] | tuple[str, ...]) -> list[str]:
    merged = split_flags(list(base))
    for flag, values in split_flags(list(changes)).items():
        if flag.startswith("--no-"):
            merged.pop("--" + flag[5:], None)
        merged.pop(flag, None)
        merged[flag] = values
    return join_flags(merged)


def effective(profile: Profile, catalogue: dict[str, Profile]) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment of a profile after walking up its parents."""
    chain: list[Profile] = []
    seen: set[str] = set()
    node: Profile | None = profile
    while node is not None:
        if node.name in seen:
            raise ValueError(f"profile {node.name!r} is its own ancestor")
        seen.add(node.name)
        chain.append(node)
        node = catalogue.get(node.parent) if node.parent else None
        if chain[-1].parent and node is None:
            raise ValueError(f"profile {chain[-1].name!r} names an unknown parent {chain[-1].parent!r}")
    args: list[str] = []
    env: dict[str, str] = {}
    for step in reversed(chain):
        args = apply_changes(args, step.args)
        env.update(dict(step.env))
    return args, env


def diff_against_parent(profile: Profile) -> list[str]:
    """Human-readable lines: what this profile changes relative to its parent."""
    lines = [f"{flag} {' '.join(values)}".strip() for flag, values in split_flags(list(profile.args)).items()]
    lines += [f"env {k}={v}" for k, v in profile.env]
    return lines


PRESETS: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("vllm-defaults", "vLLM's own defaults for the model"),
        Profile(
            "default",
            "embedded default: eager start (~26 s on CPU), 8k context",
            args=("--enforce-eager",),
            parent="vllm-defaults",
        ),
        Profile(
            "compiled",
            "compiled graphs: slower start, faster decode",
            args=("--no-enforce-eager",),
            parent="default",
        ),
    )
}
