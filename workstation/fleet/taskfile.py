"""A TOML file of tasks and repositories for a headless fleet run.

::

    # defaults for every [[session]] (all optional)
    [defaults]
    repo = "~/src/project"          # local folder, or `url` to clone instead
    base = "main"
    mode = "act"                    # or "plan"
    auto_approve = "read,edit"      # all | none | read,edit,command,other
    max_steps = 30
    rules = ["team-rules.md"]       # more rules files (the repository's AGENTS.md … always,
                                    #   unless rules = false)
    mcp_config = "mcp.json"         # MCP servers in the usual {"mcpServers": …} JSON shape
    images = ["screenshot.png"]     # with the task, for a model that takes images
    adapter = "house-style"         # a LoRA adapter the engine serves (its requests name it);
                                    #   or { name = "x", path = "adapters/x" } to load it at run time
    # worktree bootstrap (per repository; settings' `repos` say the same where these are absent)
    copy = [".env", { link = "node_modules" }]   # copied / linked from the main checkout
    setup = "npm ci --offline"      # run once in each new worktree, inside the sandbox
    ports = 2                       # WORKSTATION_PORT, WORKSTATION_PORT_1, _2 in commands
    run = "npm run dev -- --port $WORKSTATION_PORT"   # dev server, started from the pane

    [defaults.mcp_servers.notes]    # … or inline, in the same shape (these win by name)
    command = "python"
    args = ["notes_server.py"]

    [[session]]
    task = "Add a --verbose flag to the CLI"
    name = "verbose-flag"           # branch ws/verbose-flag
    count = 1                       # run this task N times (names get -1, -2 …)

    [[session]]
    task = "Fix the flaky test in tests/test_io.py"
    url = "https://example.com/other.git"

Relative ``repo`` paths are relative to the file. Unknown keys are refused by name.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workstation.core.errors import UserError
from workstation.fleet.bootstrap import split_copy_entries
from workstation.fleet.ports import MAX_PORTS_PER_SESSION
from workstation.fleet.session import SessionSpec

_KEYS = {"task", "repo", "url", "name", "base", "mode", "auto_approve", "count", "max_steps",
         "init", "endpoint", "temperature", "shared_links", "rules", "copy", "setup", "ports", "run",
         "mcp_config", "mcp_servers", "images", "adapter"}


@dataclass(frozen=True, slots=True)
class TaskEntry:
    spec: SessionSpec
    count: int


def load_taskfile(path: Path | str, *, headless: bool = True) -> list[TaskEntry]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"task file {p} does not exist" if not p.exists() else f"{p} is not a file")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"task file {p} is not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read task file {p}: {exc}") from None
    unknown_top = set(data) - {"defaults", "session"}
    if unknown_top:
        raise UserError(f"task file {p}: unknown table(s) {', '.join(sorted(unknown_top))}",
                        hint="use [defaults] and [[session]]")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise UserError(f"task file {p}: [defaults] must be a table")
    _check_keys(p, "[defaults]", defaults, allow_task=False)
    sessions = data.get("session", [])
    if not isinstance(sessions, list) or not sessions:
        raise UserError(f"task file {p} has no [[session]] entries")
    entries: list[TaskEntry] = []
    for i, raw in enumerate(sessions, 1):
        where = f"[[session]] #{i}"
        if not isinstance(raw, dict):
            raise UserError(f"task file {p}: {where} must be a table")
        _check_keys(p, where, raw, allow_task=True)
        merged = {**defaults, **raw}
        entries.append(_entry(p, where, merged, headless))
    return entries


def _check_keys(p: Path, where: str, table: dict[str, Any], *, allow_task: bool) -> None:
    unknown = set(table) - _KEYS
    if not allow_task:
        unknown |= set(table) & {"task", "name", "count"}
    if unknown:
        raise UserError(f"task file {p}: {where} has unknown or misplaced key(s) "
                        f"{', '.join(sorted(unknown))}", hint=f"known: {', '.join(sorted(_KEYS))}")


def _entry(p: Path, where: str, d: dict[str, Any], headless: bool) -> TaskEntry:
    def text(key: str, default: str | None = None) -> str | None:
        value = d.get(key, default)
        if value is not None and not isinstance(value, str):
            raise UserError(f"task file {p}: {where}: {key} must be a string")
        return value

    task = text("task")
    if not task or not task.strip():
        raise UserError(f"task file {p}: {where} has no task")
    repo, url = text("repo"), text("url")
    if bool(repo) == bool(url):
        raise UserError(f"task file {p}: {where} needs exactly one of repo = \"PATH\" or url = \"URL\"")
    if repo:
        rp = Path(repo).expanduser()
        repo = str(rp if rp.is_absolute() else (p.parent / rp).resolve())
    count = d.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise UserError(f"task file {p}: {where}: count must be a whole number of at least 1")
    approve = d.get("auto_approve", "read,edit")
    if isinstance(approve, list):
        approve = ",".join(str(a) for a in approve)
    if not isinstance(approve, str):
        raise UserError(f"task file {p}: {where}: auto_approve must be a string like \"read,edit\"")
    max_steps = d.get("max_steps")
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
        raise UserError(f"task file {p}: {where}: max_steps must be a whole number of at least 1")
    temperature = d.get("temperature")
    if temperature is not None and not isinstance(temperature, int | float):
        raise UserError(f"task file {p}: {where}: temperature must be a number")
    links = d.get("shared_links", [])
    if not isinstance(links, list) or not all(isinstance(x, str) for x in links):
        raise UserError(f"task file {p}: {where}: shared_links must be a list of paths")
    rules, rules_files = _rules(p, where, d.get("rules", True))
    copies = linked = None
    if "copy" in d:
        copies, linked = split_copy_entries(d["copy"], f"task file {p}: {where}")
    ports = d.get("ports")
    if ports is not None and (not isinstance(ports, int) or isinstance(ports, bool)
                              or not 1 <= ports <= MAX_PORTS_PER_SESSION):
        raise UserError(f"task file {p}: {where}: ports must be a whole number from 1 to {MAX_PORTS_PER_SESSION}")
    mcp = _mcp(p, where, d.get("mcp_config"), d.get("mcp_servers"))
    images = _images(p, where, d.get("images", []))
    adapter, adapter_path = _adapter(p, where, d.get("adapter"))
    spec = SessionSpec(
        task=task.strip(), repo=repo or url or "", name=text("name"), base_branch=text("base"),
        clone=bool(url), init_if_plain=bool(d.get("init", False)), mode=text("mode", "act") or "act",
        auto_approve=tuple(a.strip() for a in approve.split(",") if a.strip()), headless=headless,
        endpoint=text("endpoint"), max_steps=max_steps,
        temperature=float(temperature) if temperature is not None else None,
        shared_links=tuple(links), rules=rules, rules_files=rules_files,
        copy_files=copies, link_files=linked, setup_command=text("setup"), ports=ports,
        run_command=text("run"), mcp_servers=mcp, images=images, adapter=adapter, adapter_path=adapter_path,
    )
    return TaskEntry(spec, count)


def _rules(p: Path, where: str, value: Any) -> tuple[bool, tuple[str, ...]]:
    """``rules = true | false | ["file.md", …]``: the repository's rules on or off, or on with
    more files (relative to the task file)."""
    if isinstance(value, bool):
        return value, ()
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise UserError(f"task file {p}: {where}: rules must be true, false or a list of rules files")
    files = []
    for name in value:
        path = Path(name).expanduser()
        path = path if path.is_absolute() else (p.parent / path).resolve()
        if not path.is_file():
            raise UserError(f"task file {p}: {where}: rules file {name} does not exist ({path})")
        files.append(str(path))
    return True, tuple(files)


def _mcp(p: Path, where: str, config: Any, inline: Any) -> str:
    """The session's MCP servers (``mcp_config`` file, then ``mcp_servers`` inline) as JSON."""
    from workstation.agent.mcp_servers import load_servers, merge_servers, parse_servers, servers_json

    servers: tuple = ()
    if config is not None:
        if not isinstance(config, str):
            raise UserError(f"task file {p}: {where}: mcp_config must be the path of an mcpServers JSON file")
        path = Path(config).expanduser()
        servers = load_servers(path if path.is_absolute() else p.parent / path)
    if inline is not None:
        servers = merge_servers(servers, parse_servers(inline, f"task file {p}: {where}: mcp_servers"))
    return servers_json(servers)


def _images(p: Path, where: str, value: Any) -> tuple[str, ...]:
    """``images = ["shot.png", …]`` (relative to the task file), each checked now."""
    from workstation.agent.images import load_images

    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise UserError(f"task file {p}: {where}: images must be a list of image files")
    paths = [Path(v).expanduser() for v in value]
    paths = [str(x if x.is_absolute() else (p.parent / x).resolve()) for x in paths]
    try:
        load_images(paths)
    except UserError as exc:
        raise UserError(f"task file {p}: {where}: {exc}") from None
    return tuple(paths)


def _adapter(p: Path, where: str, value: Any) -> tuple[str | None, str | None]:
    """``adapter = "name"`` (served by the engine) or ``{ name = …, path = … }`` (loaded at run time)."""
    if value is None:
        return None, None
    if isinstance(value, str) and value.strip():
        return value.strip(), None
    if isinstance(value, dict) and set(value) <= {"name", "path"} and isinstance(value.get("name"), str):
        path = value.get("path")
        if path is None:
            return value["name"], None
        if not isinstance(path, str):
            raise UserError(f"task file {p}: {where}: adapter path must be a folder")
        folder = Path(path).expanduser()
        folder = folder if folder.is_absolute() else (p.parent / folder).resolve()
        from workstation.engine.lora import read_adapter

        try:
            read_adapter(folder, value["name"])
        except UserError as exc:
            raise UserError(f"task file {p}: {where}: {exc}") from None
        return value["name"], str(folder)
    raise UserError(f"task file {p}: {where}: adapter must be a name, or {{ name = \"…\", path = \"…\" }}")
