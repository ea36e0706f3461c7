"""Many sessions: admission, queue, repository attach, persistence, resume. No Qt."""
