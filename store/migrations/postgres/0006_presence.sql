-- Who is attached, per node: each node writes, beside its count of a session's peers, the
-- presence entries of those peers (a JSON array, bounded by the gateway's peers per session
-- and the size of each entry), so that any node can answer who is attached on every node.
-- NULL: the node wrote only a count.
ALTER TABLE session_peers ADD COLUMN presence TEXT;
