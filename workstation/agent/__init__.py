"""The coding agent: loop, tools, protocols, approvals, checkpoints, context. No Qt."""
