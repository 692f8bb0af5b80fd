-- The administrator role of multi-tenant model selection (members see every tenant's rows,
-- run the coordinator (run_scheduler) and schedule it with pg_cron) and of the training
-- catalog (members see every role's runs). Roles are cluster-wide, so the role is created
-- only when missing (another database may have created it).
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'groupml_admin') THEN
        CREATE ROLE groupml_admin NOLOGIN;
    END IF;
END
$do$;
COMMENT ON ROLE groupml_admin IS
  'groupml administrator: members see all tenants, jobs, candidates and observations and may CALL groupml.run_scheduler; they also see every role''s training runs and what belongs to them (snapshot rows only with SELECT on the source). GRANT groupml_admin TO <coordinator role>.';
