-- Engine kinds become an enum in the code (protocol e2fleet.v2): v1 workers could send
-- any text, and workers registered before their first lease had ''. Every stored engine
-- kind is now 'reference' or 'compiled'; anything else was a label nobody could act on.
UPDATE results SET engine_kind = 'reference' WHERE engine_kind NOT IN ('reference', 'compiled');
UPDATE workers SET engine_kind = 'reference' WHERE engine_kind NOT IN ('reference', 'compiled');
UPDATE hw_classes SET engine_kind = 'reference' WHERE engine_kind NOT IN ('reference', 'compiled');
