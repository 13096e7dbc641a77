-- Turns (issue 3): find the latest todo snapshot of a session without
-- scanning its events, and the sessions whose turns a restart must end.
CREATE INDEX events_todos ON events (session_id, seq) WHERE type = 'todo.updated';
CREATE INDEX sessions_with_turn_marker ON sessions (profile, id) WHERE turn_marker IS NOT NULL;
