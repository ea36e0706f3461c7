"""Many sessions: admission, queue, repository attach, persistence, resume. No Qt.

API in one page (for the UI, the CLI and benchmarks)
===================================================

::

    from workstation.fleet import SessionSpec
    from workstation.core.session_state import SessionState          # states + legal moves
    from workstation.core import fleet_events as fe                  # what the fleet emits

    fleet = services.fleet()                             # workstation.services.Services: the one
                                                         # place a Fleet is built (data dir, the
                                                         # live engine it follows, agents under the
                                                         # sandbox policy, max_generating) — or
                                                         # services.fleet(endpoints=[…], data_dir=…)
    fleet.changed.connect(on_fleet_event)                # psygnal: every fleet event but agent ones
    fleet.agent_event.connect(on_agent_event)            # psygnal: fe.SessionAgentEvent (hot path)
    await fleet.start()      # opens the store, brings sessions back, resumes working ones,
                             # emits OrphanWorktreesFound if any
    made = await fleet.create_sessions(SessionSpec(task="…", repo="~/src/app"), count=4)
    await fleet.start_session(made[0].session_id)
    …
    await fleet.aclose()     # drivers end; states stay persisted, so the next start resumes

Sessions (``SessionSpec`` → ``SessionSummary``)
    ``create_session(spec)`` / ``create_sessions(spec, n)`` ("run this task N times"):
    ``spec.repo`` is a local repository (``init_if_plain=True`` lets a plain folder be
    ``git init``-ed), or a URL/path to clone with ``clone=True`` (progress as
    ``AttachProgress``). Each session gets its own worktree under
    ``<data_dir>/worktrees/<repo>-<hash>/<name>`` on a new branch ``ws/<name>`` from
    ``spec.base_branch`` (default: the checked-out branch). All checks run first; a failure
    raises ``UserError`` with a plain message and leaves nothing behind.
    ``duplicate(sid, n)``, ``remove(sid, keep_worktree=False)`` / ``remove_many(ids)``
    (worktree, branch and checkpoint refs go too), ``await disk_usage(sid)`` (bytes),
    ``set_mode(sid, "plan" | "act")``.

Bootstrap and ports (``bootstrap.py``, ``ports.py``)
    ``services.fleet()`` passes ``sandbox=SandboxPolicy.from_settings(settings)`` and
    ``bootstrap=BootstrapOptions.from_settings(settings)`` to every fleet. Per repository (``repos`` in
    settings, or the spec's ``copy_files`` / ``link_files`` / ``setup_command`` / ``ports`` /
    ``run_command``): files copied or linked into each new worktree, a setup command run
    once inside the sandbox (output in the transcript as a ``setup`` tool call; a failure
    leaves the session ``FAILED`` and not started; ``run_setup(sid)`` runs it again). Every
    session has its own block of ports (``fleet.ports.get(sid)``), in its commands'
    environment as ``WORKSTATION_PORT``, ``WORKSTATION_PORT_COUNT``, ``WORKSTATION_PORT_1`` ….

Dev server and merge queue (``dev_server.py``, ``merge_queue.py``)
    ``await start_dev_server(sid)`` → ``DevServerStatus`` (its ``url``), ``stop_dev_server(sid)``,
    ``dev_server(sid)``: the repository's ``run`` command in the sandbox on the session's
    ports (reached through the port bridge where the sandbox has no network), stopped with
    the session (``DevServerChanged``). ``mark_ready(sid, ready=True)`` commits the session's
    work and marks it (``SessionReadyChanged``); ``merge_ready(into=, gate=, rebase=False)``
    → ``MergeReport`` merges the ready sessions in order in a trial worktree, gating each,
    and moves the target only when all passed.

Running
    ``start_session(sid)``, ``start_all()``, ``pause(sid)`` / ``pause_all()`` (immediate: an
    in-flight model turn is dropped and retried on resume, a running tool is reported to the
    model as interrupted, never run twice), ``resume(sid)``, ``stop(sid)``,
    ``reply(sid, text)`` (answer a question, or a follow-up after done),
    ``resolve_approval(sid, request_id, ApprovalDecision…)``, ``pending_approvals()``,
    ``set_max_generating(n)``, ``await wait_settled()`` (nothing working, nothing waiting for
    an engine). ``fleet.streams`` is the app's one token counter (the meters read it);
    ``tokens_per_s(sid)`` / ``tokens_per_s_total()`` read it. A session whose engine stops
    answering goes to ``ENGINE_WAIT`` and continues by itself when the engine is back (``EndpointAvailabilityChanged``);
    ``update_endpoint(endpoint)`` after a managed engine restarted on a new port/key (same
    name) moves its sessions there. With several endpoints a new session goes to the least
    loaded one and stays there (prefix-cache locality).

Reading
    ``sessions()`` / ``summary(sid)`` → ``SessionSummary`` (state, repo, worktree, branch,
    tokens, tok/s, error); ``await transcript(sid, after_seq=0)`` → ``[(seq, agent_event)]``
    from the store (all agent events but per-token pieces); live ``SessionAgentEvent.seq``
    continues that numbering. ``await checkpoints(sid)``; ``await restore_checkpoint(sid,
    commit, files=True, conversation=True)`` (paused or finished sessions).

Review
    ``await diff(sid)`` → ``SessionDiff`` (files with +/-, patch) against the merge base;
    ``commit(sid, message)``; ``integrate(sid, rebase=False)`` merges (or rebases) ``ws/<name>``
    into its base, refusing with a ``UserError`` on conflicts (``MergeConflict.paths``),
    uncommitted changes, or a dirty base checkout — nothing is overwritten;
    ``discard(sid, keep_commits=False)``. Each emits ``SessionIntegrated``.

Orphans
    ``fleet.orphans`` (found at start), ``await scan_orphans()``, ``await remove_orphans()``.

Events (``workstation.core.fleet_events``): ``SessionCreated``, ``SessionStateChanged``,
``SessionRemoved``, ``SessionStatsChanged`` (≤ 2 Hz per session), ``AttachProgress``,
``GenerationSlotsChanged``, ``OrphanWorktreesFound``, ``EndpointAvailabilityChanged``,
``SessionIntegrated`` on ``changed``; ``SessionAgentEvent`` on ``agent_event``. They are
emitted on the event loop's thread; the UI bridge re-emits them on the GUI thread.

Persistence: SQLite (WAL) at ``<data_dir>/store.sqlite3`` — sessions and their settings,
the event transcript (appended in batches), checkpoints, app settings, known repositories.
Git runs as short-lived subprocesses (``gitproc.GitRunner``), SQLite on its own thread.
"""

from workstation.fleet.agent_bridge import AgentFactory, AgentHandle, AgentSetup, real_agent_factory
from workstation.fleet.review import IntegrateResult, MergeConflict, SessionDiff
from workstation.fleet.service import Fleet
from workstation.fleet.session import SessionRecord, SessionSpec

__all__ = [
    "AgentFactory", "AgentHandle", "AgentSetup", "Fleet", "IntegrateResult", "MergeConflict",
    "SessionDiff", "SessionRecord", "SessionSpec", "real_agent_factory",
]
