"""A readable transcript rebuilt from agent events (used by the headless CLI, and by views).

:class:`TranscriptBuilder` folds the event stream into entries (one per assistant reply,
tool call, approval, question …); :func:`render_line` gives one printable line per event
that is worth printing on its own (streamed deltas are joined by the builder instead).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workstation.core import agent_events as ev


@dataclass(slots=True)
class Entry:
    kind: str
    """``assistant``, ``reasoning``, ``tool``, ``approval``, ``question``, ``user``, ``note``,
    ``error``, ``completion``."""
    text: str
    call_id: str = ""
    status: str = ""
    output: list[str] = field(default_factory=list)


class TranscriptBuilder:
    """Folds events into transcript entries; ``entries`` grows as events arrive."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._streaming: Entry | None = None
        self._tools: dict[str, Entry] = {}

    def feed(self, event: ev.AgentEvent) -> None:
        if isinstance(event, ev.TextStreamed):
            if self._streaming is None or self._streaming.kind != "assistant":
                self._streaming = Entry("assistant", "")
                self.entries.append(self._streaming)
            self._streaming.text += event.text
            return
        if isinstance(event, ev.ReasoningStreamed):
            if self._streaming is None or self._streaming.kind != "reasoning":
                self._streaming = Entry("reasoning", "")
                self.entries.append(self._streaming)
            self._streaming.text += event.text
            return
        if isinstance(event, ev.TurnFinished):
            self._streaming = None
            return
        if isinstance(event, ev.ToolCallStarted):
            entry = Entry("tool", event.summary, event.call_id, "running")
            self._tools[event.call_id] = entry
            self.entries.append(entry)
            return
        if isinstance(event, ev.CommandOutputStreamed):
            entry = self._tools.get(event.call_id)
            if entry is not None:
                entry.output.append(event.text)
            return
        if isinstance(event, ev.ToolCallFinished):
            entry = self._tools.get(event.call_id)
            if entry is None:
                entry = Entry("tool", event.tool, event.call_id)
                self.entries.append(entry)
            entry.status = event.status
            entry.output = [event.result]
            return
        line = render_line(event)
        if line is None:
            return
        kind = {
            ev.ApprovalRequested: "approval", ev.ApprovalResolved: "approval", ev.QuestionAsked: "question",
            ev.UserMessageAdded: "user", ev.ErrorOccurred: "error", ev.TaskCompleted: "completion",
        }.get(type(event), "note")
        self.entries.append(Entry(kind, line))

    def text(self) -> str:
        out: list[str] = []
        for e in self.entries:
            if e.kind == "tool":
                out.append(f"[{e.status}] {e.text}")
                body = "".join(e.output).rstrip()
                if body:
                    out.append("    " + body.replace("\n", "\n    "))
            else:
                out.append(e.text if e.kind not in ("assistant", "reasoning") else f"{e.kind}: {e.text}")
        return "\n".join(out)


def _short(text: str, n: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= n else text[:n] + "…"


def render_line(event: ev.AgentEvent) -> str | None:
    """One line for an event, or None for events shown only through the builder."""
    match event:
        case ev.ProtocolSelected(protocol=p, reason=r):
            return f"· protocol {p.value}: {r}"
        case ev.RulesLoaded(files=f, cut=c, left_out=lo, skipped=sk):
            if not (f or lo or sk):
                return None
            line = "· rules: " + (", ".join(f) if f else "none")
            if c:
                line += f" (cut at the cap: {', '.join(c)})"
            if lo:
                line += f" (left out for the cap: {', '.join(lo)})"
            if sk:
                line += f" (not read: {'; '.join(sk)})"
            return line
        case ev.McpServerReady(server=sv, tools=t, error=e, confined=c):
            if e:
                return f"! MCP server {sv}: {e}"
            where = "" if c else " (not confined: each call asks)"
            return f"· MCP server {sv}: {len(t)} tool{'s' if len(t) != 1 else ''}{where}: {', '.join(t) or 'none'}"
        case ev.ModeChanged(mode=m):
            return f"· mode {m.value}"
        case ev.ToolCallStarted(summary=s):
            return f"→ {s}"
        case ev.ToolCallFinished(tool=t, status=st, result=r):
            return f"  {'✓' if st == 'ok' else '✗'} {t} {st}: {_short(r, 400)}"
        case ev.ApprovalRequested(summary=s, reason=r):
            return f"? approval needed for {s} ({r})"
        case ev.ApprovalResolved(approved=a, feedback=f, by=b):
            verdict = "approved" if a else "denied"
            return f"  {verdict} by {b}" + (f": {f}" if f else "")
        case ev.QuestionAsked(question=q, options=o):
            return f"? {q}" + (f"  options: {', '.join(o)}" if o else "")
        case ev.UserMessageAdded(text=t):
            return f"user: {_short(t)}"
        case ev.ImagesAttached(names=n, paths=p, with_task=wt):
            shown = n or tuple(x.rsplit("/", 1)[-1] for x in p)
            return f"▣ {len(shown)} image{'s' if len(shown) != 1 else ''} with the {'task' if wt else 'message'}: " \
                   f"{', '.join(shown)}"
        case ev.MistakeCounted(count=c, limit=lim, message=m):
            return f"! mistake {c}/{lim}: {_short(m, 200)}"
        case ev.CheckpointCreated(commit=c, label=lab):
            return f"· checkpoint {c[:10]} ({_short(lab, 80)})"
        case ev.CheckpointRestored(commit=c, files=f, conversation=cv):
            return f"· restored {c[:10]} (files={f}, conversation={cv})"
        case ev.ContextCondensed(tokens_before=t, messages_before=b, messages_after=a):
            return f"· condensed the conversation: {b} → {a} messages (was ~{t:,} tokens)"
        case ev.ErrorOccurred(message=m, retrying=r):
            return f"! {m}" + (" (retrying)" if r else "")
        case ev.TaskCompleted(result=r):
            return f"✔ completed: {r}"
        case ev.RunFinished(status=s, message=m, turns=t, prompt_tokens=p, completion_tokens=c):
            return f"■ {s.value}: {m} ({t} turns, {p:,} prompt + {c:,} completion tokens)"
    return None
