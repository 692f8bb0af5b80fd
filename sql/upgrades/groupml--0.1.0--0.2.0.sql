-- groupml 0.1.0 -> 0.2.0 (ALTER EXTENSION groupml UPDATE). What changed in the catalog:
\echo Use "ALTER EXTENSION groupml UPDATE TO '0.2.0'" to load this file. \quit

-- runs: the settings a run's group keys were written in; a resume under others is refused
ALTER TABLE @extschema@.runs ADD COLUMN key_settings jsonb;

-- runs: the measured time of what estimated_seconds estimates, beside it
ALTER TABLE @extschema@.runs ADD COLUMN train_seconds float8;

-- candidates: training steps a cancel or statement_timeout ended; the third gives the candidate up
ALTER TABLE @extschema@.candidates ADD COLUMN attempts integer NOT NULL DEFAULT 0;
