CREATE TABLE @extschema@.tenants (
    tenant_id    bigserial PRIMARY KEY,
    name         text NOT NULL UNIQUE CHECK (name <> ''),
    role         regrole NOT NULL,               -- members of this role act as the tenant
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by   name NOT NULL DEFAULT current_user
);
COMMENT ON TABLE @extschema@.tenants IS
  'Multi-tenant model selection: one row per tenant, bound to a role. Row-level security: a role sees the tenants it is a member of; groupml_admin sees all. Create with groupml.create_tenant.';
ALTER TABLE @extschema@.tenants ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenants_own ON @extschema@.tenants
    USING (pg_catalog.pg_has_role(role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY tenants_own ON @extschema@.tenants IS
  'Row-level security: members of the row''s role see and change it; groupml_admin members see and change all rows.';
GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.tenants TO PUBLIC;
GRANT USAGE ON SEQUENCE @extschema@.tenants_tenant_id_seq TO PUBLIC;
GRANT ALL ON @extschema@.tenants TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tenants', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tenants_tenant_id_seq', '');
