"""The window's commands over the fleet (:class:`workstation.fleet.service.Fleet`): every
command goes through the fleet — never through widget state (the pending approval a pane
shows is looked up in the fleet's own approval desk)."""

from __future__ import annotations

import json
from pathlib import Path

from workstation.core.approvals import ApprovalDecision
from workstation.core.errors import UserError
from workstation.core.session_state import SessionState
from workstation.fleet.service import Fleet
from workstation.fleet.session import SessionSpec
from workstation.ui.backend import (
    ArchivedSession,
    MergeOutcome,
    MergePlan,
    MergePreview,
    NewSessionRequest,
    ReviewPlan,
    SessionTools,
)

AUTO_APPROVE_CATEGORIES = {
    "ask": ("none",),
    "reads": ("read",),
    "edits": ("read", "edit"),
    "all": ("all",),
}
"""The dialog's policy names → the fleet's auto-approved tool categories (``ask``: every
action asks, reads too; ``none`` because an empty list means the default, reads)."""


def spec_from_request(request: NewSessionRequest) -> SessionSpec:
    from workstation.agent.images import load_images
    from workstation.agent.mcp_servers import load_servers, servers_json

    clone = bool(request.clone_url)
    load_images(request.images)  # a file that went away or is no image: said now
    return SessionSpec(
        adapter=request.adapter or None, images=tuple(request.images),
        mcp_servers=servers_json(load_servers(request.mcp_config)) if request.mcp_config else "",
        task=request.task,
        repo=request.clone_url if clone else request.repo_path,
        name=request.name or None,
        base_branch=request.base_branch or None,
        clone=clone,
        mode=request.mode,
        auto_approve=AUTO_APPROVE_CATEGORIES.get(request.auto_approve, ("read",)),
        endpoint=request.endpoint_name or None,
    )


class FleetCommands:
    """Implements :class:`workstation.ui.backend.SessionCommands`."""

    def __init__(self, fleet: Fleet, *, adapters: tuple[str, ...] = (), takes_images: bool | None = None,
                 model: str = "") -> None:
        """``adapters``: the LoRA adapters the engine serves; ``takes_images``: whether its model
        does (from its config); ``model``: its name, for the reason when it does not."""
        self.fleet = fleet
        self.recent: list[str] = []
        self.adapters = tuple(adapters)
        self.takes_images = takes_images
        self.model = model

    def adapter_names(self) -> list[str]:
        return list(self.adapters)

    def images_refusal(self) -> str:
        from workstation.agent.images import refusal

        return "" if self.takes_images is True else refusal(self.model or "the model", self.takes_images)

    def attachments_dir(self) -> str:
        return str(Path(self.fleet.data_dir) / "attachments")

    async def refresh_recent(self) -> None:
        """The repositories sessions were made on, newest first, those still there (a demo run
        deletes the sample repositories of the one before)."""
        self.recent = [p for p in await self.fleet.store.known_repos() if Path(p).is_dir()][:20]

    async def create_sessions(self, request: NewSessionRequest) -> None:
        await self.fleet.create_sessions(spec_from_request(request), max(1, request.copies), start=True)
        if request.repo_path and request.repo_path not in self.recent:
            self.recent.insert(0, request.repo_path)

    async def start_all(self) -> None:
        await self.fleet.start_all()

    async def pause_all(self) -> None:
        await self.fleet.pause_all()

    async def toggle_pause(self, session_id: str) -> None:
        state = self.fleet.summary(session_id).state
        if state is SessionState.PAUSED:
            await self.fleet.resume(session_id)
        elif state.is_active:
            await self.fleet.pause(session_id)
        elif state in (SessionState.READY, SessionState.STOPPED):
            await self.fleet.start_session(session_id)

    def _request_id(self, session_id: str) -> str:
        for request in self.fleet.pending_approvals():
            if request.session_id == session_id:
                return request.request_id
        raise UserError("that session has no pending approval")

    def waiting_actions(self) -> dict[str, str]:
        actions: dict[str, str] = {}
        for request in self.fleet.pending_approvals():
            actions.setdefault(request.session_id, request.summary or request.tool)
        return actions

    async def approve(self, session_id: str, edited_arguments: str | None = None) -> None:
        request_id = self._request_id(session_id)
        if edited_arguments is None:
            decision = ApprovalDecision.approve()
        else:
            try:
                arguments = json.loads(edited_arguments)
            except json.JSONDecodeError as exc:
                raise UserError(f"the edited arguments are not valid JSON: {exc}") from None
            if not isinstance(arguments, dict):
                raise UserError("the edited arguments must be a JSON object")
            decision = ApprovalDecision.edit(arguments)
        self.fleet.resolve_approval(session_id, request_id, decision)

    async def deny(self, session_id: str, feedback: str) -> None:
        self.fleet.resolve_approval(session_id, self._request_id(session_id), ApprovalDecision.deny(feedback))

    async def follow_up(self, session_id: str, text: str, images: tuple[str, ...] = ()) -> None:
        if images and self.takes_images is not True:
            raise UserError(self.images_refusal())
        await self.fleet.reply(session_id, text, images=tuple(images))

    async def diff(self, session_id: str) -> str:
        diff = await self.fleet.diff(session_id)
        return diff.patch

    async def integrate(self, session_id: str, action: str) -> None:
        summary = self.fleet.summary(session_id)
        if action == "commit":
            first = summary.task.strip().splitlines()[0] if summary.task.strip() else summary.name
            await self.fleet.commit(session_id, f"{summary.name}: {first}"[:200])
        elif action == "merge":
            await self.fleet.integrate(session_id)
        elif action == "discard":
            await self.fleet.discard(session_id)
        else:
            raise UserError(f"unknown action {action!r}")

    # ----- worktree tools: ready mark, dev server, setup, merge queue -----
    def session_tools(self, session_id: str) -> SessionTools:
        rec = self.fleet.record(session_id)
        server = self.fleet.dev_server(session_id)
        price = self.fleet.costs.price
        cost = self.fleet.costs.cost_usd(rec)
        spent = f"{rec.prompt_tokens + rec.completion_tokens:,} tokens"
        if cost is not None and price is not None:
            spent += f", ${cost:,.4f} at {price.model} prices"
        return SessionTools(
            ready=bool(rec.ready_at), working=rec.state.is_active or rec.state is SessionState.PREPARING,
            run_command=rec.spec.run_command or "", server_url=server.url if server is not None else "",
            setup_command=rec.spec.setup_command or "", state=rec.state.value, active=rec.state.is_active,
            name=rec.name, branch=rec.branch, worktree=rec.worktree_path, repo=rec.repo_path,
            background=rec.spec.background, budget_tokens=rec.spec.budget_tokens, budget_usd=rec.spec.budget_usd,
            spent=spent, priced=price is not None)

    async def mark_ready(self, session_id: str, ready: bool) -> None:
        await self.fleet.mark_ready(session_id, ready)

    async def dev_server(self, session_id: str, start: bool) -> None:
        if start:
            await self.fleet.start_dev_server(session_id, attended=True)
        else:
            await self.fleet.stop_dev_server(session_id)

    async def run_setup(self, session_id: str) -> None:
        await self.fleet.run_setup(session_id)

    # ----- scheduling: focus, background, budget -----
    def set_focus(self, session_id: str | None) -> None:
        self.fleet.scheduling.set_focus(session_id)

    async def set_background(self, session_id: str, background: bool) -> None:
        await self.fleet.scheduling.set_background(session_id, background)

    async def set_budget(self, session_id: str, tokens: int | None, usd: float | None) -> None:
        await self.fleet.scheduling.set_budget(session_id, tokens=tokens, usd=usd)

    def merge_plan(self) -> MergePlan:
        """The ready sessions in the order marked; the first one's base branch and its
        repository's gate (settings' ``repos``) as the defaults."""
        from workstation.fleet.bootstrap import repo_settings

        ready = sorted((self.fleet.record(s.session_id) for s in self.fleet.sessions() if s.ready),
                       key=lambda r: r.ready_at)
        if not ready:
            return MergePlan()
        conf = repo_settings(self.fleet.bootstrap.options.repos, Path(ready[0].repo_path))
        return MergePlan(tuple(r.name for r in ready), ready[0].base_branch, conf.gate if conf is not None else "")

    async def merge_preview(self, into: str) -> MergePreview:
        """Where ``into`` is checked out, and the ready sessions' commits that would land there."""
        from workstation.fleet.review import merge_facts
        from workstation.fleet.workspace_ops import workspace_of

        ready = sorted((self.fleet.record(s.session_id) for s in self.fleet.sessions() if s.ready),
                       key=lambda r: r.ready_at)
        commits: list[str] = []
        checkouts: dict[str, str] = {}
        for rec in ready:
            facts = await merge_facts(self.fleet.git, workspace_of(rec))
            commits += [f"{rec.name}: {c}" for c in facts.commits]
            checkouts.update(facts.checkouts)
        return MergePreview(into, checkouts.get(into, ""), tuple(commits))

    async def merge_ready(self, into: str, gate: str, rebase: bool) -> str:
        report = await self.fleet.merge_ready(into=into, gate=gate, rebase=rebase)
        if report.ok:
            return f"merge queue: {len(report.merged)} session(s) merged into {into}: {', '.join(report.merged)}"
        return (f"merge queue stopped{' at ' + report.stopped_at if report.stopped_at else ''}: "
                f"{report.reason}; {into} is unchanged")

    # ----- review: commit, one-step merge (through the merge queue), discard -----
    async def review_plan(self, session_id: str) -> ReviewPlan:
        from workstation.core import agent_events as ev
        from workstation.fleet.bootstrap import repo_settings
        from workstation.fleet.review import merge_facts, suggested_message
        from workstation.fleet.workspace_ops import workspace_of

        rec = self.fleet.record(session_id)
        diff = await self.fleet.diff(session_id)
        facts = await merge_facts(self.fleet.git, workspace_of(rec))
        results = [e.result for _seq, e in await self.fleet.transcript(session_id) if isinstance(e, ev.TaskCompleted)]
        conf = repo_settings(self.fleet.bootstrap.options.repos, Path(rec.repo_path))
        waiting = self.waiting_actions().get(session_id, "")
        return ReviewPlan(
            session_id, rec.name, rec.branch, rec.base_branch,
            suggested_message(rec.name, rec.spec.task, diff, results[-1] if results else ""),
            files=tuple(f"{f.path}  " + ("binary" if f.added is None else f"+{f.added} −{f.removed}")
                        for f in diff.files),
            commits=facts.commits, uncommitted=len(facts.uncommitted), branches=facts.branches,
            checkouts=tuple(facts.checkouts.items()), gate=conf.gate if conf is not None else "",
            working=rec.state.is_working, waiting_action=waiting)

    async def commit(self, session_id: str, message: str) -> str:
        return (await self.fleet.commit(session_id, message)).message

    async def merge_one(self, session_id: str, message: str, into: str, rebase: bool, gate: str) -> MergeOutcome:
        """Commit its changes with ``message``, then merge it through the merge queue (gated
        by ``gate`` when one is given); merged, it goes to the archive."""
        rec = self.fleet.record(session_id)
        if rec.state is SessionState.AWAITING_APPROVAL:  # the dialog said: its waiting action is withdrawn
            await self.fleet.pause(session_id)
        await self.fleet.mark_ready(session_id, True, message=message.strip() or None)
        report = await self.fleet.merge_ready(into=into, gate=gate, rebase=rebase, names=[rec.name],
                                              require_gate=bool(gate.strip()))
        if report.ok and report.merged:
            return MergeOutcome(True, f"{rec.name} merged into {into} ({(report.commit or '')[:10]})")
        if report.ok:
            await self.fleet.mark_ready(session_id, False)
            return MergeOutcome(False, f"nothing to merge: {rec.branch} has nothing {into} lacks")
        await self.fleet.mark_ready(session_id, False)
        return MergeOutcome(False, f"{report.reason}; {into} is unchanged", tuple(report.conflicts))

    async def discard(self, session_id: str) -> str:
        return (await self.fleet.discard(session_id)).message

    # ----- lifecycle -----
    async def stop(self, session_id: str) -> None:
        await self.fleet.stop(session_id)

    async def restart(self, session_id: str) -> None:
        """Stop what it does and start it again (its agent resumes from its history)."""
        await self.fleet.stop(session_id)
        await self.fleet.start_session(session_id)

    async def rename(self, session_id: str, name: str) -> None:
        await self.fleet.shelf.rename(session_id, name)

    async def archive(self, session_id: str) -> None:
        if self.fleet.record(session_id).state.is_active:
            await self.fleet.stop(session_id)
        self.fleet.shelf.archive(session_id, "archived by you")

    async def unarchive(self, session_id: str) -> None:
        self.fleet.shelf.unarchive(session_id)

    async def remove(self, session_id: str) -> None:
        await self.fleet.remove(session_id)

    async def restore_checkpoint(self, session_id: str, commit: str, files: bool, conversation: bool) -> None:
        if self.fleet.record(session_id).state.is_active:
            await self.fleet.pause(session_id)
        await self.fleet.restore_checkpoint(session_id, commit, files=files, conversation=conversation)

    def archived_sessions(self) -> list[ArchivedSession]:
        return [ArchivedSession(s.session_id, s.name, s.archived, s.branch, s.repo_path)
                for s in self.fleet.sessions() if s.archived]

    def endpoint_names(self) -> list[str]:
        return [e.name for e in self.fleet.router.endpoints]

    def recent_repositories(self) -> list[str]:
        return list(self.recent)
