-- Tenants are ordinary roles: they need to reach the schema. Row-level security on the
-- tenancy tables (not schema privileges) decides which rows each role sees; the
-- foundation's catalog tables stay without grants to PUBLIC.
GRANT USAGE ON SCHEMA @extschema@ TO PUBLIC;
