"""The seam between the fleet and the coding agent.

The fleet builds an agent for a session through an :data:`AgentFactory` from an
:class:`AgentSetup` (everything the agent needs: root, task, endpoint, the history and
state to resume from, callbacks) and drives it through the small :class:`AgentHandle`
protocol. :func:`real_agent_factory` wraps ``workstation.agent.Agent``; tests may pass
their own factory to drive the fleet deterministically.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from workstation.core.approvals import ApprovalDecision, ApprovalRequest
from workstation.core.endpoints import Endpoint
from workstation.core.errors import UserError
from workstation.core.requests import OpenRequests, PromptLedger, RequestRecord, TokenObserver
from workstation.fleet.session import SessionSpec

if TYPE_CHECKING:
    from workstation.engine.chat_client import ChatClient

Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]
RequestObserver = Callable[[RequestRecord], None]

META_KEYS = ("mode", "protocol", "turns", "pending_question_call", "completed", "needs_input",
             "context_tokens", "files_read", "files_changed", "commands_run")
"""The parts of an agent snapshot the fleet keeps besides the messages (which it rebuilds
from the transcript)."""


@dataclass(frozen=True, slots=True)
class AgentSetup:
    session_id: str
    name: str
    root: Path
    """The session's worktree: the agent's jail."""
    task: str
    spec: SessionSpec
    endpoint: Endpoint
    history: list[dict[str, Any]]
    """Messages to resume from (empty: a fresh start with ``task``)."""
    user_message: str | None
    """A follow-up from the user to add before continuing (answer, new instruction)."""
    on_event: Callable[[object], None]
    approver: Approver | None
    """None when nobody can approve (headless): such actions are refused to the model."""
    generation_slot: Callable[[], AbstractAsyncContextManager[Any]]
    agent_meta: dict[str, Any] = field(default_factory=dict)
    """What the fleet kept of the agent's state besides messages (see :data:`META_KEYS`)."""
    command_env: dict[str, str] = field(default_factory=dict)
    """Variables the agent's commands get on top of the scrubbed environment (the
    session's ports: ``WORKSTATION_PORT`` …)."""
    user_images: tuple[str, ...] = ()
    """Images (paths) that go with ``user_message``."""


class AgentHandle(Protocol):
    """What the fleet needs of an agent."""

    async def run(self) -> Any:
        """Work until done, needing input, stopped, failed; the result (or the last
        ``RunFinished`` event) carries ``status`` (``RunStatus``) and ``message``."""
        ...

    def stop(self) -> None:
        ...


AgentFactory = Callable[[AgentSetup], "AgentHandle | Awaitable[AgentHandle]"]


async def build_agent(factory: AgentFactory, setup: AgentSetup) -> AgentHandle:
    made = factory(setup)
    if inspect.isawaitable(made):
        made = await made
    return made  # type: ignore[return-value]


def meta_of(agent: object) -> dict[str, Any] | None:
    """The resumable state of a real agent, without its messages; None for other handles."""
    snap = getattr(agent, "snapshot", None)
    if not callable(snap):
        return None
    import orjson

    data = orjson.loads(snap().to_json())
    return {k: data[k] for k in META_KEYS if k in data}


class real_agent_factory:  # noqa: N801 - used like a function: real_agent_factory(http)
    """Sessions run ``workstation.agent.Agent`` over the shared HTTP client.

    ``context_window_tokens``: the model's context length; None asks each endpoint once
    (vLLM reports ``max_model_len``). ``overrides``: further ``AgentConfig`` fields.
    Before the first agent on an endpoint (and again after the endpoint came back from a
    restart, :meth:`endpoint_back`) the shared system prompt and tools are computed once
    (``prime_prefix_cache``), so 32 sessions starting together hit the prefix cache instead
    of all computing the same prefix in one scheduler step.
    Every model request of its agents and of the priming is reported to
    :attr:`request_observers` as a :class:`~workstation.core.requests.RequestRecord`.
    """

    def __init__(self, http: httpx.AsyncClient, *, context_window_tokens: int | None = None,
                 overrides: dict[str, Any] | None = None, prime: bool = True, streams: Any = None,
                 open_requests: OpenRequests | None = None) -> None:
        """``streams``: a :class:`~workstation.engine.stream_worker.StreamWorker` that reads the
        agents' chat streams off the loop (None: over ``http`` on the loop). ``open_requests``:
        the app's one count of requests open per endpoint (what a safe switch drains)."""
        self.http = http
        self.streams = streams
        self.context_window_tokens = context_window_tokens
        self.overrides = dict(overrides or {})
        self.prime = prime
        self._windows: dict[str, int] = {}
        self._sizes: dict[str, int | None] = {}
        self._primed: dict[str, asyncio.Task[None]] = {}
        self.app_mcp_servers: tuple[Any, ...] = ()
        """MCP servers every session gets (settings ``agent.mcp_config``); a session's own
        server of the same name wins."""
        self.app_rules = True
        self.model_takes_images: bool | None = None
        """The setting ``agent.model_takes_images``; None asks each endpoint's model config."""
        self._images: dict[str, bool | None] = {}
        self.request_observers: list[RequestObserver] = []
        """One list, shared by every chat client this factory made or will make: an observer
        added here sees each model request (one record per request, with its ``n``)."""
        self.token_observers: list[TokenObserver] = []
        """One list, shared by every chat client this factory made or will make: told each
        streamed delta's generated tokens of a session (``(session_id, tokens)``)."""
        self.open_requests = open_requests if open_requests is not None else OpenRequests()
        self.prompt_ledger = PromptLedger()
        """One for the fleet: each record says which earlier request of any session its prompt
        repeats the most of (kept only while observers listen)."""

    def _client(self, endpoint: Endpoint, model: str | None, session_id: str | None = None) -> ChatClient:
        from workstation.engine.chat_client import ChatClient

        client = ChatClient(self.http, endpoint, model=model, session_id=session_id, streams=self.streams)
        client.observers = self.request_observers  # the same list, not a copy
        client.token_observers = self.token_observers
        client.ledger = self.prompt_ledger
        client.open_requests = self.open_requests
        return client

    @classmethod
    def from_settings(cls, http: httpx.AsyncClient, settings: Any, **kwargs: Any) -> real_agent_factory:
        """The factory the app, ``run`` and ``demo`` use: agents' commands run under the
        sandbox policy of ``settings.sandbox`` (bubblewrap, limits, hidden secrets); models up
        to ``settings.agent.guided_max_parameters`` get the guided protocol."""
        from workstation.agent.sandbox import SandboxPolicy

        overrides = {"sandbox": SandboxPolicy.from_settings(settings),
                     "guided_max_parameters": settings.agent.guided_max_parameters,
                     **kwargs.pop("overrides", {})}
        agent = settings.agent
        overrides.setdefault("rules_max_chars", agent.rules_max_chars)
        made = cls(http, overrides=overrides, **kwargs)
        made.app_rules = agent.rules
        from workstation.agent.model_info import images_setting

        made.model_takes_images = images_setting(settings)
        if agent.mcp_config is not None:
            from workstation.agent.mcp_servers import load_servers

            made.app_mcp_servers = load_servers(agent.mcp_config)
        return made

    def endpoint_back(self, name: str) -> None:
        """The endpoint restarted: its caches are empty (prime again, ask its window again)."""
        for key in [k for k in self._primed if k == name or k.startswith(name + "/")]:
            self._primed.pop(key, None)
        self._windows.pop(name, None)
        self._images.pop(name, None)
        self._sizes.pop(name, None)

    async def _prime_once(self, endpoint: Endpoint, config: Any, adapter: str | None = None) -> None:
        """Once per endpoint and model (an adapter's requests do not share the base model's cache)."""
        from workstation.agent.protocols import choose_protocol, prime_prefix_cache

        key = f"{endpoint.name}/{adapter}" if adapter else endpoint.name
        task = self._primed.get(key)
        if task is None:
            protocol, _ = choose_protocol(config, endpoint)
            client = self._client(endpoint, adapter)

            async def prime() -> None:
                await prime_prefix_cache(client, protocol)

            task = self._primed[key] = asyncio.create_task(prime(), name=f"fleet-prime-{key}")
        await asyncio.shield(task)

    async def __call__(self, setup: AgentSetup) -> AgentHandle:
        from workstation.agent import Agent, AgentConfig, AgentSnapshot
        from workstation.agent.images import load_images
        from workstation.agent.mcp_servers import merge_servers, servers_from_json
        from workstation.agent.model_info import fetch_context_window, fetch_model_parameters
        from workstation.core.agent_events import AgentMode, ToolProtocol
        from workstation.core.approvals import ApprovalPolicy

        spec = setup.spec
        window = self.context_window_tokens or self._windows.get(setup.endpoint.name)
        if window is None:
            window = await fetch_context_window(self.http, setup.endpoint) or 8192
            self._windows[setup.endpoint.name] = window
        takes_images = await self._takes_images(setup.endpoint)
        if setup.endpoint.name not in self._sizes:
            self._sizes[setup.endpoint.name] = await fetch_model_parameters(self.http, setup.endpoint)
        try:
            policy = ApprovalPolicy.parse(spec.auto_approve or ("read",))
        except ValueError as exc:
            raise UserError(str(exc)) from None
        fields: dict[str, Any] = dict(
            mode=AgentMode(spec.mode), approval=policy, user_present=not spec.headless,
            temperature=spec.temperature, context_window_tokens=window,
            rules=spec.rules and self.app_rules, rules_files=tuple(spec.rules_files), rules_root=str(setup.root),
            mcp_servers=merge_servers(self.app_mcp_servers, servers_from_json(spec.mcp_servers)),
            takes_images=takes_images, model_parameters=self._sizes[setup.endpoint.name],
            environment_paths=spec.environment_paths,
        )
        if spec.max_steps is not None:
            fields["max_turns"] = spec.max_steps
        if setup.command_env:
            fields["command_env"] = tuple(sorted(setup.command_env.items()))
        fields.update(self.overrides)
        config = AgentConfig(**fields)
        if spec.adapter:
            from workstation.engine.lora import ensure_adapter

            await ensure_adapter(self.http, setup.endpoint, spec.adapter, spec.adapter_path)
        if self.prime:
            await self._prime_once(setup.endpoint, config, spec.adapter)
        snapshot = None
        if setup.history:
            meta = setup.agent_meta
            snapshot = AgentSnapshot(
                session_id=setup.session_id, messages=list(setup.history),
                mode=AgentMode(meta.get("mode") or spec.mode),
                protocol=ToolProtocol(meta["protocol"]) if meta.get("protocol") else None,
                turns=int(meta.get("turns") or 0),
                pending_question_call=meta.get("pending_question_call"),
                completed=bool(meta.get("completed")), needs_input=bool(meta.get("needs_input")),
                context_tokens=int(meta.get("context_tokens") or 0),
                files_read=list(meta.get("files_read") or ()),
                files_changed=list(meta.get("files_changed") or ()),
                commands_run=list(meta.get("commands_run") or ()),
            )
        agent = Agent(
            setup.session_id, setup.root, setup.task,
            self._client(setup.endpoint, spec.adapter, setup.session_id),
            config,
            on_event=setup.on_event, approver=setup.approver,
            generation_slot=setup.generation_slot, snapshot=snapshot,
            task_images=load_images(spec.images) if not setup.history else (),  # later: in the history
        )
        if setup.user_message:
            agent.reply(setup.user_message, load_images(setup.user_images))
        return agent

    async def _takes_images(self, endpoint: Endpoint) -> bool | None:
        """Whether the endpoint's model takes images (the setting, else its config), once per endpoint."""
        from workstation.agent.model_info import fetch_takes_images

        if self.model_takes_images is not None:
            return self.model_takes_images
        if endpoint.name not in self._images:
            self._images[endpoint.name] = await fetch_takes_images(self.http, endpoint)
        return self._images[endpoint.name]
