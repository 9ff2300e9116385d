-- Why a worker's engines are paused, from its last heartbeat (the pause file, on battery,
-- outside its hours, other programs busy), empty while they run: shown on the dashboard
-- and in `workers` so an operator tells a paused laptop from an idle machine. What a
-- worker says here only labels it; it decides nothing (docs/security.md).
ALTER TABLE workers ADD COLUMN paused TEXT NOT NULL DEFAULT '';
